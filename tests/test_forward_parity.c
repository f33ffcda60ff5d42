/* Forward parity with transformers: per-token log-probs of a padded batch and full logits
 * rows, against tests/fixtures/models/<name>/reference.json (fp32, relative error 1e-4).
 * Then the same with the weights kept in bf16 (model_store_bf16, what bf16: true does to a
 * reference model) against transformers with every weight rounded to bf16 and fp32 arithmetic
 * (reference_bf16.json), at the same tolerance.
 * Usage: test_forward_parity FIXTURE_DIR */
#include "common/error.h"
#include "harness.h"
#include "model/forward.h"
#include "reference_fixture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REL_TOL 1e-4

static void check_token_logp(const Model *m, const ReferenceFixture *f, double tol) {
    size_t n = (size_t)f->batch * f->t_len;
    float *logp = calloc(n, sizeof *logp);
    TokenBatch batch = {
        .batch = f->batch, .t_len = f->t_len, .tokens = f->tokens, .attn_mask = f->mask};
    CHECK(model_token_logprobs(m, &batch, NULL, logp) == 0, "forward: %s", err_msg());
    double worst = 0.0;
    int compared = 0;
    for (size_t i = 0; i < n; i++) {
        if (!f->mask[i] || i % (size_t)f->t_len == 0) continue;
        double rel = fabs(logp[i] - f->token_logp[i]) / fabs(f->token_logp[i]);
        if (rel > worst) worst = rel;
        compared++;
        CHECK(harness_close(logp[i], f->token_logp[i], tol, 1e-6),
              "token_logp[%zu][%zu]: got %.7f, transformers %.7f", i / f->t_len, i % f->t_len,
              logp[i], f->token_logp[i]);
    }
    CHECK(compared > 20, "compared %d positions", compared);
    printf("token_logp%s: %d positions, worst relative error %.2e\n",
           m->params16 ? " (weights in bf16)" : "", compared, worst);
    free(logp);
}

/* Logits are compared relative to the largest magnitude in their row: single logits near
 * zero have no meaningful relative error of their own. */
static void check_logits(const Model *m, const ReferenceFixture *f, double tol) {
    json_t *lc = json_object_get(f->root, "logits_check");
    int seq = (int)json_integer_value(json_object_get(lc, "batch"));
    int t0 = (int)json_integer_value(json_object_get(lc, "t0"));
    int t1 = (int)json_integer_value(json_object_get(lc, "t1"));
    json_t *rows = json_object_get(lc, "values");
    int V = m->cfg.vocab_size;
    CHECK((int)json_array_size(rows) == t1 - t0, "logits_check rows");
    float *out = calloc((size_t)(t1 - t0) * V, sizeof *out);
    TokenBatch batch = {
        .batch = f->batch, .t_len = f->t_len, .tokens = f->tokens, .attn_mask = f->mask};
    CHECK(model_logits(m, &batch, seq, t0, t1, out) == 0, "logits: %s", err_msg());
    for (int r = 0; r < t1 - t0; r++) {
        json_t *row = json_array_get(rows, (size_t)r);
        CHECK((int)json_array_size(row) == V, "logits row width");
        double scale = 0.0;
        for (int j = 0; j < V; j++)
            scale = fmax(scale, fabs(json_number_value(json_array_get(row, j))));
        int bad = 0;
        for (int j = 0; j < V; j++) {
            double want = json_number_value(json_array_get(row, j));
            if (fabs(out[(size_t)r * V + j] - want) > tol * scale) bad++;
        }
        CHECK(bad == 0, "logits row %d: %d of %d values off by more than %g x row max", t0 + r, bad,
              V, tol);
    }
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FIXTURE_DIR\n", argv[0]);
        return 2;
    }
    Model m;
    if (model_load(&m, argv[1]) != 0) {
        fprintf(stderr, "load: %s\n", err_msg());
        return 1;
    }
    ReferenceFixture f;
    reference_fixture_load(&f, argv[1]);
    check_token_logp(&m, &f, REL_TOL);
    check_logits(&m, &f, REL_TOL);

    CHECK(model_store_bf16(&m) == 0, "model_store_bf16: %s", err_msg());
    CHECK(m.params == NULL && m.params16 != NULL, "the weights are held in bf16 only");
    double change = reference_fixture_use_bf16(&f, argv[1]);
    printf("rounding the weights to bf16 moves a token log-prob by up to %.2e relative\n", change);
    check_token_logp(&m, &f, REL_TOL);
    check_logits(&m, &f, REL_TOL);
    reference_fixture_free(&f);
    model_free(&m);
    return harness_finish("test_forward_parity");
}
