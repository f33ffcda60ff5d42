/* The pseudo-random primitives of the whole tree, defined once so that every stream (LoRA
 * initialisation, dropout masks, the epoch shuffle, sampling) is made by the same arithmetic:
 * SplitMix64 (Steele, Lea and Flood 2014; Vigna's splitmix64.c constants) and xoshiro256**
 * (Blackman and Vigna 2018). Saved weights and sampled tokens depend on every bit these return,
 * so changing one is a change of every run's results, not a refactoring.
 *
 * Inline: the dropout kernels call rng_mix64 once per activation inside parallel loops. */
#ifndef RLHF_COMMON_RNG_H
#define RLHF_COMMON_RNG_H

#include <stdint.h>

/* The CUDA backend's dropout kernel (kernels/cuda/lora_dropout.cu) calls rng_mix64 and
 * rng_unit_double on the device, so that its mask is the CPU's bit for bit. */
#ifdef __CUDACC__
#define RNG_HD __host__ __device__
#else
#define RNG_HD
#endif

/* SplitMix64's increment, the golden ratio in 64 bits. Also a good odd multiplier for spreading
 * a counter over the key space before rng_mix64. */
#define RNG_GOLDEN_GAMMA 0x9E3779B97F4A7C15ull

/* SplitMix64's finaliser (Stafford's Mix13 variant): a bijection of 64-bit values in which every
 * input bit affects every output bit. Used bare to turn a key built from several inputs (a seed,
 * a step, an index) into one well-mixed value without any state. */
RNG_HD static inline uint64_t rng_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One SplitMix64 draw: advances *state by RNG_GOLDEN_GAMMA and returns the mix of the new
 * state. Any state, zero included, is valid; successive draws have period 2^64. */
static inline uint64_t rng_splitmix64_next(uint64_t *state) {
    return rng_mix64(*state += RNG_GOLDEN_GAMMA);
}

/* One xoshiro256** draw: returns the next 64 bits of the stream in s and advances s. s must not
 * be all zero (seed it from rng_splitmix64_next, which never gives four zeros in a row). */
static inline uint64_t rng_xoshiro256ss_next(uint64_t s[4]) {
    uint64_t x = s[1] * 5, t = s[1] << 17;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* The top 53 bits of x as a double in [0, 1), evenly spaced 2^-53 apart (exact: no rounding). */
RNG_HD static inline double rng_unit_double(uint64_t x) {
    return (double)(x >> 11) * 0x1.0p-53;
}

#endif
