/* tensor.exponential_() on float32 as torch draws it (torch_generator.h), bit for bit, at the
 * rate a GRPO step needs (64 rows x 151936 vocabulary x 128 tokens = 1.25 G draws): the words a
 * block at a time (mt19937_simd.h), then u -> (float)-log1p(-u) eight or four at a time with
 * glibc's vector log1p (libmvec). That log1p is not libm's to the last bit; the float it rounds
 * to is libm's unless a float rounding boundary (a midpoint between two floats, where the low
 * 29 bits of the double are 2^28) lies between the two: wherever the vector result is within
 * TORCH_EXP_MIDPOINT_ULPS double ulps of one, the element is recomputed with libm's log1p. The
 * margin is 1024 times libmvec's stated 4-ulp bound (its x86-64 functions, glibc wiki) plus
 * libm's own ~1 ulp, and costs ~2^-16 of the elements a libm call. The draws of a large call are
 * split across the OpenMP threads: each skips (twists without tempering) to its part. */
#ifndef RLHF_COMMON_TORCH_EXPONENTIAL_H
#define RLHF_COMMON_TORCH_EXPONENTIAL_H

#include "common/mt19937_simd.h"
#include "common/torch_generator.h"

#include <stddef.h>
#include <stdint.h>

/* Double ulps around a float midpoint within which the vector log1p is not trusted. */
#define TORCH_EXP_MIDPOINT_ULPS 4096

/* torch_exponential_f32 (torch_generator.h) on `path` (draw_path_supported). SCALAR is the
 * serial reference: one random64 and one libm log1p per element. */
void torch_exponential_f32_path(TorchGenerator *g, float *out, size_t n, DrawPath path);

/* torch_exponential_f32 on the calling thread alone (the widest path this CPU has): for a caller
 * that splits one stream between its own threads, each drawing its part where it uses it (GRPO's
 * sampling draws a row right before sampling it, rollout/generate.c). Leaves g as
 * torch_exponential_f32 of n would. */
void torch_exponential_f32_serial(TorchGenerator *g, float *out, size_t n);

/* Advances g past n exponential_() draws without making them (2n words, untempered): what
 * torch_exponential_f32 of n does to g. */
void torch_exponential_skip(TorchGenerator *g, uint64_t n);

/* out[i] = (float)-log1p(-u_i), u_i from the word pair w[2i] (high), w[2i + 1] (low) as
 * torch_exponential_f32 makes it, on `path`: equal to libm's in every element. */
void torch_exponential_from_words(const uint32_t *w, float *out, size_t n, DrawPath path);

/* The 2n words of g's next n exponential_() draws, leaving g as torch_exponential_f32_serial of n
 * leaves it: draw i is torch_exponential_from_words(w + 2 i, ...), its u torch_exponential_u(w +
 * 2 i). For a caller that needs only some of a row's draws as floats (rollout/sampler.c). */
void torch_exponential_words(TorchGenerator *g, uint32_t *w, size_t n);

/* The u in [0, 1) of the draw whose word pair is w[0] (high), w[1] (low): exact in double
 * (torch_exponential.c invariant 1). Its draw is (float)-log1p(-u) >= u. */
static inline double torch_exponential_u(const uint32_t *w) {
    uint64_t x = ((uint64_t)w[0] << 32 | w[1]) & ((1ull << 53) - 1);
    return (double)x * 0x1.0p-53;
}

/* For the tests and the search tool only: the vector log1p(-u_i) of the same pairs, before any
 * check (path AVX2 or AVX512; SCALAR gives libm's). Returns false when this build or CPU has no
 * vector log1p for `path` (then r is untouched). */
bool torch_exponential_vector_log1p(const uint32_t *w, double *r, size_t n, DrawPath path);

#endif
