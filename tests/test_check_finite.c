/* model_check_finite (model/model.c): a block-wise vector scan, then the first bad index found
 * in the block that has one. The error must name the first non-finite value's flat index and
 * kind wherever it lies: in the first block, deep in a later one, in the ragged tail, with a
 * second bad value after it in the same block; an all-finite tensor (FLT_MAX, subnormals,
 * -0) passes. */
#include "common/error.h"
#include "harness.h"
#include "model/model_loading.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void expect_bad(float *w, size_t n, size_t at, float bad, const char *kind) {
    float keep = w[at];
    w[at] = bad;
    if (at + 3 < n) w[at + 3] = NAN; /* a later one must not be the one named */
    char want[160];
    snprintf(want, sizeof want, "d: tensor \"t\" holds %s at flat index %zu:", kind, at);
    int rc = model_check_finite(w, n, "d", "t");
    CHECK(rc != 0 && strstr(err_msg(), want) != NULL, "index %zu: got \"%s\", want \"%s...\"", at,
          rc ? err_msg() : "(accepted)", want);
    w[at] = keep;
    if (at + 3 < n) w[at + 3] = 0.5f;
}

int main(void) {
    size_t n = 3 * 4096 + 1234;
    float *w = malloc(n * sizeof *w);
    for (size_t i = 0; i < n; i++)
        w[i] = 0.5f;
    w[1] = FLT_MAX, w[2] = -FLT_MAX, w[3] = 1e-45f, w[4] = -0.0f;
    CHECK(model_check_finite(w, n, "d", "t") == 0, "all finite refused: %s", err_msg());
    size_t places[] = {0, 7, 4095, 4096, 2 * 4096 + 17, n - 1234, n - 2, n - 1};
    for (size_t k = 0; k < sizeof places / sizeof *places; k++) {
        expect_bad(w, n, places[k], NAN, "NaN");
        expect_bad(w, n, places[k], -INFINITY, "an infinity");
    }
    CHECK(model_check_finite(w, 0, "d", "t") == 0, "an empty tensor refused");
    free(w);
    return harness_finish("test_check_finite");
}
