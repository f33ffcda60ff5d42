/* Preference losses (DPO and variants, KTO, ORPO, CPO/SimPO/AlphaPO) against TRL 1.9 itself, plus
 * the spec's sanity invariants (trl-methods.md §9), finite-difference checks of every gradient
 * and the option errors.
 *
 * Parity: tests/fixtures/pref_losses/{dpo,kto,orpo,cpo}.json
 * (tools/reference/make_pref_loss_fixtures.py) hold token ids, masks and logits that TRL's own
 * trainers ran on, with TRL's loss, d loss / d logits and logged metrics. Here the per-token
 * log-probs are recomputed from the logits, summed into what the loss sees, the loss's per-sequence
 * gradient is spread over the tokens as pref_loss.h says the trainer will, mapped through the
 * softmax to d loss / d logits and compared with TRL's to 1e-4 relative (of each entry, with a
 * floor of 1e-6 of the array's largest entry). */
#include "common/error.h"
#include "common/json_util.h"
#include "harness.h"
#include "methods/cpo.h"
#include "methods/dpo.h"
#include "methods/kto.h"
#include "methods/orpo.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-4

/* CHECK as an expression: records the check and gives back whether it held. */
#define CHECK_OK(cond, ...) check_ok((cond), __FILE__, __LINE__, __VA_ARGS__)

static bool check_ok(bool ok, const char *file, int line, const char *fmt, ...) {
    harness_checks++;
    if (!ok) {
        harness_failures++;
        fprintf(stderr, "%s:%d: ", file, line);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    return ok;
}

static double worst_rel; /* the largest relative error seen against TRL */

/* ------------------------------------------------------------------ fixture scenes */

/* Right-padded rows of token ids with the logits a model gave for them. */
typedef struct {
    int rows, t_len, vocab;
    int *ids;             /* (rows, T) */
    uint8_t *attn, *comp; /* (rows, T): real tokens, completion tokens */
    double *logits;       /* (rows, T, V) */
    double *prob;         /* (rows, T, V) softmax of logits */
    double *logp;         /* (rows, T) logp of token t given t-1 (0 at t = 0) */
    double *comp_sum;     /* [rows] Σ logp over completion tokens */
    int *comp_len;        /* [rows] */
    double *seq_sum;      /* [rows] Σ logp over every real token t >= 1 */
    int *seq_len;         /* [rows] */
} Scene;

static json_t *load_fixture(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/pref_losses/%s", name);
    json_t *root;
    if (json_load_path(harness_source_path(rel), &root) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        exit(1);
    }
    return root;
}

static double *json_doubles(const json_t *arr, size_t want) {
    if (!json_is_array(arr) || json_array_size(arr) != want) {
        fprintf(stderr, "fixture: expected an array of %zu numbers\n", want);
        exit(1);
    }
    double *v = malloc(want * sizeof *v);
    for (size_t i = 0; i < want; i++)
        v[i] = json_number_value(json_array_get(arr, i));
    return v;
}

static double num(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    if (!json_is_number(v)) {
        fprintf(stderr, "fixture: missing number '%s'\n", key);
        exit(1);
    }
    return json_number_value(v);
}

static void scene_load(Scene *s, const json_t *j) {
    s->rows = (int)num(j, "rows");
    s->t_len = (int)num(j, "t_len");
    s->vocab = (int)num(j, "vocab");
    int R = s->rows, T = s->t_len, V = s->vocab;
    size_t nt = (size_t)R * T, nl = nt * V;
    s->ids = calloc(nt, sizeof *s->ids);
    s->attn = calloc(nt, 1);
    s->comp = calloc(nt, 1);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)r * T + t;
            s->ids[i] = (int)json_integer_value(
                json_array_get(json_array_get(json_object_get(j, "input_ids"), r), t));
            s->attn[i] = (uint8_t)json_integer_value(
                json_array_get(json_array_get(json_object_get(j, "attention_mask"), r), t));
            s->comp[i] = (uint8_t)json_integer_value(
                json_array_get(json_array_get(json_object_get(j, "completion_mask"), r), t));
        }
    s->logits = json_doubles(json_object_get(j, "logits"), nl);
    s->prob = calloc(nl, sizeof *s->prob);
    s->logp = calloc(nt, sizeof *s->logp);
    for (size_t p = 0; p < nt; p++) {
        const double *x = s->logits + p * V;
        double m = x[0], z = 0;
        for (int v = 1; v < V; v++)
            m = fmax(m, x[v]);
        for (int v = 0; v < V; v++)
            z += exp(x[v] - m);
        for (int v = 0; v < V; v++)
            s->prob[p * V + v] = exp(x[v] - m) / z;
        if (p % (size_t)T != (size_t)T - 1) s->logp[p + 1] = x[s->ids[p + 1]] - m - log(z);
    }
    s->comp_sum = calloc(R, sizeof *s->comp_sum);
    s->seq_sum = calloc(R, sizeof *s->seq_sum);
    s->comp_len = calloc(R, sizeof *s->comp_len);
    s->seq_len = calloc(R, sizeof *s->seq_len);
    for (int r = 0; r < R; r++)
        for (int t = 1; t < T; t++) {
            size_t i = (size_t)r * T + t;
            if (s->comp[i]) s->comp_sum[r] += s->logp[i], s->comp_len[r]++;
            if (s->attn[i]) s->seq_sum[r] += s->logp[i], s->seq_len[r]++;
        }
}

static void scene_free(Scene *s) {
    free(s->ids), free(s->attn), free(s->comp), free(s->logits), free(s->prob), free(s->logp);
    free(s->comp_sum), free(s->seq_sum), free(s->comp_len), free(s->seq_len);
}

/* The trainer's side of pref_loss.h: dL/dlogp_t = dcomp[r] on completion tokens + dseq[r] on
 * every real token t >= 1; then through log-softmax: dL/dlogits[t-1][v] = g (δ(v, id_t) − p_v). */
static double *scene_spread(const Scene *s, const double *dcomp, const double *dseq) {
    int T = s->t_len, V = s->vocab;
    double *d = calloc((size_t)s->rows * T * V, sizeof *d);
    for (int r = 0; r < s->rows; r++)
        for (int t = 1; t < T; t++) {
            size_t i = (size_t)r * T + t;
            double g = (s->comp[i] ? dcomp[r] : 0) + (s->attn[i] && dseq ? dseq[r] : 0);
            if (g == 0) continue;
            size_t p = (i - 1) * V;
            for (int v = 0; v < V; v++)
                d[p + v] = g * ((v == s->ids[i]) - s->prob[p + v]);
        }
    return d;
}

/* ------------------------------------------------------------------ comparisons */

static void compare_scalar(const char *what, const char *name, double got, double want) {
    double err = fabs(got - want);
    if (fabs(want) > 1e-12) {
        err /= fabs(want);
        if (err > worst_rel) worst_rel = err;
    }
    CHECK(err <= TOL, "%s %s: %.12g vs TRL %.12g", name, what, got, want);
}

static void compare_array(const char *what, const char *name, const double *got, const json_t *want,
                          size_t n) {
    double *w = json_doubles(want, n), big = 0;
    for (size_t i = 0; i < n; i++)
        big = fmax(big, fabs(w[i]));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - w[i]) / (fabs(w[i]) + 1e-6 * big + 1e-300);
        if (err > worst_rel) worst_rel = err;
        if (err > TOL && bad++ == 0) first = i;
    }
    CHECK(bad == 0, "%s %s: %zu of %zu entries differ; first [%zu] %.12g vs TRL %.12g", name, what,
          bad, n, first, got[first], w[first]);
    free(w);
}

/* Keys TRL's trainers log from the logits or the token counts: the trainer's job, not a loss's. */
static bool trainer_metric(const char *key) {
    static const char *const keys[] = {"logits/chosen", "logits/rejected",     "entropy",
                                       "num_tokens",    "mean_token_accuracy", "aux_loss"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i]) == 0) return true;
    return false;
}

/* Every metric the loss logs is TRL's, with TRL's value, and every loss metric TRL logs is
 * there; `extra` (or NULL) may be logged without a TRL counterpart. */
static void compare_metrics(const char *name, const PrefMetrics *m, const json_t *want,
                            const char *extra) {
    for (int k = 0; k < m->n; k++) {
        const json_t *w = json_object_get(want, m->name[k]);
        if (!w) {
            CHECK(extra && strcmp(m->name[k], extra) == 0, "%s: metric %s is not TRL's", name,
                  m->name[k]);
            continue;
        }
        char what[96];
        snprintf(what, sizeof what, "metric %s", m->name[k]);
        compare_scalar(what, name, m->value[k], json_number_value(w));
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)want, key, v) {
        if (trainer_metric(key)) continue;
        bool found = false;
        for (int k = 0; k < m->n; k++)
            found |= strcmp(m->name[k], key) == 0;
        CHECK(found, "%s: TRL logs %s, the loss does not", name, key);
    }
}

static double metric(const PrefMetrics *m, const char *key) {
    for (int k = 0; k < m->n; k++)
        if (strcmp(m->name[k], key) == 0) return m->value[k];
    return NAN;
}

/* ------------------------------------------------------------------ parity with TRL */

static void dpo_options_from(const json_t *c, DpoOptions *opt) {
    memset(opt, 0, sizeof *opt);
    const json_t *types = json_object_get(c, "loss_type"),
                 *weights = json_object_get(c, "loss_weights");
    opt->n_types = (int)json_array_size(types);
    for (int k = 0; k < opt->n_types; k++) {
        CHECK(dpo_loss_type_parse(json_string_value(json_array_get(types, k)), &opt->types[k]) == 0,
              "%s", err_msg());
        opt->weights[k] = json_number_value(json_array_get(weights, k));
    }
    opt->beta = num(c, "beta");
    opt->label_smoothing = num(c, "label_smoothing");
    opt->discopop_tau = json_object_get(c, "discopop_tau") ? num(c, "discopop_tau") : 0.05;
    bool legacy;
    if (json_get_bool(c, "legacy_compat", &legacy) == 1) opt->legacy_compat = legacy;
    if (json_object_get(c, "rpo_alpha")) opt->rpo_alpha = num(c, "rpo_alpha");
}

static void test_dpo_parity(void) {
    json_t *root = load_fixture("dpo.json");
    const json_t *sj = json_object_get(root, "scene");
    Scene s;
    scene_load(&s, sj);
    int B = s.rows / 2;
    double *ref_c = json_doubles(json_object_get(sj, "ref_chosen_logps"), B);
    double *ref_r = json_doubles(json_object_get(sj, "ref_rejected_logps"), B);
    PrefBatch b = {B,     s.comp_sum, s.comp_sum + B, s.comp_len, s.comp_len + B,
                   ref_c, ref_r,      s.seq_sum,      s.seq_len};
    double d[3][64], dcomp[128], sft_loss = NAN;
    PrefLossOutput out = {.d_chosen = d[0], .d_rejected = d[1], .d_seq_chosen = d[2]};
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *rlhf = json_object_get(c, "rlhf_options");
        DpoOptions opt;
        dpo_options_from(c, &opt);
        if (rlhf) { /* a legacy option set, checked against its TRL 1.9 multi-loss equivalent */
            json_t *merged = json_deep_copy(c);
            json_object_update(merged, (json_t *)rlhf);
            dpo_options_from(merged, &opt);
            json_decref(merged);
        }
        if (!CHECK_OK(dpo_loss(&opt, &b, &out) == 0, "%s: %s", name, err_msg())) continue;
        compare_scalar("loss", name, out.loss, num(c, "loss"));
        for (int k = 0; k < B; k++)
            dcomp[k] = out.d_chosen[k], dcomp[B + k] = out.d_rejected[k];
        double dseq[128] = {0};
        for (int k = 0; k < B; k++)
            dseq[k] = out.d_seq_chosen[k];
        double *dl = scene_spread(&s, dcomp, dseq);
        compare_array("d_logits", name, dl, json_object_get(c, "d_logits"),
                      (size_t)s.rows * s.t_len * s.vocab);
        free(dl);
        compare_metrics(name, &out.metrics, json_object_get(c, "metrics"),
                        rlhf ? "nll_loss" : NULL);
        if (strcmp(name, "sft") == 0) sft_loss = out.loss;
        if (rlhf) /* TRL <= 0.28 logged the rpo NLL: the sft loss of the same batch */
            compare_scalar("metric nll_loss", name, metric(&out.metrics, "nll_loss"), sft_loss);
    }
    free(ref_c), free(ref_r);
    scene_free(&s);
    json_decref(root);
}

static void test_kto_parity(void) {
    json_t *root = load_fixture("kto.json");
    const json_t *sj = json_object_get(root, "scene");
    Scene s, kl;
    scene_load(&s, sj);
    scene_load(&kl, json_object_get(sj, "kl"));
    int n = s.rows;
    double *ref = json_doubles(json_object_get(sj, "ref_logps"), n), d[64];
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        KtoOptions opt = {.beta = num(c, "beta"),
                          .desirable_weight = num(c, "desirable_weight"),
                          .undesirable_weight = num(c, "undesirable_weight")};
        CHECK(kto_loss_type_parse(json_string_value(json_object_get(c, "loss_type")),
                                  &opt.loss_type) == 0,
              "%s", err_msg());
        bool desirable[64];
        for (int r = 0; r < n; r++)
            desirable[r] = json_is_true(json_array_get(json_object_get(c, "label"), r));
        double *ref_kl = json_doubles(json_object_get(c, "ref_KL_logps"), n);
        bool kto = opt.loss_type == KTO_LOSS_KTO;
        KtoBatch b = {n,
                      s.comp_sum,
                      s.comp_len,
                      ref,
                      desirable,
                      kto ? kl.comp_sum : NULL,
                      kto ? ref_kl : NULL};
        KtoLossOutput out = {.d_logp = d};
        if (CHECK_OK(kto_loss(&opt, &b, &out) == 0, "%s: %s", name, err_msg())) {
            compare_scalar("loss", name, out.loss, num(c, "loss"));
            double *dl = scene_spread(&s, out.d_logp, NULL);
            compare_array("d_logits", name, dl, json_object_get(c, "d_logits"),
                          (size_t)s.rows * s.t_len * s.vocab);
            free(dl);
            compare_metrics(name, &out.metrics, json_object_get(c, "metrics"), NULL);
        }
        free(ref_kl);
    }
    free(ref);
    scene_free(&s), scene_free(&kl);
    json_decref(root);
}

/* ORPO and CPO share a scene layout: chosen rows, then rejected rows, no reference. */
static void test_odds_parity(const char *file, bool orpo) {
    json_t *root = load_fixture(file);
    Scene s;
    scene_load(&s, json_object_get(root, "scene"));
    int B = s.rows / 2;
    PrefBatch b = {B,    s.comp_sum, s.comp_sum + B, s.comp_len, s.comp_len + B,
                   NULL, NULL,       s.seq_sum,      s.seq_len};
    double d[3][64], dcomp[128], dseq[128] = {0};
    PrefLossOutput out = {.d_chosen = d[0], .d_rejected = d[1], .d_seq_chosen = d[2]};
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        int rc;
        if (orpo) {
            OrpoOptions opt = {.beta = num(c, "beta")};
            rc = orpo_loss(&opt, &b, &out);
        } else {
            /* From the config as the user wrote it (alphapo is sugar), then checked against
             * what CPOConfig made of it. */
            const json_t *cfg = json_object_get(c, "config");
            CpoOptions opt = {.beta = 0.1, .cpo_alpha = 1.0, .simpo_gamma = 0.5};
            json_get_double(cfg, "beta", &opt.beta);
            json_get_double(cfg, "label_smoothing", &opt.label_smoothing);
            json_get_double(cfg, "cpo_alpha", &opt.cpo_alpha);
            json_get_double(cfg, "simpo_gamma", &opt.simpo_gamma);
            json_get_double(cfg, "alpha", &opt.alpha);
            CHECK(cpo_loss_type_parse(json_string_value(json_object_get(cfg, "loss_type")), &opt) ==
                      0,
                  "%s", err_msg());
            CpoOptions want = opt;
            CHECK(cpo_loss_type_parse(json_string_value(json_object_get(c, "loss_type")), &want) ==
                      0,
                  "%s", err_msg());
            CHECK(opt.loss_type == want.loss_type && opt.cpo_alpha == num(c, "cpo_alpha"),
                  "%s: options differ from CPOConfig's", name);
            rc = cpo_loss(&opt, &b, &out);
        }
        if (!CHECK_OK(rc == 0, "%s: %s", name, err_msg())) continue;
        compare_scalar("loss", name, out.loss, num(c, "loss"));
        for (int k = 0; k < B; k++) {
            dcomp[k] = out.d_chosen[k], dcomp[B + k] = out.d_rejected[k];
            dseq[k] = out.d_seq_chosen[k];
        }
        double *dl = scene_spread(&s, dcomp, dseq);
        compare_array("d_logits", name, dl, json_object_get(c, "d_logits"),
                      (size_t)s.rows * s.t_len * s.vocab);
        free(dl);
        compare_metrics(name, &out.metrics, json_object_get(c, "metrics"), NULL);
    }
    scene_free(&s);
    json_decref(root);
}

/* ------------------------------------------------------------------ random batches */

#define FD_N 5

typedef struct {
    double logp_c[FD_N], logp_r[FD_N], ref_c[FD_N], ref_r[FD_N], seq_c[FD_N];
    int len_c[FD_N], len_r[FD_N], seq_len_c[FD_N];
    bool desirable[FD_N];
    double kl_logp[FD_N], kl_ref[FD_N];
    PrefBatch b;
} RandomBatch;

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static double uniform(void) {
    return harness_uniform(&rng_state);
}

/* Pairs with 1..6 completion tokens of log-prob −0.3..−2.5 each, references a log-ratio of up
 * to ±2 away, prompts of 1..4 tokens. */
static void random_batch(RandomBatch *r) {
    for (int i = 0; i < FD_N; i++) {
        r->len_c[i] = 1 + (int)(6 * uniform());
        r->len_r[i] = 1 + (int)(6 * uniform());
        r->logp_c[i] = -r->len_c[i] * (0.3 + 2.2 * uniform());
        r->logp_r[i] = -r->len_r[i] * (0.3 + 2.2 * uniform());
        r->ref_c[i] = r->logp_c[i] + 4 * uniform() - 2;
        r->ref_r[i] = r->logp_r[i] + 4 * uniform() - 2;
        int prompt = 1 + (int)(4 * uniform());
        r->seq_c[i] = r->logp_c[i] - prompt * (0.5 + 2 * uniform());
        r->seq_len_c[i] = r->len_c[i] + prompt;
        r->desirable[i] = uniform() < 0.5;
        r->kl_logp[i] = -8 * uniform();
        r->kl_ref[i] = r->kl_logp[i] + 2 * uniform() - 0.5;
    }
    r->b = (PrefBatch){FD_N,     r->logp_c, r->logp_r, r->len_c,    r->len_r,
                       r->ref_c, r->ref_r,  r->seq_c,  r->seq_len_c};
}

/* ------------------------------------------------------------------ finite differences */

typedef int (*PrefLossFn)(const void *opt, const PrefBatch *b, PrefLossOutput *out);

static int dpo_fn(const void *opt, const PrefBatch *b, PrefLossOutput *out) {
    return dpo_loss(opt, b, out);
}
static int orpo_fn(const void *opt, const PrefBatch *b, PrefLossOutput *out) {
    return orpo_loss(opt, b, out);
}
static int cpo_fn(const void *opt, const PrefBatch *b, PrefLossOutput *out) {
    return cpo_loss(opt, b, out);
}

static bool fd_close(double analytic, double fd) {
    return fabs(analytic - fd) <= 1e-6 + 1e-5 * fabs(fd);
}

/* Central differences of the loss in every per-sequence sum against the returned gradient. */
static void fd_check_pref(const char *what, PrefLossFn fn, const void *opt, RandomBatch *r) {
    double d[3][FD_N], e[3][FD_N];
    PrefLossOutput out = {.d_chosen = d[0], .d_rejected = d[1], .d_seq_chosen = d[2]},
                   tmp = {.d_chosen = e[0], .d_rejected = e[1], .d_seq_chosen = e[2]};
    if (!CHECK_OK(fn(opt, &r->b, &out) == 0, "%s: %s", what, err_msg())) return;
    double *sums[3] = {r->logp_c, r->logp_r, r->seq_c};
    const char *names[3] = {"chosen", "rejected", "seq_chosen"};
    const double h = 1e-5;
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < FD_N; i++) {
            double keep = sums[a][i];
            sums[a][i] = keep + h;
            fn(opt, &r->b, &tmp);
            double up = tmp.loss;
            sums[a][i] = keep - h;
            fn(opt, &r->b, &tmp);
            double down = tmp.loss;
            sums[a][i] = keep;
            double fd = (up - down) / (2 * h);
            CHECK(fd_close(d[a][i], fd), "%s: dL/d %s[%d] = %.10g, finite difference %.10g", what,
                  names[a], i, d[a][i], fd);
        }
}

static void test_dpo_gradients(void) {
    static const struct {
        DpoLossType type;
        double beta, eps;
    } singles[] = {
        {DPO_SIGMOID, 0.7, 0},        {DPO_HINGE, 0.7, 0},     {DPO_IPO, 0.3, 0},
        {DPO_EXO_PAIR, 0.7, 0.1},     {DPO_NCA_PAIR, 0.7, 0},  {DPO_ROBUST, 0.7, 0.2},
        {DPO_BCO_PAIR, 0.7, 0},       {DPO_SPPO_HARD, 0.4, 0}, {DPO_AOT, 0.7, 0.1},
        {DPO_AOT_UNPAIRED, 0.7, 0.1}, {DPO_APO_ZERO, 0.7, 0},  {DPO_APO_DOWN, 0.7, 0},
        {DPO_DISCOPOP, 0.02, 0},      {DPO_DISCOPOP, 0.7, 0},  {DPO_SFT, 0.7, 0},
        {DPO_SIGMOID_NORM, 0.7, 0},
    };
    RandomBatch r;
    for (int rep = 0; rep < 3; rep++) {
        random_batch(&r);
        for (size_t k = 0; k < sizeof singles / sizeof singles[0]; k++) {
            DpoOptions opt = {.beta = singles[k].beta,
                              .label_smoothing = singles[k].eps,
                              .discopop_tau = 0.05,
                              .types = {singles[k].type},
                              .weights = {1.3},
                              .n_types = 1};
            char what[64];
            snprintf(what, sizeof what, "dpo %s (beta %g)", dpo_loss_type_name(singles[k].type),
                     singles[k].beta);
            fd_check_pref(what, dpo_fn, &opt, &r);
        }
        DpoOptions mpo = {.beta = 0.3,
                          .types = {DPO_SIGMOID, DPO_BCO_PAIR, DPO_SFT, DPO_AOT},
                          .weights = {0.8, 0.2, 1.0, 0.5},
                          .label_smoothing = 0.1,
                          .n_types = 4};
        fd_check_pref("dpo multi-loss", dpo_fn, &mpo, &r);
        DpoOptions legacy = {.beta = 0.5,
                             .label_smoothing = 0.15,
                             .legacy_compat = true,
                             .rpo_alpha = 0.6,
                             .types = {DPO_SIGMOID},
                             .weights = {1},
                             .n_types = 1};
        fd_check_pref("dpo legacy cDPO + rpo_alpha", dpo_fn, &legacy, &r);
        DpoOptions legacy_exo = {.beta = 0.5,
                                 .legacy_compat = true,
                                 .types = {DPO_EXO_PAIR},
                                 .weights = {1},
                                 .n_types = 1};
        fd_check_pref("dpo legacy exo_pair (eps 1e-3)", dpo_fn, &legacy_exo, &r);
    }
}

static void test_orpo_cpo_gradients(void) {
    RandomBatch r;
    for (int rep = 0; rep < 3; rep++) {
        random_batch(&r);
        OrpoOptions orpo = {.beta = 0.3};
        fd_check_pref("orpo", orpo_fn, &orpo, &r);
        for (int type = CPO_SIGMOID; type <= CPO_SIMPO; type++)
            for (int variant = 0; variant < 4; variant++) {
                CpoOptions opt = {.loss_type = (CpoLossType)type,
                                  .beta = type == CPO_SIMPO ? 2.0 : 0.2,
                                  .label_smoothing = 0.1,
                                  .cpo_alpha = variant & 1 ? 0.8 : 0,
                                  .simpo_gamma = 0.5,
                                  .alpha = variant & 2 ? 0.1 : 0};
                char what[64];
                snprintf(what, sizeof what, "cpo type %d cpo_alpha %g alpha %g", type,
                         opt.cpo_alpha, opt.alpha);
                fd_check_pref(what, cpo_fn, &opt, &r);
            }
    }
}

static void test_kto_gradients(void) {
    RandomBatch r;
    double d[FD_N], e[FD_N];
    for (int rep = 0; rep < 3; rep++) {
        random_batch(&r);
        for (int lt = 0; lt < 2; lt++) {
            KtoOptions opt = {(KtoLossType)lt, 0.4, 1.3, 0.7};
            KtoBatch b = {FD_N, r.logp_c, r.len_c, r.ref_c, r.desirable, r.kl_logp, r.kl_ref};
            KtoLossOutput out = {.d_logp = d}, tmp = {.d_logp = e};
            if (!CHECK_OK(kto_loss(&opt, &b, &out) == 0, "kto: %s", err_msg())) continue;
            const double h = 1e-5;
            for (int i = 0; i < FD_N; i++) {
                /* The KL estimate is detached: hold it fixed while the row moves. */
                double kl = kto_kl_mean(&b), keep = r.logp_c[i];
                r.logp_c[i] = keep + h;
                kto_loss_with_kl(&opt, &b, kl, &tmp);
                double up = tmp.loss;
                r.logp_c[i] = keep - h;
                kto_loss_with_kl(&opt, &b, kl, &tmp);
                double down = tmp.loss;
                r.logp_c[i] = keep;
                CHECK(fd_close(d[i], (up - down) / (2 * h)),
                      "kto %d: dL/dlogp[%d] = %.10g vs %.10g", lt, i, d[i], (up - down) / (2 * h));
            }
        }
    }
}

/* ------------------------------------------------------------------ sanity invariants (§9) */

static void test_invariants(void) {
    RandomBatch r;
    random_batch(&r);
    double d[3][FD_N];
    PrefLossOutput out = {.d_chosen = d[0], .d_rejected = d[1], .d_seq_chosen = d[2]};
    /* Policy == reference. */
    PrefBatch init = r.b;
    init.ref_chosen = r.logp_c, init.ref_rejected = r.logp_r;

    DpoOptions sig = {.beta = 0.1, .types = {DPO_SIGMOID}, .weights = {1}, .n_types = 1};
    CHECK(dpo_loss(&sig, &init, &out) == 0, "%s", err_msg());
    CHECK(harness_close(out.loss, log(2.0), 1e-12, 0), "DPO sigmoid at init: %.12g, want ln 2",
          out.loss);
    CHECK(metric(&out.metrics, "rewards/chosen") == 0 &&
              metric(&out.metrics, "rewards/margins") == 0 &&
              metric(&out.metrics, "rewards/accuracies") == 0,
          "DPO at init: rewards and accuracy must be 0");
    CHECK(harness_close(d[0][0], -0.1 * 0.5 / FD_N, 1e-12, 0), "DPO at init: dL/dπ_c = −β/(2n)");

    DpoOptions ipo = {.beta = 0.1, .types = {DPO_IPO}, .weights = {1}, .n_types = 1};
    CHECK(dpo_loss(&ipo, &init, &out) == 0, "%s", err_msg());
    CHECK(harness_close(out.loss, 25, 1e-12, 0), "IPO at init (beta 0.1): %.12g, want 25",
          out.loss);

    /* KTO at init: KL rows equal under both models, every row loses 0.5 before its weight. */
    double kd[FD_N];
    bool des[FD_N] = {true, true, false, true, false};
    KtoBatch kb = {FD_N, r.logp_c, r.len_c, r.logp_c, des, r.kl_logp, r.kl_logp};
    KtoLossOutput ko = {.d_logp = kd};
    KtoOptions kto = {KTO_LOSS_KTO, 0.1, 1, 1};
    CHECK(kto_loss(&kto, &kb, &ko) == 0, "%s", err_msg());
    CHECK(harness_close(ko.loss, 0.5, 1e-12, 0) && metric(&ko.metrics, "kl") == 0,
          "KTO at init: loss %.12g kl %g, want 0.5 and 0", ko.loss, metric(&ko.metrics, "kl"));
    kto.desirable_weight = 2, kto.undesirable_weight = 0.5;
    CHECK(kto_loss(&kto, &kb, &ko) == 0, "%s", err_msg());
    CHECK(harness_close(ko.loss, (3 * 2 * 0.5 + 2 * 0.5 * 0.5) / 5, 1e-12, 0),
          "KTO at init, weights 2 / 0.5: %.12g", ko.loss);

    /* ORPO: the log odds are antisymmetric in chosen/rejected, logσ(lo) <= 0. */
    OrpoOptions orpo = {.beta = 0.1};
    CHECK(orpo_loss(&orpo, &r.b, &out) == 0, "%s", err_msg());
    double lo = metric(&out.metrics, "log_odds_chosen");
    CHECK(metric(&out.metrics, "log_odds_ratio") <= 0, "ORPO: mean logσ(lo) must be <= 0");
    PrefBatch swapped = r.b;
    swapped.logp_chosen = r.logp_r, swapped.logp_rejected = r.logp_c;
    swapped.len_chosen = r.len_r, swapped.len_rejected = r.len_c;
    CHECK(orpo_loss(&orpo, &swapped, &out) == 0, "%s", err_msg());
    CHECK(harness_close(metric(&out.metrics, "log_odds_chosen"), -lo, 1e-12, 1e-15),
          "ORPO: swapping chosen and rejected must negate the log odds");

    /* SimPO (ε 0): softplus(γ − β(S̄_c − S̄_r)); at equal averages softplus(γ) = 0.9741 (γ 0.5). */
    CpoOptions simpo = {.loss_type = CPO_SIMPO, .beta = 2, .simpo_gamma = 0.5};
    CHECK(cpo_loss(&simpo, &r.b, &out) == 0, "%s", err_msg());
    double want = 0;
    for (int i = 0; i < FD_N; i++) {
        double x = 0.5 - 2 * (r.logp_c[i] / r.len_c[i] - r.logp_r[i] / r.len_r[i]);
        want += log1p(exp(x)) / FD_N;
    }
    CHECK(harness_close(out.loss, want, 1e-12, 0), "SimPO: %.12g, want %.12g", out.loss, want);
    PrefBatch equal = r.b;
    equal.logp_rejected = r.logp_c, equal.len_rejected = r.len_c;
    CHECK(cpo_loss(&simpo, &equal, &out) == 0, "%s", err_msg());
    CHECK(harness_close(out.loss, 0.974076984, 1e-9, 0), "SimPO at equal averages: %.12g",
          out.loss);
}

/* ------------------------------------------------------------------ option errors */

static bool err_mentions(const char *what) {
    return strstr(err_msg(), what) != NULL;
}

static void test_option_errors(void) {
    RandomBatch r;
    random_batch(&r);
    double d[3][FD_N];
    PrefLossOutput out = {.d_chosen = d[0], .d_rejected = d[1], .d_seq_chosen = d[2]};
    DpoLossType t;
    CHECK(dpo_loss_type_parse("aot_pair", &t) == -1 && err_mentions("aot_pair"),
          "the legacy name aot_pair is not a TRL 1.9 loss type");
    CHECK(dpo_loss_type_parse("", &t) == -1, "empty loss type");
    CHECK(dpo_loss_type_parse("aot_unpaired", &t) == 0 && t == DPO_AOT_UNPAIRED, "aot_unpaired");

    DpoOptions exo = {.beta = 0.1, .types = {DPO_EXO_PAIR}, .weights = {1}, .n_types = 1};
    CHECK(dpo_loss(&exo, &r.b, &out) == -1 && err_mentions("exo_pair"),
          "exo_pair with label_smoothing 0 must be an error (TRL raises)");
    exo.label_smoothing = 1.0;
    CHECK(dpo_loss(&exo, &r.b, &out) == -1, "exo_pair with label_smoothing 1");
    exo.label_smoothing = 0, exo.legacy_compat = true;
    CHECK(dpo_loss(&exo, &r.b, &out) == 0, "legacy exo_pair with label_smoothing 0 uses 1e-3");

    DpoOptions robust = {
        .beta = 0.1, .label_smoothing = 0.5, .types = {DPO_ROBUST}, .weights = {1}, .n_types = 1};
    CHECK(dpo_loss(&robust, &r.b, &out) == -1 && err_mentions("robust"), "robust with eps 0.5");
    DpoOptions ipo = {.beta = 0, .types = {DPO_IPO}, .weights = {1}, .n_types = 1};
    CHECK(dpo_loss(&ipo, &r.b, &out) == -1 && err_mentions("beta"), "ipo with beta 0");
    DpoOptions disco = {.beta = 0.1, .types = {DPO_DISCOPOP}, .weights = {1}, .n_types = 1};
    CHECK(dpo_loss(&disco, &r.b, &out) == -1 && err_mentions("discopop_tau"), "discopop tau 0");
    DpoOptions rpo = {
        .beta = 0.1, .rpo_alpha = 1, .types = {DPO_SIGMOID}, .weights = {1}, .n_types = 1};
    CHECK(dpo_loss(&rpo, &r.b, &out) == -1 && err_mentions("rpo_alpha"),
          "rpo_alpha without the legacy switch");
    DpoOptions none = {.beta = 0.1};
    CHECK(dpo_loss(&none, &r.b, &out) == -1, "no loss type");
    DpoOptions bad_type = {.beta = 0.1, .types = {(DpoLossType)99}, .weights = {1}, .n_types = 1};
    CHECK(dpo_loss(&bad_type, &r.b, &out) == -1, "an out-of-range loss type");
    DpoOptions sft = {.beta = 0.1, .types = {DPO_SFT}, .weights = {1}, .n_types = 1};
    int zero[FD_N] = {0};
    PrefBatch empty = r.b;
    empty.len_chosen = zero;
    CHECK(dpo_loss(&sft, &empty, &out) == -1 && err_mentions("sft"),
          "sft without chosen completion tokens");

    KtoLossType kt;
    CHECK(kto_loss_type_parse("kto_pair", &kt) == -1, "kto_pair is not a KTO loss type");
    CHECK(kto_loss_type_parse("apo_zero_unpaired", &kt) == 0 && kt == KTO_LOSS_APO_ZERO_UNPAIRED,
          "apo_zero_unpaired");
    double kd[FD_N];
    KtoBatch kb = {FD_N, r.logp_c, r.len_c, r.ref_c, r.desirable, NULL, NULL};
    KtoLossOutput ko = {.d_logp = kd};
    KtoOptions kto = {KTO_LOSS_KTO, 0.1, 1, 1};
    CHECK(kto_loss(&kto, &kb, &ko) == -1 && err_mentions("KL"), "kto without KL rows");
    kto.loss_type = KTO_LOSS_APO_ZERO_UNPAIRED;
    CHECK(kto_loss(&kto, &kb, &ko) == 0 && metric(&ko.metrics, "kl") == 0,
          "apo_zero_unpaired runs without KL rows and logs kl 0");

    CpoOptions cpo = {.beta = 0.1, .cpo_alpha = 1};
    CHECK(cpo_loss_type_parse("kto_pair", &cpo) == -1 && err_mentions("kto_pair"), "CPO kto_pair");
    CHECK(cpo_loss_type_parse("bco_pair", &cpo) == -1, "unknown CPO loss type");
    CHECK(cpo_loss_type_parse("alphapo", &cpo) == 0 && cpo.loss_type == CPO_SIMPO &&
              cpo.cpo_alpha == 0,
          "alphapo is simpo with cpo_alpha 0");
    cpo.beta = 0;
    CHECK(cpo_loss(&cpo, &r.b, &out) == -1, "simpo with beta 0");
    cpo.beta = 2;
    PrefBatch no_rejected = r.b;
    no_rejected.len_rejected = zero;
    CHECK(cpo_loss(&cpo, &no_rejected, &out) == -1, "simpo with an empty completion");

    OrpoOptions orpo = {.beta = 0.1};
    CHECK(orpo_loss(&orpo, &no_rejected, &out) == -1, "ORPO with an empty completion");
    PrefBatch no_seq = r.b;
    no_seq.seq_logp_chosen = NULL;
    CHECK(orpo_loss(&orpo, &no_seq, &out) == -1, "ORPO without whole-sequence log-probs");
}

int main(void) {
    static const char *const files[] = {"dpo.json", "kto.json", "orpo.json", "cpo.json"};
    double worst = 0;
    for (int f = 0; f < 4; f++) {
        worst_rel = 0;
        if (f == 0) test_dpo_parity();
        if (f == 1) test_kto_parity();
        if (f >= 2) test_odds_parity(files[f], f == 2);
        printf("%s: worst relative error against TRL 1.9 %.3g\n", files[f], worst_rel);
        worst = fmax(worst, worst_rel);
    }
    printf("worst relative error against TRL 1.9: %.3g\n", worst);
    test_invariants();
    test_dpo_gradients();
    test_kto_gradients();
    test_orpo_cpo_gradients();
    test_option_errors();
    return harness_finish("test_pref_losses");
}
