#include "common/torch_generator.h"

#include <math.h>

/* MT19937's parameters (Matsumoto and Nishimura 1998). */
#define MT_M          397
#define MT_MATRIX_A   0x9908B0DFu
#define MT_UPPER_MASK 0x80000000u
#define MT_LOWER_MASK 0x7FFFFFFFu

/* randperm_cpu switches to its 64-bit inside-out path from here (std::numeric_limits<uint32_t>
 * ::max() / 20 in TensorFactories.cpp). */
#define TORCH_RANDPERM_SMALL_LIMIT (UINT32_MAX / 20)

void torch_generator_seed(TorchGenerator *g, int64_t seed) {
    /* at::mt19937(uint64_t seed) keeps the low 32 bits. */
    g->state[0] = (uint32_t)((uint64_t)seed & 0xFFFFFFFFu);
    for (uint32_t j = 1; j < TORCH_MT_STATE_WORDS; j++)
        g->state[j] = 1812433253u * (g->state[j - 1] ^ (g->state[j - 1] >> 30)) + j;
    g->left = 1;
    g->next = 0;
}

/* Regenerates all 624 words (the "twist"), then restarts reading at word 0. */
static void mt_twist(TorchGenerator *g) {
    uint32_t *s = g->state;
    for (int k = 0; k < TORCH_MT_STATE_WORDS; k++) {
        uint32_t y = (s[k] & MT_UPPER_MASK) | (s[(k + 1) % TORCH_MT_STATE_WORDS] & MT_LOWER_MASK);
        s[k] = s[(k + MT_M) % TORCH_MT_STATE_WORDS] ^ (y >> 1) ^ ((y & 1u) ? MT_MATRIX_A : 0u);
    }
    g->left = TORCH_MT_STATE_WORDS;
    g->next = 0;
}

uint32_t torch_generator_random(TorchGenerator *g) {
    if (--g->left == 0) mt_twist(g);
    uint32_t y = g->state[g->next++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9D2C5680u;
    y ^= (y << 15) & 0xEFC60000u;
    y ^= y >> 18;
    return y;
}

uint64_t torch_generator_random64(TorchGenerator *g) {
    uint64_t hi = torch_generator_random(g);
    uint64_t lo = torch_generator_random(g);
    return hi << 32 | lo;
}

void torch_randperm(TorchGenerator *g, int64_t *out, int64_t n) {
    if (n < (int64_t)TORCH_RANDPERM_SMALL_LIMIT) {
        for (int64_t i = 0; i < n; i++)
            out[i] = i;
        for (int64_t i = 0; i < n - 1; i++) {
            int64_t z = (int64_t)(torch_generator_random(g) % (uint64_t)(n - i));
            int64_t t = out[i];
            out[i] = out[z + i];
            out[z + i] = t;
        }
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t z = (int64_t)(torch_generator_random64(g) % (uint64_t)(i + 1));
        out[i] = out[z];
        out[z] = i;
    }
}

void torch_uniform_f32(TorchGenerator *g, float *out, size_t n, double from, double to) {
    const float lo = (float)from, range = (float)to - lo;
    for (size_t i = 0; i < n; i++) {
        float x = (float)(torch_generator_random(g) & ((1u << 24) - 1)) * 0x1.0p-24f;
        out[i] = fmaf(x, range, lo);
    }
}

void torch_uniform_f64(TorchGenerator *g, double *out, size_t n, double from, double to) {
    const double range = to - from;
    for (size_t i = 0; i < n; i++) {
        double x = (double)(torch_generator_random64(g) & ((1ull << 53) - 1)) * 0x1.0p-53;
        out[i] = fma(x, range, from);
    }
}

/* torch_exponential_f32: common/torch_exponential.c */

double torch_kaiming_uniform_bound(int64_t fan_in, double a) {
    double gain = sqrt(2.0 / (1 + a * a));
    double std = gain / sqrt((double)fan_in);
    return sqrt(3.0) * std;
}

void torch_kaiming_uniform_f32(TorchGenerator *g, float *w, int64_t rows, int64_t fan_in,
                               double a) {
    double bound = torch_kaiming_uniform_bound(fan_in, a);
    torch_uniform_f32(g, w, (size_t)(rows * fan_in), -bound, bound);
}
