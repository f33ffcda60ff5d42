/* Register-resident peak microkernels (peak_flops_kernels.h). Each kernel is compiled for its
 * own instruction set with a target attribute and chosen at run time by cpuid, so one binary
 * measures whatever the machine has.
 *
 * Invariants:
 * 1. The multiplier (one) and the addend (step) reach the kernels as run-time values through a
 *    volatile read, so the compiler can neither fold x * 1 + step into an add nor the loop into
 *    a closed form; the accumulators are stored to out after the loop, so none is dead.
 * 2. Accumulators are independent chains (no value feeds another), enough of them to cover the
 *    instruction's latency at its throughput: 12 ymm (4-cycle FMA on 2 ports needs 8; AVX2 has
 *    16 registers), 16 zmm, 4 AMX tiles (tdpbf16ps: ~52-cycle latency, one every 16 cycles). */
#include "peak_flops_kernels.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ACC_AVX2   12
#define ACC_AVX512 16
#define AMX_TILES  4

static const PeakKernelInfo INFO[PEAK_N_KERNELS] = {
    [PEAK_FMA_AVX2] = {"fma_avx2", "fp32", ACC_AVX2 * 8, 1, ACC_AVX2 * 16.0},
    [PEAK_FMA_AVX512] = {"fma_avx512", "fp32", ACC_AVX512 * 16, 1, ACC_AVX512 * 32.0},
    [PEAK_DOT_AVX512BF16] = {"dot_avx512bf16", "bf16", ACC_AVX512 * 16, 2, ACC_AVX512 * 64.0},
    [PEAK_DOT_AMXBF16] = {"dot_amxbf16", "bf16", AMX_TILES * 256, 32, AMX_TILES * 16384.0},
};

const PeakKernelInfo *peak_kernel_info(PeakKernel k) {
    return &INFO[k];
}

/* ---- availability ---- */

static bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
    unsigned r[4];
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
    return (r[reg] >> bit) & 1u;
}

/* XCR0: the register state the OS saves across context switches (0 when xgetbv is absent). */
static uint64_t xcr0(void) {
    if (!cpuid_bit(1, 0, 2, 27)) return 0; /* OSXSAVE */
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

enum { EAX, EBX, ECX, EDX };

/* Linux hands out AMX tile data state only to a process that asks for it (kernel >= 5.16). */
static bool amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    static int state = -1; /* -1 unknown, 0 refused, 1 granted */
    if (state < 0) {
        const long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
        state = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return state == 1;
#else
    return false;
#endif
}

bool peak_kernel_available(PeakKernel k) {
    uint64_t os = xcr0();
    bool ymm = (os & 0x6) == 0x6, zmm = (os & 0xe6) == 0xe6, tiles = (os & 0x60000) == 0x60000;
    bool avx512f = cpuid_bit(7, 0, EBX, 16);
    switch (k) {
    case PEAK_FMA_AVX2:
        return ymm && cpuid_bit(1, 0, ECX, 12) && cpuid_bit(7, 0, EBX, 5);
    case PEAK_FMA_AVX512:
        return zmm && avx512f;
    case PEAK_DOT_AVX512BF16:
        return zmm && avx512f && cpuid_bit(7, 1, EAX, 5);
    case PEAK_DOT_AMXBF16:
        return tiles && cpuid_bit(7, 0, EDX, 24) && cpuid_bit(7, 0, EDX, 22) && amx_permitted();
    default:
        return false;
    }
}

/* ---- kernels ---- */

#define REP12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define REP16(X) REP12(X) X(12) X(13) X(14) X(15)

/* The two run-time operands (invariant 1). */
static void operands(float step, float *one, float *add) {
    volatile float v_one = 1.0f, v_step = step;
    *one = v_one;
    *add = v_step;
}

__attribute__((target("avx2,fma"), noinline)) static void fma_avx2(long iters, float step,
                                                                   float *out) {
    float one_s, step_s;
    operands(step, &one_s, &step_s);
    __m256 one = _mm256_set1_ps(one_s), add = _mm256_set1_ps(step_s);
    __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), unit = _mm256_set1_ps(PEAK_INIT_UNIT);
#define INIT(i) __m256 a##i = _mm256_mul_ps(_mm256_add_ps(lane, _mm256_set1_ps(8.0f * i)), unit);
    REP12(INIT)
#undef INIT
    for (long it = 0; it < iters; it++) {
#define STEP(i) a##i = _mm256_fmadd_ps(a##i, one, add);
        REP12(STEP)
#undef STEP
    }
#define STORE(i) _mm256_storeu_ps(out + 8 * i, a##i);
    REP12(STORE)
#undef STORE
}

__attribute__((target("avx512f"), noinline)) static void fma_avx512(long iters, float step,
                                                                    float *out) {
    float one_s, step_s;
    operands(step, &one_s, &step_s);
    __m512 one = _mm512_set1_ps(one_s), add = _mm512_set1_ps(step_s);
    __m512 lane = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 unit = _mm512_set1_ps(PEAK_INIT_UNIT);
#define INIT(i) __m512 a##i = _mm512_mul_ps(_mm512_add_ps(lane, _mm512_set1_ps(16.0f * i)), unit);
    REP16(INIT)
#undef INIT
    for (long it = 0; it < iters; it++) {
#define STEP(i) a##i = _mm512_fmadd_ps(a##i, one, add);
        REP16(STEP)
#undef STEP
    }
#define STORE(i) _mm512_storeu_ps(out + 16 * i, a##i);
    REP16(STORE)
#undef STORE
}

/* bf16 bits of a value exact in bf16 (the top half of its fp32 bits). */
static uint16_t bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)(u >> 16);
}

/* A 32-bit word holding the bf16 pair (x, x). */
static int32_t bf16_pair(float x) {
    uint32_t b = bf16_bits(x);
    return (int32_t)(b | (b << 16));
}

__attribute__((target("avx512f,avx512bf16"), noinline)) static void
dot_avx512bf16(long iters, float step, float *out) {
    float one_s, step_s;
    operands(step, &one_s, &step_s);
    __m512bh ones = (__m512bh)_mm512_set1_epi32(bf16_pair(one_s));
    __m512bh steps = (__m512bh)_mm512_set1_epi32(bf16_pair(step_s));
    __m512 lane = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 unit = _mm512_set1_ps(PEAK_INIT_UNIT);
#define INIT(i) __m512 a##i = _mm512_mul_ps(_mm512_add_ps(lane, _mm512_set1_ps(16.0f * i)), unit);
    REP16(INIT)
#undef INIT
    for (long it = 0; it < iters; it++) {
#define STEP(i) a##i = _mm512_dpbf16_ps(a##i, ones, steps);
        REP16(STEP)
#undef STEP
    }
#define STORE(i) _mm512_storeu_ps(out + 16 * i, a##i);
    REP16(STORE)
#undef STORE
}

/* AMX tile configuration (palette 1): tiles 0-3 the fp32 accumulators, 4-5 the A operands
 * (16 rows of 32 bf16), 6-7 the B operands (16 rows of 16 bf16 pairs), all 16 x 64 bytes. */
typedef struct {
    uint8_t palette_id, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

__attribute__((target("amx-tile,amx-bf16"), noinline)) static void
dot_amxbf16(long iters, float step, float *out) {
    float one_s, step_s;
    operands(step, &one_s, &step_s);
    TileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    static _Thread_local int32_t a[256], b[256];
    for (int i = 0; i < 256; i++) {
        a[i] = bf16_pair(one_s);
        b[i] = bf16_pair(step_s);
    }
    for (int i = 0; i < AMX_TILES * 256; i++)
        out[i] = (float)i * PEAK_INIT_UNIT;
    _tile_loadconfig(&cfg);
    _tile_loadd(0, out, 64);
    _tile_loadd(1, out + 256, 64);
    _tile_loadd(2, out + 512, 64);
    _tile_loadd(3, out + 768, 64);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b, 64);
    for (long it = 0; it < iters; it++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_stored(1, out + 256, 64);
    _tile_stored(2, out + 512, 64);
    _tile_stored(3, out + 768, 64);
    _tile_release();
}

double peak_kernel_run(PeakKernel k, long iters, float step, float *out) {
    switch (k) {
    case PEAK_FMA_AVX2:
        fma_avx2(iters, step, out);
        break;
    case PEAK_FMA_AVX512:
        fma_avx512(iters, step, out);
        break;
    case PEAK_DOT_AVX512BF16:
        dot_avx512bf16(iters, step, out);
        break;
    case PEAK_DOT_AMXBF16:
        dot_amxbf16(iters, step, out);
        break;
    default:
        return 0;
    }
    return (double)iters * INFO[k].flops_per_iter;
}
