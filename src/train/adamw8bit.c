#include "train/adamw8bit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* torch.linspace(0.1, 1, steps) in float32 as ATen's CPU kernel computes it: from the start for
 * the first half, from the end for the second, each value with one rounding (a fused
 * multiply-add; plain float arithmetic differs in the last bit of a quarter of the values). */
static float linspace_at(int steps, int i) {
    const float start = 0.1f, end = 1.0f, step = (end - start) / (float)(steps - 1);
    return i < steps / 2 ? fmaf(step, (float)i, start) : fmaf(-step, (float)(steps - i - 1), end);
}

static int float_cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void q8_map_dynamic(Q8Map *map, bool is_signed) {
    int n = 0; /* 7 exponent bits; unsigned, the sign bit doubles the fraction steps */
    for (int i = 0; i < 7; i++) {
        int items = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
        float scale = (float)pow(10.0, (double)(i - 6));
        for (int k = 0; k + 1 < items; k++) {
            float mean = (linspace_at(items, k) + linspace_at(items, k + 1)) / 2.0f;
            map->value[n++] = scale * mean;
            if (is_signed) map->value[n++] = -scale * mean;
        }
    }
    map->value[n++] = 0.0f;
    map->value[n++] = 1.0f; /* 2 * 127 + 2 values signed, 254 + 2 unsigned: 256 either way */
    qsort(map->value, 256, sizeof *map->value, float_cmp);
    for (int i = 0; i < 255; i++)
        map->bound[i] = (map->value[i] + map->value[i + 1]) / 2.0f;
}

uint8_t q8_map_code(const Q8Map *map, float x) {
    /* how many bounds lie below x: a branch-free binary search over the 255 sorted bounds */
    unsigned lo = 0;
    for (unsigned half = 128; half; half >>= 1)
        lo += map->bound[lo + half - 1] < x ? half : 0;
    return (uint8_t)lo;
}

size_t q8_blocks(size_t numel) {
    return (numel + Q8_BLOCK - 1) / Q8_BLOCK;
}

int q8_moments_init(Q8Moments *q, size_t numel) {
    size_t blocks = q8_blocks(numel);
    memset(q, 0, sizeof *q);
    q->numel = numel;
    q->code_m = calloc(numel ? numel : 1, 1);
    q->code_v = calloc(numel ? numel : 1, 1);
    q->absmax_m = calloc(blocks ? blocks : 1, sizeof(float));
    q->absmax_v = calloc(blocks ? blocks : 1, sizeof(float));
    if (q->code_m && q->code_v && q->absmax_m && q->absmax_v) return 0;
    q8_moments_free(q);
    return -1;
}

void q8_moments_free(Q8Moments *q) {
    free(q->code_m);
    free(q->code_v);
    free(q->absmax_m);
    free(q->absmax_v);
    memset(q, 0, sizeof *q);
}

/* x (n values) as codes of `map` scaled by its largest magnitude, which is returned. */
static float quantise_block(const Q8Map *map, const float *x, size_t n, uint8_t *code) {
    float absmax = 0.0f;
    for (size_t i = 0; i < n; i++)
        absmax = fmaxf(absmax, fabsf(x[i]));
    /* bitsandbytes scales by the reciprocal, guarding an all-zero block */
    float inv = 1.0f / fmaxf(absmax, 1e-38f);
    for (size_t i = 0; i < n; i++)
        code[i] = q8_map_code(map, fminf(fmaxf(x[i] * inv, -1.0f), 1.0f));
    return absmax;
}

void adamw8bit_update(Q8Moments *q, const Q8Map *m_map, const Q8Map *v_map, float *p,
                      const float *g, const AdamWStepCoefs *c) {
    size_t blocks = q8_blocks(q->numel);
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < blocks; b++) {
        size_t at = b * Q8_BLOCK, n = q->numel - at < Q8_BLOCK ? q->numel - at : Q8_BLOCK;
        float m[Q8_BLOCK], v[Q8_BLOCK];
        float am = q->absmax_m[b], av = q->absmax_v[b];
        for (size_t i = 0; i < n; i++) {
            float gi = g[at + i];
            m[i] = m_map->value[q->code_m[at + i]] * am * c->beta1 + c->one_minus_beta1 * gi;
            v[i] = v_map->value[q->code_v[at + i]] * av * c->beta2 + c->one_minus_beta2 * gi * gi;
            float denom = sqrtf(v[i]) / c->bc2_sqrt + c->eps;
            p[at + i] = p[at + i] * c->shrink + c->neg_step * m[i] / denom;
        }
        q->absmax_m[b] = quantise_block(m_map, m, n, q->code_m + at);
        q->absmax_v[b] = quantise_block(v_map, v, n, q->code_v + at);
    }
}
