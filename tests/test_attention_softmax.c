/* attention_softmax_avx512 (the AMX attention's softmax of one score row) against the softmax
 * computed in double from the same fp32 scores:
 *  - every exponential the packed form leaves in the row within the contract's 2.5e-7 relative
 *    (the exponential of the score clamped at -87.3, as the contract says), the returned 1 / sum
 *    and the probabilities within bounds derived from the fp32 sums (below);
 *  - the columns before lo zero; the row's zeros past hi and the next row's values after it
 *    untouched; the packed form zero to its stride and nothing written past it;
 *  - the packed probabilities exactly narrow_bf16 of the unpacked ones (the same fp32 product
 *    e · (1 / sum) rounded), and the row's exponentials times the returned 1 / sum exactly them;
 *  - row lengths around the 16-lane vectors (the masked last vector) and the 32-value steps,
 *    windows starting mid-vector, a range wide enough to reach the exponential's clamp, and a
 *    NaN score in the first or the masked last vector, which makes the row NaN in both forms.
 * Passes with a message on a CPU without what it needs (nothing there calls it). */
#include "harness.h"
#include "kernels/cpu/attention_softmax_avx512.h"
#include "kernels/cpu/gemm_bf16_kernels.h"
#include "kernels/cpu/narrow_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEYS    600
#define ROW_END     5   /* the contract's zero columns after hi in the test's rows */
#define ROOM        640 /* a row and the next row's first values; a multiple of 32 */
#define CANARY      3.0f
#define CANARY_WORD 0xabcd

static uint64_t rng = 2029;
static double worst_exp;

/* A row of n_keys = hi + 1 + ROW_END columns: a marker before lo (the softmax must zero it),
 * scores of `spread` around 0 in lo..hi, zeros to the row's end (the contract's), then the next
 * row's values (CANARY), which nothing may write. */
static int fill(float *row, int lo, int hi, float spread) {
    int n_keys = hi + 1 + ROW_END;
    for (int j = 0; j < ROOM; j++)
        row[j] = j < lo       ? 7.0f
                 : j <= hi    ? spread * harness_frand(&rng)
                 : j < n_keys ? 0.0f
                              : CANARY;
    return n_keys;
}

/* The exponential the contract promises for x: e^x, of x clamped at -87.3 below. */
static double want_exponential(float x) {
    return exp((double)(x > -87.3f ? x : -87.3f));
}

static void check_row(int lo, int hi, float spread) {
    float scores[ROOM], row[ROOM], exps[ROOM];
    uint16_t packed[ROOM];
    int n_keys = fill(scores, lo, hi, spread), stride = (n_keys + 31) / 32 * 32;
    float max = -INFINITY;
    for (int j = lo; j <= hi; j++)
        max = fmaxf(max, scores[j]);
    double want_exp[ROOM], sum = 0; /* of x = s - max rounded to fp32, as the row computes it */
    for (int j = lo; j <= hi; j++)
        sum += want_exp[j] = want_exponential(scores[j] - max);
    /* The fp32 sum: up to 38 adds a lane (595 columns), 4 in the lanes' tree, then 1 / sum: at
     * most 43 roundings of 2^-24 on top of the exponentials' 2.5e-7; a probability 1 more. */
    double sum_tol = 43 * 0x1p-24 + 2.5e-7, prob_tol = sum_tol + 0x1p-24 + 2.5e-7;

    memcpy(row, scores, sizeof row);
    float inv = attention_softmax_avx512(row, lo, hi, NULL, stride);
    CHECK(harness_close(inv, 1.0 / sum, sum_tol, 0), "lo %d hi %d: 1/sum %.9g, want %.9g", lo, hi,
          inv, 1.0 / sum);
    int bad = 0;
    for (int j = 0; j < ROOM; j++) {
        if (j >= lo && j <= hi)
            bad += !harness_close(row[j], want_exp[j] / sum, prob_tol, 0);
        else
            bad += row[j] != (j < lo ? 0.0f : scores[j]); /* past hi: the zeros, the next row */
    }
    CHECK(bad == 0, "lo %d hi %d spread %g: %d values off", lo, hi, spread, bad);

    memcpy(exps, scores, sizeof exps);
    for (int j = 0; j < ROOM; j++)
        packed[j] = CANARY_WORD;
    float inv_packed = attention_softmax_avx512(exps, lo, hi, packed, stride);
    CHECK(inv_packed == inv, "lo %d hi %d: packed 1/sum %.9g differs", lo, hi, inv_packed);
    int bad_exp = 0, bad_pack = 0, bad_keep = 0;
    for (int j = 0; j < ROOM; j++) {
        bool in = j >= lo && j <= hi;
        if (in) {
            worst_exp = fmax(worst_exp, fabs(exps[j] - want_exp[j]) / want_exp[j]);
            bad_exp += !harness_close(exps[j], want_exp[j], 2.5e-7, 0);
            bad_keep += exps[j] * inv != row[j];
        } else {
            bad_keep += exps[j] != scores[j]; /* outside lo..hi the row is not written */
        }
        bad_pack += packed[j] != (j >= stride ? CANARY_WORD : in ? narrow_bf16(row[j]) : 0);
    }
    CHECK(bad_exp == 0, "lo %d hi %d spread %g: %d exponentials off", lo, hi, spread, bad_exp);
    CHECK(bad_keep == 0, "lo %d hi %d: %d row values not the exponentials", lo, hi, bad_keep);
    CHECK(bad_pack == 0, "lo %d hi %d: %d packed words not the probabilities' bf16", lo, hi,
          bad_pack);
}

/* A NaN score at column `at` of 0..40: every probability NaN, in the row and packed (0x7fc0). */
static void check_nan(int at) {
    float row[ROOM], exps[ROOM];
    uint16_t packed[ROOM];
    int n_keys = fill(row, 0, 40, 4.0f), stride = (n_keys + 31) / 32 * 32;
    row[at] = NAN;
    memcpy(exps, row, sizeof exps);
    float inv = attention_softmax_avx512(row, 0, 40, NULL, stride);
    float inv_packed = attention_softmax_avx512(exps, 0, 40, packed, stride);
    int finite = 0;
    for (int j = 0; j <= 40; j++)
        finite += !isnan(row[j]) + (packed[j] != 0x7fc0);
    CHECK(isnan(inv) && isnan(inv_packed) && finite == 0,
          "a NaN score at %d: 1/sum %g, %d probabilities not NaN", at, inv, finite);
}

static bool has_what_it_needs(void) {
#if defined(__x86_64__)
    return gemm_bf16_cpu_has_avx512() && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return false;
#endif
}

int main(void) {
    if (!has_what_it_needs()) {
        printf("test_attention_softmax: no AVX-512 F, BW, VL with BF16 here; the AMX attention "
               "never runs\n");
        return harness_finish("test_attention_softmax");
    }
    for (int len = 1; len <= 70; len++)
        for (int lo = 0; lo <= 19; lo += 19)
            check_row(lo, lo + len - 1, 8.0f);
    int long_rows[] = {127, 128, 129, 300, 511, 512, MAX_KEYS - 5};
    for (size_t i = 0; i < sizeof long_rows / sizeof *long_rows; i++) {
        check_row(0, long_rows[i] - 1, 8.0f);
        check_row(5, long_rows[i] - 1, 8.0f);
        check_row(0, long_rows[i] - 1, 200.0f); /* e^(s - max) down to e^-400: the clamp */
    }
    check_nan(3);
    check_nan(38); /* in the masked last vector */
    printf("largest relative error of an exponential: %.3g\n", worst_exp);
    return harness_finish("test_attention_softmax");
}
