#include "methods/cpo.h"

#include "common/error.h"
#include "methods/logistic.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

int cpo_loss_type_parse(const char *name, CpoOptions *opt) {
    static const struct {
        const char *name;
        CpoLossType type;
    } names[] = {
        {"sigmoid", CPO_SIGMOID}, {"hinge", CPO_HINGE}, {"ipo", CPO_IPO}, {"simpo", CPO_SIMPO}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i].name) == 0) {
            opt->loss_type = names[i].type;
            return 0;
        }
    if (strcmp(name, "alphapo") == 0) {
        opt->loss_type = CPO_SIMPO;
        opt->cpo_alpha = 0;
        return 0;
    }
    if (strcmp(name, "kto_pair") == 0)
        return err_set("support for kto_pair has been removed in CPO: use rl: kto");
    return err_set("unknown CPO loss type \"%s\": expected one of sigmoid, hinge, ipo, simpo, "
                   "alphapo",
                   name);
}

int cpo_options_check(const CpoOptions *opt) {
    if ((unsigned)opt->loss_type > CPO_SIMPO)
        return err_set("CPO loss type %d is not a loss type", (int)opt->loss_type);
    if (!isfinite(opt->beta) || !isfinite(opt->label_smoothing) || !isfinite(opt->cpo_alpha) ||
        !isfinite(opt->simpo_gamma) || !isfinite(opt->alpha))
        return err_set("CPO options beta, label_smoothing, cpo_alpha, simpo_gamma and alpha must "
                       "be finite numbers");
    if ((opt->loss_type == CPO_IPO || opt->loss_type == CPO_SIMPO) && opt->beta == 0)
        return err_set("the CPO '%s' loss divides by beta: beta must not be 0",
                       opt->loss_type == CPO_IPO ? "ipo" : "simpo");
    return 0;
}

/* The reward g(P) the loss compares and dg/dP: P itself, or AlphaPO's (1 − p^{−α})/α with
 * p = e^P, i.e. (1 − e^{−αP})/α. */
static double reward(double alpha, double p, double *dg) {
    if (alpha == 0) {
        *dg = 1;
        return p;
    }
    double e = exp(-alpha * p);
    *dg = e;
    return (1 - e) / alpha;
}

int cpo_loss(const CpoOptions *opt, const PrefBatch *b, PrefLossOutput *out) {
    if (cpo_options_check(opt) != 0) return -1;
    if (b->n < 1) return err_set("CPO: empty micro-batch");
    bool averaged = opt->loss_type == CPO_IPO || opt->loss_type == CPO_SIMPO;
    double tokens = 0, sum = 0;
    for (int i = 0; i < b->n; i++) {
        if (averaged && (b->len_chosen[i] < 1 || b->len_rejected[i] < 1))
            return err_set("the CPO '%s' loss averages completion log-probs, but pair %d has an "
                           "empty %s completion",
                           opt->loss_type == CPO_IPO ? "ipo" : "simpo", i,
                           b->len_chosen[i] < 1 ? "chosen" : "rejected");
        tokens += b->len_chosen[i];
        sum += b->logp_chosen[i];
    }
    if (opt->cpo_alpha != 0 && tokens == 0)
        return err_set("the CPO NLL term (cpo_alpha %g) needs chosen completion tokens, but the "
                       "micro-batch has none",
                       opt->cpo_alpha);

    double beta = opt->beta, eps = opt->label_smoothing, inv_n = 1.0 / b->n;
    double loss_sum = 0, rc = 0, rr = 0, acc = 0, lc = 0, lr = 0;
    for (int i = 0; i < b->n; i++) {
        /* dP/dπ: 1 for summed log-probs, 1/|y| for averaged ones. */
        double sc = averaged ? 1.0 / b->len_chosen[i] : 1,
               sr = averaged ? 1.0 / b->len_rejected[i] : 1;
        double pc = b->logp_chosen[i] * sc, pr = b->logp_rejected[i] * sr, dgc, dgr;
        double gc = reward(opt->alpha, pc, &dgc), gr = reward(opt->alpha, pr, &dgr);
        double z = gc - gr, loss, dz;
        switch (opt->loss_type) {
        case CPO_SIGMOID:
            loss = logistic_loss_smoothed(beta * z, eps, &dz);
            dz *= beta;
            break;
        case CPO_SIMPO:
            loss = logistic_loss_smoothed(beta * (z - opt->simpo_gamma / beta), eps, &dz);
            dz *= beta;
            break;
        case CPO_HINGE: /* relu; derivative 0 at the kink, as torch's */
            loss = 1 - beta * z > 0 ? 1 - beta * z : 0;
            dz = 1 - beta * z > 0 ? -beta : 0;
            break;
        default: { /* CPO_IPO */
            double r = z - 1 / (2 * beta);
            loss = r * r;
            dz = 2 * r;
            break;
        }
        }
        loss_sum += loss;
        out->d_chosen[i] = inv_n * dz * dgc * sc;
        out->d_rejected[i] = -inv_n * dz * dgr * sr;
        out->d_seq_chosen[i] = 0;
        rc += beta * gc, rr += beta * gr, acc += beta * gc > beta * gr;
        lc += pc, lr += pr;
    }
    double nll = 0;
    if (opt->cpo_alpha != 0) {
        nll = -sum / tokens;
        for (int i = 0; i < b->n; i++)
            out->d_chosen[i] -= opt->cpo_alpha / tokens;
    }
    out->loss = loss_sum * inv_n + opt->cpo_alpha * nll;

    memset(&out->metrics, 0, sizeof out->metrics);
    pref_metrics_add(&out->metrics, "rewards/chosen", rc * inv_n);
    pref_metrics_add(&out->metrics, "rewards/rejected", rr * inv_n);
    pref_metrics_add(&out->metrics, "rewards/accuracies", acc * inv_n);
    pref_metrics_add(&out->metrics, "rewards/margins", (rc - rr) * inv_n);
    pref_metrics_add(&out->metrics, "logps/rejected", lr * inv_n);
    pref_metrics_add(&out->metrics, "logps/chosen", lc * inv_n);
    pref_metrics_add(&out->metrics, "nll_loss", nll);
    return 0;
}
