#include "methods/dpo.h"

#include "common/error.h"

#include <math.h>
#include <string.h>

static const char *const loss_names[DPO_N_LOSS_TYPES] = {
    "sigmoid",  "hinge",    "ipo",       "exo_pair", "nca_pair",
    "robust",   "bco_pair", "sppo_hard", "aot",      "aot_unpaired",
    "apo_zero", "apo_down", "discopop",  "sft",      "sigmoid_norm"};

int dpo_loss_type_parse(const char *name, DpoLossType *out) {
    for (int i = 0; i < DPO_N_LOSS_TYPES; i++)
        if (strcmp(name, loss_names[i]) == 0) {
            *out = (DpoLossType)i;
            return 0;
        }
    return -1;
}

/* log σ(x), stable: −softplus(−x). */
static double log_sigmoid(double x) {
    return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x));
}

static double sigmoid(double x) {
    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

/* Adds w · mean_pairs(loss) of one loss type to out (value and gradient). */
static int add_loss(const DpoOptions *opt, DpoLossType type, double w, const PrefBatch *b,
                    PrefLossOutput *out) {
    double beta = opt->beta, sum = 0, inv_n = 1.0 / b->n;
    for (int i = 0; i < b->n; i++) {
        double hc = b->logp_chosen[i] - b->ref_chosen[i];
        double hr = b->logp_rejected[i] - b->ref_rejected[i];
        double z = beta * (hc - hr), dz; /* dloss/dz */
        switch (type) {
        case DPO_SIGMOID: {
            double eps = opt->legacy_compat ? opt->label_smoothing : 0.0;
            sum += -(1 - eps) * log_sigmoid(z) - eps * log_sigmoid(-z);
            dz = -(1 - eps) * sigmoid(-z) + eps * sigmoid(z);
            break;
        }
        default:
            return err_set("DPO loss type \"%s\" is not implemented yet", loss_names[type]);
        }
        out->d_chosen[i] += w * inv_n * dz * beta;
        out->d_rejected[i] -= w * inv_n * dz * beta;
    }
    out->loss += w * sum * inv_n;
    return 0;
}

int dpo_loss(const DpoOptions *opt, const PrefBatch *b, PrefLossOutput *out) {
    out->loss = 0;
    memset(&out->metrics, 0, sizeof out->metrics);
    for (int i = 0; i < b->n; i++)
        out->d_chosen[i] = out->d_rejected[i] = out->d_seq_chosen[i] = 0;
    for (int k = 0; k < opt->n_types; k++)
        if (add_loss(opt, opt->types[k], opt->weights[k], b, out) != 0) return -1;
    double rc = 0, rr = 0, acc = 0, lc = 0, lr = 0;
    for (int i = 0; i < b->n; i++) {
        double c = opt->beta * (b->logp_chosen[i] - b->ref_chosen[i]);
        double r = opt->beta * (b->logp_rejected[i] - b->ref_rejected[i]);
        rc += c, rr += r, acc += c > r;
        lc += b->logp_chosen[i], lr += b->logp_rejected[i];
    }
    double n = b->n;
    pref_metrics_add(&out->metrics, "rewards/chosen", rc / n);
    pref_metrics_add(&out->metrics, "rewards/rejected", rr / n);
    pref_metrics_add(&out->metrics, "rewards/accuracies", acc / n);
    pref_metrics_add(&out->metrics, "rewards/margins", (rc - rr) / n);
    pref_metrics_add(&out->metrics, "logps/chosen", lc / n);
    pref_metrics_add(&out->metrics, "logps/rejected", lr / n);
    return 0;
}
