#include "common/numpy_pcg64.h"

/* SeedSequence's hashing constants (bit_generator.pyx). */
#define SS_INIT_A     0x43b0d7e5u
#define SS_MULT_A     0x931e8875u
#define SS_INIT_B     0x8b51f9ddu
#define SS_MULT_B     0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT     16
#define SS_POOL_SIZE  4

/* PCG64's 128-bit LCG multiplier (PCG_DEFAULT_MULTIPLIER_128). */
#define PCG_MULT_HI 0x2360ED051FC65DA4ull
#define PCG_MULT_LO 0x4385DF649FCCF645ull

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> SS_XSHIFT;
    return value;
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t result = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    result ^= result >> SS_XSHIFT;
    return result;
}

/* SeedSequence(seed).generate_state(4, np.uint64) into out. A 64-bit seed is at most 2 words,
 * fewer than the pool's 4, so mix_entropy's last loop (entropy beyond the pool) never runs. */
static void seed_sequence_state(uint64_t seed, uint64_t out[4]) {
    uint32_t entropy[2];
    int n_entropy = 0;
    if (seed == 0) entropy[n_entropy++] = 0;
    for (uint64_t s = seed; s > 0; s >>= 32)
        entropy[n_entropy++] = (uint32_t)(s & 0xFFFFFFFFu);
    uint32_t pool[SS_POOL_SIZE], hash_const = SS_INIT_A;
    for (int i = 0; i < SS_POOL_SIZE; i++)
        pool[i] = hashmix(i < n_entropy ? entropy[i] : 0, &hash_const);
    for (int src = 0; src < SS_POOL_SIZE; src++)
        for (int dst = 0; dst < SS_POOL_SIZE; dst++)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], &hash_const));
    uint32_t words[8], hash_b = SS_INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t v = pool[i % SS_POOL_SIZE];
        v ^= hash_b;
        hash_b *= SS_MULT_B;
        v *= hash_b;
        v ^= v >> SS_XSHIFT;
        words[i] = v;
    }
    for (int i = 0; i < 4; i++)
        out[i] = (uint64_t)words[2 * i] | (uint64_t)words[2 * i + 1] << 32;
}

static void pcg_step(NumpyPcg64 *g) {
    const unsigned __int128 mult = (unsigned __int128)PCG_MULT_HI << 64 | PCG_MULT_LO;
    g->state = g->state * mult + g->inc;
}

void numpy_pcg64_seed(NumpyPcg64 *g, uint64_t seed) {
    uint64_t s[4];
    seed_sequence_state(seed, s);
    unsigned __int128 initstate = (unsigned __int128)s[0] << 64 | s[1];
    unsigned __int128 initseq = (unsigned __int128)s[2] << 64 | s[3];
    g->state = 0;
    g->inc = initseq << 1 | 1u;
    pcg_step(g);
    g->state += initstate;
    pcg_step(g);
    g->has_uint32 = false;
    g->uinteger = 0;
}

uint64_t numpy_pcg64_next64(NumpyPcg64 *g) {
    pcg_step(g);
    uint64_t hi = (uint64_t)(g->state >> 64), lo = (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    uint64_t x = hi ^ lo;
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

uint32_t numpy_pcg64_next32(NumpyPcg64 *g) {
    if (g->has_uint32) {
        g->has_uint32 = false;
        return g->uinteger;
    }
    uint64_t next = numpy_pcg64_next64(g);
    g->has_uint32 = true;
    g->uinteger = (uint32_t)(next >> 32);
    return (uint32_t)(next & 0xFFFFFFFFu);
}

uint64_t numpy_random_interval(NumpyPcg64 *g, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, value;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xFFFFFFFFu) {
        while ((value = (numpy_pcg64_next32(g) & mask)) > max) {
        }
    } else {
        while ((value = (numpy_pcg64_next64(g) & mask)) > max) {
        }
    }
    return value;
}

void numpy_permutation(NumpyPcg64 *g, size_t *out, size_t n) {
    for (size_t i = 0; i < n; i++)
        out[i] = i;
    for (size_t i = n; i-- > 1;) {
        size_t j = (size_t)numpy_random_interval(g, i);
        size_t t = out[j];
        out[j] = out[i];
        out[i] = t;
    }
}

void numpy_permutation_seeded(uint64_t seed, size_t *out, size_t n) {
    NumpyPcg64 g;
    numpy_pcg64_seed(&g, seed);
    numpy_permutation(&g, out, n);
}
