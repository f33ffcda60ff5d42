/* common/torch_exponential and common/mt19937_simd against the serial stream of
 * common/torch_generator (itself checked against torch's own draws in test_torch_rng):
 *   - the words of mt19937_words and the state mt19937_skip leaves equal torch_generator_random's
 *     from every position of a twist, on every path this CPU has;
 *   - millions of exponential draws equal the serial path's bit for bit, over several seeds, odd
 *     word offsets, lengths that leave remainders, 1 to 3 threads, and leave the generator where
 *     the serial path does;
 *   - pinned draws whose vector log1p rounds to another float than libm's (found with
 *     `test_torch_exponential --search PATH FIRST_SEED N_SEEDS`): the midpoint check must catch
 *     them, or the draw differs from torch's;
 *   - u = 0 gives +0, as libm does;
 *   - a stream split into rows as GRPO's sampling splits it (rollout/generate.c), some rows drawn
 *     with torch_exponential_f32_serial and the others passed over with torch_exponential_skip,
 *     gives the serial path's draws in the rows drawn and leaves the generator where it does.
 * It also reports the largest distance seen between the vector and libm's log1p, in double ulps:
 * the margin (TORCH_EXP_MIDPOINT_ULPS) must be far above it. */
#include "common/mt19937_simd.h"
#include "common/torch_exponential.h"
#include "harness.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static const char *path_name(DrawPath p) {
    return p == DRAW_PATH_AVX512 ? "avx512" : p == DRAW_PATH_AVX2 ? "avx2" : "scalar";
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static int64_t f64_bits(double d) {
    int64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static bool same_generator(const TorchGenerator *a, const TorchGenerator *b) {
    return a->left == b->left && a->next == b->next && !memcmp(a->state, b->state, sizeof a->state);
}

static void check_words(DrawPath path) {
    static const int starts[] = {0, 1, 2, 311, 622, 623, 624, 625, 1247};
    static const size_t lens[] = {1, 2, 15, 16, 17, 623, 624, 625, 1249, 5000};
    uint32_t *want = malloc(5000 * sizeof *want), *got = malloc(5000 * sizeof *got);
    int bad = 0;
    for (size_t s = 0; s < sizeof starts / sizeof *starts; s++)
        for (size_t l = 0; l < sizeof lens / sizeof *lens; l++) {
            TorchGenerator a, b, c;
            torch_generator_seed(&a, 1000 + (int64_t)s);
            for (int i = 0; i < starts[s]; i++)
                (void)torch_generator_random(&a);
            b = a, c = a;
            for (size_t i = 0; i < lens[l]; i++)
                want[i] = torch_generator_random(&a);
            mt19937_words(&b, got, lens[l], path);
            mt19937_skip(&c, lens[l], path);
            if (memcmp(want, got, lens[l] * sizeof *got) || !same_generator(&a, &b) ||
                !same_generator(&a, &c)) {
                if (!bad)
                    fprintf(stderr, "%s: words from %d, %zu of them differ\n", path_name(path),
                            starts[s], lens[l]);
                bad++;
            }
        }
    CHECK(bad == 0, "%s: mt19937_words/skip equal the serial stream (%d cases differ)",
          path_name(path), bad);
    free(want);
    free(got);
}

/* n draws after `offset` words of seed's stream, on path and serially: how many differ. */
static size_t compare_draws(DrawPath path, int64_t seed, int offset, size_t n, int threads) {
    TorchGenerator a, b;
    torch_generator_seed(&a, seed);
    for (int i = 0; i < offset; i++)
        (void)torch_generator_random(&a);
    b = a;
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    torch_exponential_f32_path(&a, want, n, DRAW_PATH_SCALAR);
    omp_set_num_threads(threads);
    torch_exponential_f32_path(&b, got, n, path);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (f32_bits(want[i]) != f32_bits(got[i])) {
            if (!bad)
                fprintf(stderr, "%s seed %lld offset %d: draw %zu = %.9g, serial %.9g\n",
                        path_name(path), (long long)seed, offset, i, got[i], want[i]);
            bad++;
        }
    if (!same_generator(&a, &b)) {
        fprintf(stderr, "%s seed %lld: the generator ends elsewhere\n", path_name(path),
                (long long)seed);
        bad++;
    }
    free(want);
    free(got);
    return bad;
}

/* rows x cols draws from seed: the serial path's for the whole, against rows drawn one by one
 * (torch_exponential_f32_serial) where drawn[r], skipped (torch_exponential_skip, several in a
 * row merged as generate() merges them) elsewhere. Returns the draws and generator ends that
 * differ. */
static size_t compare_rows(int64_t seed, int rows, size_t cols, const bool *drawn) {
    TorchGenerator a, b;
    torch_generator_seed(&a, seed);
    b = a;
    size_t n = (size_t)rows * cols, bad = 0;
    float *want = malloc(n * sizeof *want), *got = malloc(cols * sizeof *got);
    torch_exponential_f32_path(&a, want, n, DRAW_PATH_SCALAR);
    uint64_t owed = 0;
    for (int r = 0; r < rows; r++) {
        if (!drawn[r]) {
            owed += cols;
            continue;
        }
        if (owed) torch_exponential_skip(&b, owed), owed = 0;
        torch_exponential_f32_serial(&b, got, cols);
        for (size_t i = 0; i < cols; i++)
            bad += f32_bits(got[i]) != f32_bits(want[(size_t)r * cols + i]);
    }
    if (owed) torch_exponential_skip(&b, owed);
    if (!same_generator(&a, &b)) {
        fprintf(stderr, "rows of seed %lld: the generator ends elsewhere\n", (long long)seed);
        bad++;
    }
    free(want), free(got);
    return bad;
}

static void check_rows(void) {
    /* rows of an odd width (a twist's 624 words are never row-aligned), the first and last rows
     * skipped, runs of skips, all drawn, none drawn */
    const bool some[9] = {false, true, true, false, false, true, false, true, false};
    const bool all[4] = {true, true, true, true}, none[3] = {false, false, false};
    size_t bad = compare_rows(11, 9, 3001, some) + compare_rows(12, 4, 1025, all) +
                 compare_rows(13, 3, 777, none) + compare_rows(14, 9, 5, some);
    CHECK(bad == 0, "rows drawn one by one and skipped: %zu draws differ from the serial stream",
          bad);
}

/* Largest |vector - libm| log1p(-u), in ulps of the double, over seed's first n draws. */
static int64_t max_ulps(DrawPath path, int64_t seed, size_t n) {
    TorchGenerator g;
    torch_generator_seed(&g, seed);
    uint32_t *w = malloc(2 * n * sizeof *w);
    double *r = malloc(n * sizeof *r);
    mt19937_words(&g, w, 2 * n, path);
    int64_t worst = 0;
    if (torch_exponential_vector_log1p(w, r, n, path))
        for (size_t i = 0; i < n; i++) {
            uint64_t x = ((uint64_t)w[2 * i] << 32 | w[2 * i + 1]) & ((1ull << 53) - 1);
            int64_t d = llabs(f64_bits(r[i]) - f64_bits(log1p(-((double)x * 0x1.0p-53))));
            if (d > worst) worst = d;
        }
    free(w);
    free(r);
    return worst;
}

/* Draws of seed's stream (from its start) whose vector log1p rounds to another float than libm's:
 * the midpoint check's work. Found with --search; each path's own vector log1p. */
typedef struct {
    DrawPath path;
    int64_t seed;
    size_t draw;
} Pinned;
static const Pinned pinned[] = {
    /* found by --search over seeds 0..4095 (2^20 draws each, glibc 2.36, 2026-11): each 1 ulp
     * from libm's, on the side of a float midpoint libm's is not */
    {DRAW_PATH_AVX512, 583, 405442},
    {DRAW_PATH_AVX512, 2804, 441555},
    {DRAW_PATH_AVX2, 371, 245682},
    {DRAW_PATH_AVX2, 1783, 1047147},
};

static void check_pinned(void) {
    for (size_t c = 0; c < sizeof pinned / sizeof *pinned; c++) {
        const Pinned *p = &pinned[c];
        if (!draw_path_supported(p->path)) continue;
        size_t n = (p->draw / 8 + 1) * 8; /* whole vectors: a tail would go to libm */
        TorchGenerator g;
        torch_generator_seed(&g, p->seed);
        uint32_t *w = malloc(2 * n * sizeof *w);
        double *r = malloc(n * sizeof *r);
        mt19937_words(&g, w, 2 * n, DRAW_PATH_SCALAR);
        uint64_t x = ((uint64_t)w[2 * p->draw] << 32 | w[2 * p->draw + 1]) & ((1ull << 53) - 1);
        float libm = (float)-log1p(-((double)x * 0x1.0p-53));
        if (torch_exponential_vector_log1p(w, r, n, p->path)) {
            /* the case still tests something: this glibc's vector log1p rounds it elsewhere */
            CHECK((float)-r[p->draw] != libm,
                  "%s seed %lld draw %zu: the vector log1p now rounds as libm does; pin another "
                  "case (--search)",
                  path_name(p->path), (long long)p->seed, p->draw);
        }
        CHECK(compare_draws(p->path, p->seed, 0, n, 1) == 0,
              "%s seed %lld draw %zu: the near-midpoint draw equals the serial one",
              path_name(p->path), (long long)p->seed, p->draw);
        free(w);
        free(r);
    }
}

/* --search PATH FIRST_SEED N_SEEDS: prints the (seed, draw) among each seed's first 2^20 draws
 * where PATH's vector log1p rounds to another float than libm's. */
static int search(const char *name, int64_t first, int64_t count) {
    DrawPath path = !strcmp(name, "avx512") ? DRAW_PATH_AVX512 : DRAW_PATH_AVX2;
    const size_t n = 1 << 20;
    uint32_t *w = malloc(2 * n * sizeof *w);
    double *r = malloc(n * sizeof *r);
    int found = 0;
    for (int64_t seed = first; seed < first + count; seed++) {
        TorchGenerator g;
        torch_generator_seed(&g, seed);
        mt19937_words(&g, w, 2 * n, path);
        if (!torch_exponential_vector_log1p(w, r, n, path)) return fprintf(stderr, "no path\n"), 1;
        for (size_t i = 0; i < n; i++) {
            int64_t low = f64_bits(r[i]) & ((1 << 29) - 1);
            if (llabs(low - (1 << 28)) > 64) continue;
            uint64_t x = ((uint64_t)w[2 * i] << 32 | w[2 * i + 1]) & ((1ull << 53) - 1);
            double libm = log1p(-((double)x * 0x1.0p-53));
            if ((float)-r[i] != (float)-libm) {
                printf("{DRAW_PATH_%s, %lld, %zu}, /* %lld ulps from libm */\n",
                       path == DRAW_PATH_AVX512 ? "AVX512" : "AVX2", (long long)seed, i,
                       (long long)llabs(f64_bits(r[i]) - f64_bits(libm)));
                fflush(stdout);
                found++;
            }
        }
    }
    free(w);
    free(r);
    return found ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--search"))
        return search(argv[2], atoll(argv[3]), atoll(argv[4]));
    const DrawPath paths[] = {DRAW_PATH_SCALAR, DRAW_PATH_AVX2, DRAW_PATH_AVX512};
    int max_threads = omp_get_max_threads();
    for (int p = 0; p < 3; p++) {
        if (!draw_path_supported(paths[p])) {
            fprintf(stderr, "(this CPU has no %s: skipped)\n", path_name(paths[p]));
            continue;
        }
        check_words(paths[p]);
        if (paths[p] == DRAW_PATH_SCALAR) continue;
        /* 2^22 + 13 draws: blocks, remainders of 8 and 4, a split across threads */
        size_t bad = 0, n = (1u << 22) + 13;
        bad += compare_draws(paths[p], 0, 0, n, 2);
        bad += compare_draws(paths[p], 42, 1, n, 3);
        bad += compare_draws(paths[p], -7, 625, 1001, 1);
        bad += compare_draws(paths[p], 3, 0, (1u << 16) + 5, 1);
        CHECK(bad == 0, "%s: %zu exponential draws differ from the serial path",
              path_name(paths[p]), bad);
        int64_t ulps = max_ulps(paths[p], 1, 1 << 22);
        fprintf(stderr, "%s: vector log1p at most %lld double ulps from libm's (margin %d)\n",
                path_name(paths[p]), (long long)ulps, TORCH_EXP_MIDPOINT_ULPS);
        CHECK(ulps * 64 <= TORCH_EXP_MIDPOINT_ULPS, "%s: the margin is 64 times the error seen",
              path_name(paths[p]));
        /* u = 0 (both words 0 in their low 53 bits) gives +0.0 as libm's -log1p(-0.0) does */
        uint32_t zero[32] = {0};
        float out[16];
        torch_exponential_from_words(zero, out, 16, paths[p]);
        int neg = 0;
        for (int i = 0; i < 16; i++)
            neg += f32_bits(out[i]) != 0;
        CHECK(neg == 0, "%s: u = 0 gives +0 (%d lanes differ)", path_name(paths[p]), neg);
    }
    omp_set_num_threads(max_threads);
    check_rows();
    check_pinned();
    return harness_finish("test_torch_exponential");
}
