/* NumPy's default generator, np.random.default_rng(seed) (PCG64 seeded through SeedSequence),
 * and the draws Generator.permutation makes from it, so that rlhf.c shuffles a dataset as HF
 * `datasets` does: Dataset.shuffle(seed=s) and train_test_split(seed=s, shuffle=True) both take
 * np.random.default_rng(s).permutation(len(self)) (issue 34). Settled from NumPy's source
 * (numpy/random):
 *   - bit_generator.pyx SeedSequence: the seed's 32-bit words, low first (0 gives one word 0),
 *     hashed into a pool of 4 words (mix_entropy: hashmix with INIT_A/MULT_A, then every pool
 *     word mixed into every other); generate_state(4, uint64) draws 8 words with INIT_B/MULT_B,
 *     paired little-endian into 4 uint64;
 *   - _pcg64.pyx / src/pcg64: pcg64_set_seed takes state words 0,1 as the 128-bit initstate
 *     (word 0 the high half) and 2,3 as initseq; srandom_r: state 0, inc = initseq << 1 | 1,
 *     step, state += initstate, step. A draw steps (state = state * MULT + inc) and returns
 *     XSL-RR of the new state: rotr64(hi ^ lo, state >> 122). random_raw() is that draw;
 *   - next_uint32: the low half of a 64-bit draw, its high half kept for the next call;
 *   - _generator.pyx shuffle (1-d ndarray) / permutation(n) = shuffle(arange(n)): for i from
 *     n-1 down to 1, j = random_interval(i), swap(i, j). random_interval (distributions.c) is
 *     masked rejection, not Lemire's method (that is random_bounded_uint64, which integers()
 *     uses): mask = the smallest 2^k - 1 >= max; draw next_uint32() & mask while max <=
 *     0xFFFFFFFF, next_uint64() & mask above, until the value is <= max.
 * Every result here is bit-identical to NumPy 2.4's (tests/test_numpy_rng.c against
 * tools/reference/make_numpy_rng_fixtures.py, which calls NumPy's own random_interval for the
 * 64-bit path). */
#ifndef RLHF_COMMON_NUMPY_PCG64_H
#define RLHF_COMMON_NUMPY_PCG64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One np.random.Generator(PCG64). Invariants:
 *   1. inc is odd (the LCG's increment; srandom_r sets its low bit);
 *   2. has_uint32: the high half of the last 64-bit draw, `uinteger`, is still unread and the
 *      next 32-bit draw returns it without stepping (a 64-bit draw leaves it pending). */
typedef struct {
    unsigned __int128 state, inc;
    bool has_uint32;
    uint32_t uinteger;
} NumpyPcg64;

/* np.random.default_rng(seed) for a non-negative seed (NumPy refuses negative ones). */
void numpy_pcg64_seed(NumpyPcg64 *g, uint64_t seed);

/* bit_generator.random_raw(): the next 64 bits. */
uint64_t numpy_pcg64_next64(NumpyPcg64 *g);

/* The bit generator's next_uint32 (invariant 2). */
uint32_t numpy_pcg64_next32(NumpyPcg64 *g);

/* distributions.c random_interval(g, max): uniform in [0, max], by masked rejection; 32-bit
 * draws while max <= 0xFFFFFFFF, 64-bit ones above. */
uint64_t numpy_random_interval(NumpyPcg64 *g, uint64_t max);

/* Generator.permutation(n) into out[0 .. n): a permutation of 0 .. n-1. n = 0 draws nothing. */
void numpy_permutation(NumpyPcg64 *g, size_t *out, size_t n);

/* np.random.default_rng(seed).permutation(n): the index order of datasets'
 * Dataset.shuffle(seed=seed) (row i of the result is row out[i] of the input). */
void numpy_permutation_seeded(uint64_t seed, size_t *out, size_t n);

#endif
