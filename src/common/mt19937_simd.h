/* torch's MT19937 stream (common/torch_generator.h) a block at a time: the twist of all 624
 * state words and the tempering of the words read, vectorised (AVX-512F or AVX2, chosen by
 * cpuid; plain C elsewhere). Every path gives exactly the words torch_generator_random() gives one
 * at a time, and leaves the generator where as many of those calls would have (tests/
 * test_torch_exponential.c). What torch_exponential_f32 draws its 1.25 G words a GRPO step from. */
#ifndef RLHF_COMMON_MT19937_SIMD_H
#define RLHF_COMMON_MT19937_SIMD_H

#include "common/torch_generator.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Which instructions the block kernels use. DRAW_PATH_BEST: the widest this CPU has. */
typedef enum { DRAW_PATH_BEST, DRAW_PATH_SCALAR, DRAW_PATH_AVX2, DRAW_PATH_AVX512 } DrawPath;

/* Whether this CPU (cpuid) runs `path`; SCALAR and BEST always. */
bool draw_path_supported(DrawPath path);

/* `path` with BEST replaced by the widest supported one (a path this CPU lacks stays as it is:
 * callers check draw_path_supported first). */
DrawPath draw_path_resolve(DrawPath path);

/* out[0 .. n) = the next n torch_generator_random(g) words, on `path` (supported). */
void mt19937_words(TorchGenerator *g, uint32_t *out, size_t n, DrawPath path);

/* Advances g past n words without tempering them: what n torch_generator_random(g) calls do to g.
 * Costs one twist per 624 words. */
void mt19937_skip(TorchGenerator *g, uint64_t n, DrawPath path);

#endif
