/* attention_softmax_avx512 (the AMX attention's softmax of one score row) against the softmax
 * computed in double from the same fp32 scores:
 *  - every probability, and every exponential the packed form leaves in the row, to a relative
 *    error of a few fp32 ulps (the exponential's contract: below 2.5e-7), the returned 1 / sum too;
 *  - the columns before lo zero, past hi untouched, in the row or in the packed form (to stride);
 *  - the packed probabilities exactly narrow_bf16 of the unpacked ones (the same fp32 product
 *    e · (1 / sum) rounded), and the row's exponentials times the returned 1 / sum exactly them;
 *  - row lengths around the 16-lane vectors (the masked last vector) and the 32-value steps,
 *    windows starting mid-vector, a range wide enough to reach the exponential's clamp, and a
 *    NaN score, which makes the row NaN.
 * Passes with a message on a CPU without AVX-512 (nothing there calls it). */
#include "harness.h"
#include "kernels/cpu/attention_softmax_avx512.h"
#include "kernels/cpu/gemm_bf16_kernels.h"
#include "kernels/cpu/narrow_bf16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KEYS 600
#define STRIDE   608 /* > MAX_KEYS + 1, a multiple of 32 */

static uint64_t rng = 2029;
static double worst_exp;

/* One row of lo..hi filled with scores of `spread` around 0, the rest of the row 0 (the contract's
 * zeros past hi; before lo, a marker the softmax must zero). */
static void fill(float *row, int lo, int hi, float spread) {
    for (int j = 0; j < STRIDE; j++)
        row[j] = j < lo ? 7.0f : j <= hi ? spread * harness_frand(&rng) : 0.0f;
}

static void check_row(int lo, int hi, float spread) {
    float scores[STRIDE], row[STRIDE], exps[STRIDE];
    uint16_t packed[STRIDE];
    fill(scores, lo, hi, spread);
    float max = -INFINITY;
    for (int j = lo; j <= hi; j++)
        max = fmaxf(max, scores[j]);
    double want_exp[STRIDE], sum = 0; /* of x = s - max rounded to fp32, as the row computes it */
    for (int j = lo; j <= hi; j++)
        sum += want_exp[j] = exp((double)(scores[j] - max));

    memcpy(row, scores, sizeof row);
    float inv = attention_softmax_avx512(row, lo, hi, NULL, STRIDE);
    /* 1e-6: the fp32 sum of up to 38 values a lane (the exponentials alone: 2.5e-7 below) */
    CHECK(harness_close(inv, 1.0 / sum, 1e-6, 0), "lo %d hi %d: 1/sum %.9g, want %.9g", lo, hi, inv,
          1.0 / sum);
    int bad = 0;
    for (int j = 0; j < STRIDE; j++) {
        double want = j < lo || j > hi ? 0.0 : want_exp[j] / sum;
        /* e^-87.3 is where the exponential's clamp stops: below it 1.2e-38 / sum, not ~0 */
        bad += !harness_close(row[j], want, 1.2e-6, 1.3e-38);
    }
    CHECK(bad == 0, "lo %d hi %d spread %g: %d probabilities off", lo, hi, spread, bad);

    memcpy(exps, scores, sizeof exps);
    memset(packed, 0xff, sizeof packed);
    float inv_packed = attention_softmax_avx512(exps, lo, hi, packed, STRIDE);
    CHECK(inv_packed == inv, "lo %d hi %d: packed 1/sum %.9g differs", lo, hi, inv_packed);
    int bad_exp = 0, bad_pack = 0, bad_keep = 0;
    for (int j = 0; j < STRIDE; j++) {
        bool in = j >= lo && j <= hi;
        if (in) {
            double e = want_exp[j];
            if (e > 1.3e-38) worst_exp = fmax(worst_exp, fabs(exps[j] - e) / e);
            bad_exp += !harness_close(exps[j], e, 2.5e-7, 1.3e-38);
            bad_keep += exps[j] * inv != row[j];
        } else {
            bad_keep += exps[j] != scores[j]; /* outside lo..hi the row is not written */
        }
        bad_pack += packed[j] != (in ? narrow_bf16(row[j]) : 0);
    }
    CHECK(bad_exp == 0, "lo %d hi %d spread %g: %d exponentials off", lo, hi, spread, bad_exp);
    CHECK(bad_keep == 0, "lo %d hi %d: %d row values not the exponentials", lo, hi, bad_keep);
    CHECK(bad_pack == 0, "lo %d hi %d: %d packed words not the probabilities' bf16", lo, hi,
          bad_pack);
}

static void check_nan(void) {
    float row[STRIDE];
    fill(row, 0, 40, 4.0f);
    row[23] = NAN;
    float inv = attention_softmax_avx512(row, 0, 40, NULL, STRIDE);
    int finite = 0;
    for (int j = 0; j <= 40; j++)
        finite += !isnan(row[j]);
    CHECK(isnan(inv) && finite == 0, "a NaN score: 1/sum %g, %d probabilities not NaN", inv,
          finite);
}

int main(void) {
    if (!gemm_bf16_cpu_has_avx512() || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl")) {
        printf("test_attention_softmax: no AVX-512 here; the AMX attention never runs\n");
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
    check_nan();
    printf("largest relative error of an exponential: %.3g\n", worst_exp);
    return harness_finish("test_attention_softmax");
}
