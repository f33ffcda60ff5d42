/* Shared prefixes (model/token_layout.h): a batch whose rows repeat an earlier row's prefix (a
 * preference pair's prompt, a GRPO group's prompt, a duplicated row) must give the log-probs
 * and the parameter gradients of the same batch computed row by row (TokenBatch.unshared), which
 * the parity tests check against transformers. Padding on either side, explicit position ids, a
 * prefix too short to share, equal tokens at other positions, and a sliding window (mistral_window:
 * window 6, so windows reach across the prefix boundary) are all in the batch. */
#include "common/error.h"
#include "harness.h"
#include "model/backward.h"
#include "model/token_layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 8, T = 40 };

typedef struct {
    int32_t tokens[B * T], positions[B * T];
    uint8_t mask[B * T];
    int expected_shared; /* cells computed in another row's rows, counted as the rows are made */
} Batch;

/* Row r: `pad` leading padding cells, then the n tokens of ids, then padding. */
static void set_row(Batch *b, int r, int pad, const int32_t *ids, int n) {
    for (int t = 0; t < T; t++) {
        int at = r * T + t, j = t - pad;
        bool real = j >= 0 && j < n;
        b->mask[at] = real;
        b->tokens[at] = real ? ids[j] : 0;
        b->positions[at] = real ? j : 0;
    }
}

static void make_batch(Batch *b, int vocab) {
    int32_t p[40], a[40], q[40], other[40];
    srand(3);
    for (int i = 0; i < 40; i++) {
        p[i] = rand() % vocab, a[i] = rand() % vocab;
        q[i] = rand() % vocab, other[i] = rand() % vocab;
    }
    int32_t row[40];
    memcpy(row, p, 20 * sizeof *row), memcpy(row + 20, a, 15 * sizeof *row);
    set_row(b, 0, 0, row, 35); /* prompt P + response A, right padding */
    memcpy(row + 20, other, 20 * sizeof *row);
    set_row(b, 1, 0, row, 40); /* P + another response: shares P's 20 cells */
    memcpy(row, q, 18 * sizeof *row), memcpy(row + 18, a, 18 * sizeof *row);
    set_row(b, 2, 4, row, 36); /* left padding, prompt Q */
    memcpy(row + 18, other, 10 * sizeof *row);
    set_row(b, 3, 4, row, 28); /* the same padding and Q: 22 cells, 18 real, shared */
    memcpy(row, p, 20 * sizeof *row), memcpy(row + 20, a, 15 * sizeof *row);
    set_row(b, 4, 0, row, 35); /* row 0 again: every cell shared */
    memcpy(row + 25, other, 10 * sizeof *row);
    set_row(b, 5, 0, row, 35); /* P + the first 5 of A: 25 shared with row 0 (20 with row 1) */
    memcpy(row, p, 10 * sizeof *row), memcpy(row + 10, q, 25 * sizeof *row);
    set_row(b, 6, 0, row, 35); /* only 10 cells in common with row 0: computed in full */
    memcpy(row, p, 20 * sizeof *row), memcpy(row + 20, a, 15 * sizeof *row);
    set_row(b, 7, 0, row, 35); /* row 0's tokens at other positions: nothing in common */
    for (int t = 0; t < 35; t++)
        b->positions[7 * T + t] += 3;
    b->expected_shared = 20 + 18 + 35 + 25;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* Logits-free checks of one model: the layout's counts, log-probs, and gradients. */
static void check_model(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s", harness_source_path("tests/fixtures/models/"));
    strncat(dir, name, sizeof dir - strlen(dir) - 1);
    Model m;
    if (model_load(&m, dir) != 0) {
        CHECK(false, "%s: %s", name, err_msg());
        return;
    }
    Batch data;
    make_batch(&data, m.cfg.vocab_size);
    TokenBatch shared = {.batch = B,
                         .t_len = T,
                         .tokens = data.tokens,
                         .attn_mask = data.mask,
                         .positions = data.positions};
    TokenBatch apart = shared;
    apart.unshared = true;
    size_t cells = (size_t)B * T;
    int real = 0;
    for (size_t i = 0; i < cells; i++)
        real += data.mask[i];

    TokenLayout lay;
    token_layout_build(&lay, &shared, true);
    CHECK((int)lay.shared_cells == data.expected_shared, "%s: %zu cells shared, expected %d", name,
          lay.shared_cells, data.expected_shared);
    CHECK((int)lay.n == real - data.expected_shared, "%s: %zu rows computed for %d real cells",
          name, lay.n, real);
    token_layout_free(&lay);

    /* log-probs through the inference path */
    float *lp_shared = calloc(cells, sizeof(float)), *lp_apart = calloc(cells, sizeof(float));
    CHECK(model_token_logprobs(&m, &shared, NULL, lp_shared) == 0, "%s", err_msg());
    CHECK(model_token_logprobs(&m, &apart, NULL, lp_apart) == 0, "%s", err_msg());
    int bad = 0, scored = 0;
    for (size_t i = 0; i < cells; i++) {
        bad += !harness_close(lp_shared[i], lp_apart[i], 1e-5, 1e-6);
        scored += lp_apart[i] != 0.0f;
    }
    CHECK(bad == 0 && scored > 150, "%s: %d of %d log-probs differ when prefixes are shared", name,
          bad, scored);

    /* the training tape, and the gradient of a random weighting of every log-prob */
    float *dlogp = calloc(cells, sizeof(float));
    for (size_t i = 0; i < cells; i++)
        dlogp[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    float *g_shared = calloc(m.n_params, sizeof(float)),
          *g_apart = calloc(m.n_params, sizeof(float));
    float *tape_lp = calloc(cells, sizeof(float));
    ForwardTape tape = {0};
    CHECK(model_forward_tape(&m, &shared, false, &tape) == 0, "%s", err_msg());
    CHECK(tape.n == (size_t)(real - data.expected_shared), "%s: the tape holds %zu rows", name,
          tape.n);
    model_tape_logprobs(&m, &tape, NULL, tape_lp);
    bad = 0;
    for (size_t i = 0; i < cells; i++)
        bad += !harness_close(tape_lp[i], lp_apart[i], 1e-5, 1e-6);
    CHECK(bad == 0, "%s: %d tape log-probs differ from the unshared forward", name, bad);
    CHECK(model_backward(&m, &tape, NULL, dlogp, g_shared, NULL) == 0, "%s", err_msg());
    forward_tape_free(&tape);
    CHECK(model_forward_tape(&m, &apart, true, &tape) == 0, "%s", err_msg());
    CHECK(model_backward(&m, &tape, NULL, dlogp, g_apart, NULL) == 0, "%s", err_msg());
    forward_tape_free(&tape);
    double scale = max_abs(g_apart, m.n_params), worst = 0;
    for (size_t i = 0; i < m.n_params; i++)
        worst = fmax(worst, fabs((double)g_shared[i] - g_apart[i]));
    CHECK(scale > 0 && worst <= 1e-5 * scale, "%s: gradients differ by %.3g (largest %.3g)", name,
          worst, scale);

    free(g_shared), free(g_apart), free(dlogp), free(tape_lp), free(lp_shared), free(lp_apart);
    model_free(&m);
}

int main(void) {
    /* gemma3_tiny: two RoPE table sets, the sliding layers' after the global ones */
    const char *models[] = {"llama_tied", "qwen2_bias", "qwen3_qknorm", "mistral_window",
                            "gemma3_tiny"};
    for (int i = 0; i < 5; i++)
        check_model(models[i]);
    return harness_finish("test_shared_prefix");
}
