/* fused_logprob_rows.h's row maximum (row_max) and its first argmax (row_max_arg), which run one
 * lane per vector slot, against the scalar walks they replaced (`m = z > m ? z : m`, and
 * `if (z > m) m = z, arg = c0 + j`): row_max the same value (bit for bit but a zero's sign, which
 * no use of it sees), row_max_arg the same value bit for bit and the same index. Rows built to
 * break a lane scheme: many ties (values from a set of 4), NaNs (never the maximum), +0 and -0,
 * -inf, every length 0..100 (tails past the 16-lane blocks), a running maximum and argmax carried
 * in from an earlier tile (above, equal to or below the row's values). */
#include "harness.h"
#include "kernels/cpu/fused_logprob_rows.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float walk_max(const float *z, int n, float m) {
    for (int j = 0; j < n; j++)
        m = z[j] > m ? z[j] : m;
    return m;
}

static float walk_max_arg(const float *z, int n, float m, int c0, int *arg) {
    for (int j = 0; j < n; j++)
        if (z[j] > m) m = z[j], *arg = c0 + j;
    return m;
}

int main(void) {
    static const float values[] = {1.0f, 2.0f, 2.0f, -3.0f, 0.0f, -0.0f, -INFINITY};
    static const float zeros[] = {0.0f, -0.0f, -3.0f, -INFINITY};
    unsigned seed = 11;
    float z[100];
    int rows = 0, off_max = 0, off_arg = 0;
    for (int trial = 0; trial < 400; trial++)
        for (int n = 0; n <= 100; n += 1 + trial % 3) {
            int palette = 1 + trial % 7; /* how many distinct values: few means many ties */
            for (int j = 0; j < n; j++) {
                unsigned r = (unsigned)rand_r(&seed);
                if (trial % 4 == 3) /* rows whose largest value is a zero of either sign */
                    z[j] = r % 17 == 0 ? NAN : zeros[r % 4];
                else
                    z[j] = r % 17 == 0 ? NAN : values[r % (unsigned)palette];
            }
            /* what an earlier tile left: below, equal to or above this row's values */
            static const float carried[] = {-INFINITY, 0.0f, -0.0f, 2.0f, 5.0f};
            float m0 = carried[trial % 5];
            int c0 = 1000 + trial, arg0 = trial % 5 == 0 ? 0 : 17;
            /* row_max's value is the walk's but for a zero's sign (its contract) */
            float want = walk_max(z, n, m0), got = row_max(z, n, m0);
            off_max += want != got || (want != 0.0f && memcmp(&want, &got, sizeof want) != 0);
            int want_arg = arg0, got_arg = arg0;
            want = walk_max_arg(z, n, m0, c0, &want_arg);
            got = row_max_arg(z, n, m0, c0, &got_arg);
            off_arg += memcmp(&want, &got, sizeof want) != 0 || want_arg != got_arg;
            rows++;
        }
    CHECK(off_max == 0, "row_max: %d of %d rows not the scalar walk's maximum", off_max, rows);
    CHECK(off_arg == 0, "row_max_arg: %d of %d rows not the scalar walk's maximum and index",
          off_arg, rows);
    return harness_finish("test_logit_rows");
}
