/* What this CPU and its OS offer gemm_bf16 (gemm_bf16_kernels.h), from cpuid and XCR0: a path
 * needs its instructions and the OS saving the registers they use. AMX also needs the kernel's
 * permission for the 8 KB tile state, asked for once per process (Linux 5.16+,
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); it holds for every thread). */
#include "kernels/cpu/gemm_bf16_kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA  18

/* cpuid leaf (leaf, sub)'s register reg (0 eax, 1 ebx, 2 ecx, 3 edx); 0 if the leaf is absent. */
static unsigned cpuid_reg(unsigned leaf, unsigned sub, int reg) {
    unsigned r[4] = {0, 0, 0, 0};
    if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return 0;
    return r[reg];
}

/* XCR0, the state components the OS saves; 0 without OSXSAVE. */
static unsigned long long xcr0(void) {
    if (!(cpuid_reg(1, 0, 2) & (1u << 27))) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (unsigned long long)hi << 32 | lo;
}

bool gemm_bf16_cpu_has_avx2(void) {
    return (cpuid_reg(7, 0, 1) & (1u << 5)) && (cpuid_reg(1, 0, 2) & (1u << 12)) &&
           (xcr0() & 0x6) == 0x6; /* AVX2, FMA; SSE and AVX state */
}

bool gemm_bf16_cpu_has_avx512(void) {
    return gemm_bf16_cpu_has_avx2() && (cpuid_reg(7, 0, 1) & (1u << 16)) &&
           (cpuid_reg(7, 1, 0) & (1u << 5)) &&
           (xcr0() & 0xe6) == 0xe6; /* AVX512F, AVX512_BF16; opmask and zmm state */
}

static bool amx_usable;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;

static void amx_probe(void) {
    unsigned edx = cpuid_reg(7, 0, 3);
    bool cpu = (edx & (1u << 22)) && (edx & (1u << 24)); /* AMX-BF16, AMX-TILE */
    bool os = (xcr0() & 0x60000) == 0x60000;             /* XTILECFG, XTILEDATA */
    amx_usable = cpu && os && gemm_bf16_cpu_has_avx512() &&
                 syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

bool gemm_bf16_cpu_has_amx(void) {
    pthread_once(&amx_once, amx_probe);
    return amx_usable;
}

#else

bool gemm_bf16_cpu_has_avx2(void) {
    return false;
}

bool gemm_bf16_cpu_has_avx512(void) {
    return false;
}

bool gemm_bf16_cpu_has_amx(void) {
    return false;
}

#endif
