#include "methods/dpo.h"

#include "common/error.h"
#include "methods/logistic.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const loss_names[DPO_N_LOSS_TYPES] = {
    "sigmoid",  "hinge",    "ipo",       "exo_pair", "nca_pair",
    "robust",   "bco_pair", "sppo_hard", "aot",      "aot_unpaired",
    "apo_zero", "apo_down", "discopop",  "sft",      "sigmoid_norm"};

/* TRL <= 0.28 used this for exo_pair when label_smoothing was 0 (the EXO paper's value). */
#define DPO_LEGACY_EXO_EPSILON 1e-3

int dpo_loss_type_parse(const char *name, DpoLossType *out) {
    for (int i = 0; i < DPO_N_LOSS_TYPES; i++)
        if (strcmp(name, loss_names[i]) == 0) {
            *out = (DpoLossType)i;
            return 0;
        }
    return err_set("unknown DPO loss type \"%s\": expected one of sigmoid, hinge, ipo, exo_pair, "
                   "nca_pair, robust, bco_pair, sppo_hard, aot, aot_unpaired, apo_zero, apo_down, "
                   "discopop, sft, sigmoid_norm",
                   name);
}

const char *dpo_loss_type_name(DpoLossType type) {
    return (unsigned)type < DPO_N_LOSS_TYPES ? loss_names[type] : "?";
}

static bool uses_type(const DpoOptions *opt, DpoLossType type) {
    for (int k = 0; k < opt->n_types; k++)
        if (opt->types[k] == type) return true;
    return false;
}

/* The ε exo_pair runs with: legacy TRL substituted 1e-3 for 0, current TRL rejects 0. */
static double exo_epsilon(const DpoOptions *opt) {
    if (opt->legacy_compat && opt->label_smoothing == 0) return DPO_LEGACY_EXO_EPSILON;
    return opt->label_smoothing;
}

int dpo_options_check(const DpoOptions *opt) {
    if (opt->n_types < 1 || opt->n_types > DPO_MAX_LOSSES)
        return err_set("DPO takes 1 to %d loss types, got %d", DPO_MAX_LOSSES, opt->n_types);
    for (int k = 0; k < opt->n_types; k++) {
        if ((unsigned)opt->types[k] >= DPO_N_LOSS_TYPES)
            return err_set("DPO loss type %d is not a loss type", (int)opt->types[k]);
        if (!isfinite(opt->weights[k]))
            return err_set("DPO loss weight %d is not a finite number", k);
    }
    if (!isfinite(opt->beta)) return err_set("DPO beta must be a finite number");
    if (!isfinite(opt->label_smoothing))
        return err_set("DPO label_smoothing must be a finite number");
    double eps = exo_epsilon(opt);
    if (uses_type(opt, DPO_EXO_PAIR) && !(eps > 0 && eps < 1))
        return err_set("label_smoothing must be greater than 0.0 (and below 1) when using the "
                       "'exo_pair' loss, got %g; the EXO paper recommends 1e-3",
                       opt->label_smoothing);
    if (uses_type(opt, DPO_ROBUST) && opt->label_smoothing == 0.5)
        return err_set("the 'robust' loss divides by 1 - 2*label_smoothing: label_smoothing must "
                       "lie in [0.0, 0.5), got 0.5");
    if ((uses_type(opt, DPO_IPO) || uses_type(opt, DPO_SPPO_HARD)) && opt->beta == 0)
        return err_set("the '%s' loss divides by beta: beta must not be 0",
                       uses_type(opt, DPO_IPO) ? "ipo" : "sppo_hard");
    if (uses_type(opt, DPO_DISCOPOP) && !(isfinite(opt->discopop_tau) && opt->discopop_tau != 0))
        return err_set("the 'discopop' loss divides by discopop_tau: it must be a non-zero "
                       "number, got %g",
                       opt->discopop_tau);
    if (opt->rpo_alpha != 0 && !opt->legacy_compat)
        return err_set("rpo_alpha is a TRL <= 0.28 option (legacy compatibility switch off); "
                       "TRL 1.9 writes it as loss_type [sigmoid, sft] with weights [1.0, %g]",
                       opt->rpo_alpha);
    if (!isfinite(opt->rpo_alpha)) return err_set("rpo_alpha must be a finite number");
    return 0;
}

/* One pair as the per-pair loss types see it: the log-ratios and the completion lengths (TRL
 * clamps those to >= 1 where it divides by them). */
typedef struct {
    double hc, hr;
    double nc, nr;
} PairTerms;

/* The per-pair loss of a type that reads one pair at a time; writes dL/dh_c and dL/dh_r. */
static double pair_loss(const DpoOptions *opt, DpoLossType type, const PairTerms *p, double *dhc,
                        double *dhr) {
    double beta = opt->beta, eps = opt->label_smoothing;
    double z = beta * (p->hc - p->hr), dz = 0, loss = 0; /* dz = dL/dz for the types of z */
    *dhc = *dhr = 0;
    switch (type) {
    case DPO_SIGMOID:
        /* TRL 1.9 ignores label_smoothing here; TRL <= 0.28 read it (cDPO). */
        loss = logistic_loss_smoothed(z, opt->legacy_compat ? eps : 0.0, &dz);
        break;
    case DPO_HINGE:
        /* relu(1 − z); at the kink the derivative is 0, as torch.relu's. */
        loss = 1 - z > 0 ? 1 - z : 0;
        dz = 1 - z > 0 ? -1 : 0;
        break;
    case DPO_IPO:
    case DPO_SIGMOID_NORM: {
        /* Both use per-token averaged log-ratios. */
        double a = p->hc / p->nc - p->hr / p->nr, da;
        if (type == DPO_IPO) {
            double r = a - 1 / (2 * beta);
            loss = r * r;
            da = 2 * r;
        } else {
            loss = -logistic_log_sigmoid(beta * a);
            da = -beta * logistic_sigmoid(-beta * a);
        }
        *dhc = da / p->nc;
        *dhr = -da / p->nr;
        return loss;
    }
    case DPO_EXO_PAIR: {
        /* KL(softmax over the pair ‖ [1−ε, ε]) with q = σ(z):
         * q(logσ(z) − log(1−ε)) + (1−q)(logσ(−z) − log ε); d/dz = q(1−q)(z − log(1−ε) + log ε). */
        double e = exo_epsilon(opt), q = logistic_sigmoid(z), ql = logistic_sigmoid(-z);
        double log_pw = log1p(-e), log_pl = log(e);
        loss = q * (logistic_log_sigmoid(z) - log_pw) + ql * (logistic_log_sigmoid(-z) - log_pl);
        dz = q * ql * (z - log_pw + log_pl);
        break;
    }
    case DPO_NCA_PAIR: {
        double rc = beta * p->hc, rr = beta * p->hr;
        loss = -logistic_log_sigmoid(rc) - 0.5 * logistic_log_sigmoid(-rc) -
               0.5 * logistic_log_sigmoid(-rr);
        *dhc = beta * (-logistic_sigmoid(-rc) + 0.5 * logistic_sigmoid(rc));
        *dhr = beta * 0.5 * logistic_sigmoid(rr);
        return loss;
    }
    case DPO_ROBUST:
        loss =
            (-(1 - eps) * logistic_log_sigmoid(z) + eps * logistic_log_sigmoid(-z)) / (1 - 2 * eps);
        dz = (-(1 - eps) * logistic_sigmoid(-z) - eps * logistic_sigmoid(z)) / (1 - 2 * eps);
        break;
    case DPO_BCO_PAIR: {
        double rc = beta * p->hc, rr = beta * p->hr;
        loss = -logistic_log_sigmoid(rc) - logistic_log_sigmoid(-rr);
        *dhc = -beta * logistic_sigmoid(-rc);
        *dhr = beta * logistic_sigmoid(rr);
        return loss;
    }
    case DPO_SPPO_HARD: {
        double wc = p->hc - 0.5 / beta, wr = p->hr + 0.5 / beta;
        *dhc = 2 * wc;
        *dhr = 2 * wr;
        return wc * wc + wr * wr;
    }
    case DPO_APO_ZERO: {
        double sc = logistic_sigmoid(beta * p->hc), sr = logistic_sigmoid(beta * p->hr);
        *dhc = -beta * sc * (1 - sc);
        *dhr = beta * sr * (1 - sr);
        return (1 - sc) + sr;
    }
    case DPO_APO_DOWN: {
        double sc = logistic_sigmoid(beta * p->hc), sz = logistic_sigmoid(z);
        double dsz = beta * sz * (1 - sz);
        *dhc = beta * sc * (1 - sc) - dsz;
        *dhr = dsz;
        return sc + (1 - sz);
    }
    case DPO_DISCOPOP: {
        /* A blend of the logistic and exponential losses, mixed by m = σ(z/τ). */
        double tau = opt->discopop_tau, m = logistic_sigmoid(z / tau);
        double dm = m * (1 - m) / tau, logistic = -logistic_log_sigmoid(z), expo = exp(-z);
        loss = logistic * (1 - m) + expo * m;
        dz = dm * (expo - logistic) - (1 - m) * logistic_sigmoid(-z) - m * expo;
        break;
    }
    default: /* the batch-coupled types are not per-pair */
        abort();
    }
    *dhc = beta * dz;
    *dhr = -beta * dz;
    return loss;
}

/* Indices 0..n-1 ordered by key ascending, ties in index order (insertion sort: n is a
 * micro-batch). */
static void argsort(const double *key, int n, int *idx) {
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j > 0 && key[idx[j - 1]] > key[i]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
}

/* aot / aot_unpaired: TRL sorts two per-pair quantities a_i and b_i independently and applies the
 * smoothed logistic loss to β(a_(j) − b_(j)); the j-th term's gradient goes to the pairs that
 * landed at rank j of each sort.
 *   aot:          a = π_c − π_r,  b = ref_c − ref_r (no gradient);
 *   aot_unpaired: a = h_c,        b = h_r. */
static double aot_loss(const DpoOptions *opt, bool unpaired, double w, const PrefBatch *b,
                       PrefLossOutput *out) {
    int n = b->n;
    double *key = xmalloc(2 * (size_t)n * sizeof *key);
    int *idx = xmalloc(2 * (size_t)n * sizeof *idx);
    double *ka = key, *kb = key + n;
    int *ia = idx, *ib = idx + n;
    for (int i = 0; i < n; i++) {
        if (unpaired) {
            ka[i] = b->logp_chosen[i] - b->ref_chosen[i];
            kb[i] = b->logp_rejected[i] - b->ref_rejected[i];
        } else {
            ka[i] = b->logp_chosen[i] - b->logp_rejected[i];
            kb[i] = b->ref_chosen[i] - b->ref_rejected[i];
        }
    }
    argsort(ka, n, ia);
    argsort(kb, n, ib);
    double sum = 0, scale = w / n;
    for (int j = 0; j < n; j++) {
        double dz, z = opt->beta * (ka[ia[j]] - kb[ib[j]]);
        sum += logistic_loss_smoothed(z, opt->label_smoothing, &dz);
        double g = scale * opt->beta * dz;
        /* a_(j) carries +g to its pair's chosen sum (and −g to the rejected sum for aot). */
        out->d_chosen[ia[j]] += g;
        if (unpaired)
            out->d_rejected[ib[j]] -= g;
        else
            out->d_rejected[ia[j]] -= g;
    }
    free(key);
    free(idx);
    return sum * scale;
}

/* Token-mean NLL over every chosen completion token of the micro-batch, times w. */
static int sft_term(double w, const PrefBatch *b, PrefLossOutput *out, double *loss) {
    double tokens = 0, sum = 0;
    for (int i = 0; i < b->n; i++) {
        tokens += b->len_chosen[i];
        sum += b->logp_chosen[i];
    }
    if (tokens == 0)
        return err_set("the sft term needs chosen completion tokens, but none of the micro-batch's "
                       "%d chosen completions has any",
                       b->n);
    for (int i = 0; i < b->n; i++)
        out->d_chosen[i] -= w / tokens;
    *loss = -sum / tokens;
    return 0;
}

int dpo_loss(const DpoOptions *opt, const PrefBatch *b, PrefLossOutput *out) {
    if (dpo_options_check(opt) != 0) return -1;
    if (b->n < 1) return err_set("DPO: empty micro-batch");
    out->loss = 0;
    memset(&out->metrics, 0, sizeof out->metrics);
    for (int i = 0; i < b->n; i++)
        out->d_chosen[i] = out->d_rejected[i] = out->d_seq_chosen[i] = 0;
    double inv_n = 1.0 / b->n, nll = 0;
    for (int k = 0; k < opt->n_types; k++) {
        DpoLossType type = opt->types[k];
        double w = opt->weights[k];
        if (type == DPO_SFT) {
            if (sft_term(w, b, out, &nll) != 0) return -1;
            out->loss += w * nll;
        } else if (type == DPO_AOT || type == DPO_AOT_UNPAIRED) {
            out->loss += aot_loss(opt, type == DPO_AOT_UNPAIRED, w, b, out);
        } else {
            double sum = 0;
            for (int i = 0; i < b->n; i++) {
                PairTerms p = {.hc = b->logp_chosen[i] - b->ref_chosen[i],
                               .hr = b->logp_rejected[i] - b->ref_rejected[i],
                               .nc = b->len_chosen[i] > 1 ? b->len_chosen[i] : 1,
                               .nr = b->len_rejected[i] > 1 ? b->len_rejected[i] : 1};
                double dhc, dhr;
                sum += pair_loss(opt, type, &p, &dhc, &dhr);
                out->d_chosen[i] += w * inv_n * dhc;
                out->d_rejected[i] += w * inv_n * dhr;
            }
            out->loss += w * sum * inv_n;
        }
    }
    bool rpo = opt->legacy_compat && opt->rpo_alpha != 0;
    if (rpo) {
        if (sft_term(opt->rpo_alpha, b, out, &nll) != 0) return -1;
        out->loss += opt->rpo_alpha * nll;
    }

    double rc = 0, rr = 0, acc = 0, lc = 0, lr = 0;
    for (int i = 0; i < b->n; i++) {
        double c = opt->beta * (b->logp_chosen[i] - b->ref_chosen[i]);
        double r = opt->beta * (b->logp_rejected[i] - b->ref_rejected[i]);
        rc += c, rr += r, acc += c > r;
        lc += b->logp_chosen[i], lr += b->logp_rejected[i];
    }
    pref_metrics_add(&out->metrics, "rewards/chosen", rc * inv_n);
    pref_metrics_add(&out->metrics, "rewards/rejected", rr * inv_n);
    pref_metrics_add(&out->metrics, "rewards/accuracies", acc * inv_n);
    pref_metrics_add(&out->metrics, "rewards/margins", (rc - rr) * inv_n);
    pref_metrics_add(&out->metrics, "logps/chosen", lc * inv_n);
    pref_metrics_add(&out->metrics, "logps/rejected", lr * inv_n);
    if (rpo) pref_metrics_add(&out->metrics, "nll_loss", nll);
    return 0;
}
