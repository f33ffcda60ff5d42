/* The shared generators (common/rng.h) against values of the implementations they replaced:
 * every saved weight and sampled token depends on these bits, so a change here must fail. */
#include "common/rng.h"
#include "harness.h"
#include "rollout/sampler.h"

#include <stdint.h>

int main(void) {
    /* SplitMix64 from state 0: the first value is the one Vigna's splitmix64.c gives. */
    uint64_t state = 0;
    CHECK(rng_splitmix64_next(&state) == 0xE220A8397B1DCDAFull, "splitmix64 draw 1");
    CHECK(rng_splitmix64_next(&state) == 0x6E789E6AA1B965F4ull, "splitmix64 draw 2");
    CHECK(rng_splitmix64_next(&state) == 0x06C45D188009454Full, "splitmix64 draw 3");
    CHECK(state == 3 * RNG_GOLDEN_GAMMA, "the state advances by the gamma per draw");

    /* The bare finaliser is the draw without the advance. */
    uint64_t s0 = 0;
    CHECK(rng_mix64(RNG_GOLDEN_GAMMA) == rng_splitmix64_next(&s0), "mix64 = draw minus advance");
    CHECK(rng_mix64(12345ull * 0x9E3779B97F4A7C15ull + 6ull * 0xBF58476D1CE4E5B9ull +
                    2ull * 0x94D049BB133111EBull) == 0x79365D3B87C49A55ull,
          "mix64 of a dropout key");

    /* xoshiro256** as the sampler seeds and steps it (seed 42, stream 7). */
    SamplerRng rng;
    sampler_rng_seed(&rng, 42, 7);
    uint64_t s[4] = {rng.s[0], rng.s[1], rng.s[2], rng.s[3]};
    CHECK(rng_xoshiro256ss_next(s) == 0xAB0B230F7FC48E9Aull, "xoshiro256** draw 1");
    CHECK(rng_xoshiro256ss_next(s) == 0x048B0576862255CAull, "xoshiro256** draw 2");
    CHECK(rng_xoshiro256ss_next(s) == 0x8F664D3DA4409262ull, "xoshiro256** draw 3");
    CHECK(sampler_rng_uniform(&rng) == 0.66813868645091834, "sampler uniform 1");
    CHECK(sampler_rng_uniform(&rng) == 0.017746297298921521, "sampler uniform 2");
    CHECK(sampler_rng_uniform(&rng) == 0.56015475039407847, "sampler uniform 3");

    CHECK(rng_unit_double(0) == 0.0, "unit double of 0");
    CHECK(rng_unit_double(UINT64_MAX) == 1.0 - 0x1.0p-53, "unit double stays below 1");
    return harness_finish("test_rng");
}
