/* NF4 quantisation and dequantisation, bit for bit as bitsandbytes computes them on the CPU
 * (nf4.h; tests/test_nf4.c checks every byte and float against bitsandbytes itself).
 *
 * Invariants:
 *  1. Every arithmetic step is one fp32 operation in bitsandbytes' order, written as its own
 *     statement so that no compiler fuses two into one rounding (the build is ISO C: GCC does not
 *     contract across statements, clang contracts only within an expression).
 *  2. The 8-bit grid index (v + 1) * 0.5 * 65535 + 0.5 comes out the same whether the last
 *     multiply-add is fused (bitsandbytes' C++ may be built so) or not: equal on 2 million
 *     random values of [-1, 1]. */
#include "kernels/cpu/nf4.h"

#include "common/error.h"
#include "kernels/cpu/adamw8bit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const float nf4_values[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

size_t nf4_blocks(size_t numel) {
    return (numel + NF4_BLOCK - 1) / NF4_BLOCK;
}

static size_t absmax2_blocks(size_t numel) {
    return (nf4_blocks(numel) + NF4_ABSMAX_BLOCK - 1) / NF4_ABSMAX_BLOCK;
}

size_t nf4_bytes(size_t numel) {
    size_t blocks = nf4_blocks(numel);
    return (numel + 1) / 2 + blocks + blocks * sizeof(float) +
           absmax2_blocks(numel) * sizeof(float);
}

/* The NF4 index of a scaled value: how many midpoints lie below it (torch.bucketize, right=False:
 * a value on a midpoint takes the lower index). */
static uint8_t nf4_code(float s, const float *mid) {
    uint8_t c = 0;
    while (c < 15 && mid[c] < s)
        c++;
    return c;
}

void nf4_quantize_plain(const float *x, size_t n, uint8_t *packed, float *absmax) {
    float mid[15];
    for (int i = 0; i < 15; i++) {
        float sum = nf4_values[i] + nf4_values[i + 1];
        mid[i] = sum / 2.0f;
    }
    size_t blocks = nf4_blocks(n), full = n / NF4_BLOCK;
    memset(packed, 0, (n + 1) / 2);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        size_t start = b * NF4_BLOCK, end = start + NF4_BLOCK < n ? start + NF4_BLOCK : n;
        float am = 0.0f;
        for (size_t i = start; i < end; i++)
            am = fmaxf(am, fabsf(x[i]));
        absmax[b] = am;
        float clamped = am > 1e-38f ? am : 1e-38f; /* absmax.clamp(min=1e-38) */
        float inv = 1.0f / clamped;
        for (size_t i = start; i < end; i++) {
            float s;
            if (b < full) /* A * (1 / absmax) */
                s = x[i] * inv;
            else /* the partial last block: A / absmax */
                s = x[i] / clamped;
            s = s < -1.0f ? -1.0f : s > 1.0f ? 1.0f : s;
            uint8_t c = nf4_code(s, mid);
            /* blocks are whole bytes apart (NF4_BLOCK is even): no two threads share a byte */
            packed[i / 2] |= (uint8_t)(i % 2 ? c : c << 4);
        }
    }
}

/* bitsandbytes' build_quantize_lut: for each of 65536 grid points of [-1, 1], the index of the
 * first code whose upper midpoint is not below it. */
static void q8_grid_table(const float *map, uint8_t *table) {
    float mid[255];
    for (int i = 0; i < 255; i++) {
        float sum = map[i] + map[i + 1];
        mid[i] = 0.5f * sum;
    }
    int code = 0;
    for (int i = 0; i < 65536; i++) {
        float twice = 2.0f * (float)i;
        float step = twice / 65535.0f;
        float val = -1.0f + step;
        while (code < 255 && mid[code] < val)
            code++;
        table[i] = (uint8_t)code;
    }
}

/* bitsandbytes' norm_to_lut_index (invariant 2). */
static uint16_t q8_grid_index(float v) {
    v = v < -1.0f ? -1.0f : v > 1.0f ? 1.0f : v;
    float shifted = v + 1.0f;
    float half = shifted * 0.5f;
    float grid = half * 65535.0f;
    float rounded = grid + 0.5f;
    return (uint16_t)rounded;
}

void q8_dynamic_quantize(const float *map, const float *x, size_t n, int block, uint8_t *codes,
                         float *absmax) {
    uint8_t *table = xmalloc(65536);
    q8_grid_table(map, table);
    size_t blocks = (n + (size_t)block - 1) / (size_t)block;
    for (size_t b = 0; b < blocks; b++) {
        size_t start = b * (size_t)block, end = start + (size_t)block < n ? start + block : n;
        float am = 0.0f;
        for (size_t i = start; i < end; i++)
            am = fmaxf(am, fabsf(x[i]));
        absmax[b] = am;
        if (am == 0.0f) {
            memset(codes + start, 0, end - start);
            continue;
        }
        float inv = 1.0f / am;
        for (size_t i = start; i < end; i++) {
            float s = x[i] * inv;
            codes[i] = table[q8_grid_index(s)];
        }
    }
    free(table);
}

/* torch's float sum (ATen's cascade_sum, SumKernel.cpp) of a contiguous row on one thread: lanes
 * of TORCH_LANES values summed side by side, each lane (and the scalar path below TORCH_LANES
 * values) by row_sum below, then the tail and the lanes added in order. 8 lanes: what torch 2.15
 * computes on this AVX-512 machine (its sum kernel runs 256-bit vectors; 16 lanes differ on the
 * fixture's 37-value row). Above 32768 values with several threads torch splits the sum between
 * them, and its last bits then depend on their count; this is its one-thread value. */
#define TORCH_LANES 8

static int ceil_log2(size_t x) {
    int k = 0;
    while (((size_t)1 << k) < x)
        k++;
    return k;
}

/* ATen's row_sum over `size` elements of `lanes` floats each (element e at x + e * lanes):
 * four interleaved partial sums (ilp), each a cascade of four levels (multi_row_sum), then the
 * leftover elements and the partials added into the first. sum (lanes floats) written. */
static void row_sum_lanes(const float *x, size_t size, int lanes, float *sum) {
    enum { ILP = 4, LEVELS = 4 };
    size_t rows = size / ILP; /* multi_row_sum's rows of ILP elements */
    int power = ceil_log2(rows) / LEVELS > 4 ? ceil_log2(rows) / LEVELS : 4;
    size_t step = (size_t)1 << power, mask = step - 1;
    float acc[LEVELS][ILP][TORCH_LANES] = {{{0}}};
    size_t i = 0;
#define ADD_ROW(r)                                                                                 \
    for (int k = 0; k < ILP; k++)                                                                  \
        for (int l = 0; l < lanes; l++)                                                            \
            acc[0][k][l] += x[((r)*ILP + (size_t)k) * (size_t)lanes + (size_t)l];
    while (i + step <= rows) {
        for (size_t j = 0; j < step; j++, i++) {
            ADD_ROW(i)
        }
        for (int j = 1; j < LEVELS; j++) {
            for (int k = 0; k < ILP; k++)
                for (int l = 0; l < lanes; l++) {
                    acc[j][k][l] += acc[j - 1][k][l];
                    acc[j - 1][k][l] = 0.0f;
                }
            if ((i & (mask << (j * power))) != 0) break;
        }
    }
    for (; i < rows; i++) {
        ADD_ROW(i)
    }
#undef ADD_ROW
    for (int j = 1; j < LEVELS; j++)
        for (int k = 0; k < ILP; k++)
            for (int l = 0; l < lanes; l++)
                acc[0][k][l] += acc[j][k][l];
    for (size_t e = rows * ILP; e < size; e++)
        for (int l = 0; l < lanes; l++)
            acc[0][0][l] += x[e * (size_t)lanes + (size_t)l];
    for (int k = 1; k < ILP; k++)
        for (int l = 0; l < lanes; l++)
            acc[0][0][l] += acc[0][k][l];
    for (int l = 0; l < lanes; l++)
        sum[l] = acc[0][0][l];
}

static float torch_sum_f32(const float *x, size_t n) {
    float lanes[TORCH_LANES];
    if (n < TORCH_LANES) { /* scalar_inner_sum */
        row_sum_lanes(x, n, 1, lanes);
        return lanes[0];
    }
    size_t vecs = n / TORCH_LANES; /* vectorized_inner_sum */
    row_sum_lanes(x, vecs, TORCH_LANES, lanes);
    float total = 0.0f;
    for (size_t k = vecs * TORCH_LANES; k < n; k++)
        total += x[k];
    for (int l = 0; l < TORCH_LANES; l++)
        total += lanes[l];
    return total;
}

float torch_mean_f32(const float *x, size_t n) {
    float total = torch_sum_f32(x, n);
    return total / (float)n;
}

int nf4_quantize(Nf4Weight *q, const float *x, size_t n) {
    memset(q, 0, sizeof *q);
    size_t blocks = nf4_blocks(n), blocks2 = absmax2_blocks(n);
    q->numel = n;
    q->packed = xmalloc_checked((n + 1) / 2, "NF4 weights");
    q->qabsmax = xmalloc_checked(blocks, "NF4 absmax codes");
    q->absmax2 = xmalloc_checked(blocks2 * sizeof(float), "NF4 absmax scales");
    q->absmax = xmalloc_checked(blocks * sizeof(float), "NF4 absmax");
    if (!q->packed || !q->qabsmax || !q->absmax2 || !q->absmax) {
        nf4_free(q);
        return -1;
    }
    nf4_quantize_plain(x, n, q->packed, q->absmax);
    q->offset = torch_mean_f32(q->absmax, blocks);
    for (size_t b = 0; b < blocks; b++) /* _absmax - offset */
        q->absmax[b] = q->absmax[b] - q->offset;
    Q8Map map;
    q8_map_dynamic(&map, true);
    q8_dynamic_quantize(map.value, q->absmax, blocks, NF4_ABSMAX_BLOCK, q->qabsmax, q->absmax2);
    /* the absmax every product uses: dequantize_blockwise, then += offset */
    for (size_t b = 0; b < blocks; b++) {
        float v = map.value[q->qabsmax[b]] * q->absmax2[b / NF4_ABSMAX_BLOCK];
        q->absmax[b] = v + q->offset;
    }
    return 0;
}

void nf4_dequantize(float *dst, const Nf4Weight *q, size_t first, size_t count) {
    for (size_t k = 0; k < count; k++) {
        size_t i = first + k;
        uint8_t byte = q->packed[i / 2];
        uint8_t c = i % 2 ? byte & 0x0f : byte >> 4;
        dst[k] = nf4_values[c] * q->absmax[i / NF4_BLOCK];
    }
}

void nf4_free(Nf4Weight *q) {
    free(q->packed);
    free(q->qabsmax);
    free(q->absmax2);
    free(q->absmax);
    memset(q, 0, sizeof *q);
}
