#include "methods/kto.h"

#include "common/error.h"
#include "methods/logistic.h"

#include <math.h>
#include <string.h>

int kto_loss_type_parse(const char *name, KtoLossType *out) {
    if (strcmp(name, "kto") == 0) {
        *out = KTO_LOSS_KTO;
        return 0;
    }
    if (strcmp(name, "apo_zero_unpaired") == 0) {
        *out = KTO_LOSS_APO_ZERO_UNPAIRED;
        return 0;
    }
    return err_set("unknown KTO loss type \"%s\": expected kto or apo_zero_unpaired", name);
}

/* TRL sums the logged rewards and logps with nansum. */
static void add_unless_nan(double *sum, double x) {
    if (!isnan(x)) *sum += x;
}

double kto_kl_mean(const KtoBatch *b) {
    if (b->n < 1 || !b->kl_logp || !b->kl_ref) return 0;
    double sum = 0;
    for (int i = 0; i < b->n; i++)
        sum += b->kl_logp[i] - b->kl_ref[i];
    return sum / b->n;
}

int kto_loss_with_kl(const KtoOptions *opt, const KtoBatch *b, double kl_mean, KtoLossOutput *out) {
    if (opt->loss_type != KTO_LOSS_KTO && opt->loss_type != KTO_LOSS_APO_ZERO_UNPAIRED)
        return err_set("KTO loss type %d is not a loss type", (int)opt->loss_type);
    if (b->n < 1) return err_set("KTO: empty micro-batch");
    bool kto = opt->loss_type == KTO_LOSS_KTO;
    /* TRL clamps the (cross-process) mean; NaN passes torch.clamp unchanged. */
    double kl = !kto ? 0 : kl_mean < 0 ? 0 : kl_mean;
    double beta = opt->beta;
    double sum = 0, rc = 0, lc = 0, rr = 0, lr = 0;
    int counted = 0, n_d = 0, n_u = 0;
    for (int i = 0; i < b->n; i++) {
        double h = b->logp[i] - b->ref[i], loss, dh;
        if (b->desirable[i]) {
            /* 1 − σ(x) with x = β(h − kl) (kto) or βh (apo): d/dh = −β σ(x)(1 − σ(x)). */
            double s = logistic_sigmoid(beta * (kto ? h - kl : h));
            loss = opt->desirable_weight * (1 - s);
            dh = -opt->desirable_weight * beta * s * (1 - s);
            n_d++;
            add_unless_nan(&rc, beta * h);
            add_unless_nan(&lc, b->logp[i]);
        } else if (kto) {
            /* 1 − σ(β(kl − h)): d/dh = +β σ(1 − σ). */
            double s = logistic_sigmoid(beta * (kl - h));
            loss = opt->undesirable_weight * (1 - s);
            dh = opt->undesirable_weight * beta * s * (1 - s);
            n_u++;
            add_unless_nan(&rr, beta * h);
            add_unless_nan(&lr, b->logp[i]);
        } else {
            double s = logistic_sigmoid(beta * h);
            loss = opt->undesirable_weight * s;
            dh = opt->undesirable_weight * beta * s * (1 - s);
            n_u++;
            add_unless_nan(&rr, beta * h);
            add_unless_nan(&lr, b->logp[i]);
        }
        if (isnan(loss)) {
            out->d_logp[i] = 0;
            continue;
        }
        sum += loss;
        counted++;
        out->d_logp[i] = dh;
    }
    for (int i = 0; i < b->n; i++)
        out->d_logp[i] = counted ? out->d_logp[i] / counted : 0;
    out->loss = counted ? sum / counted : NAN;

    /* TRL logs each kind's sums over its own rows divided by its count, margins only when both
     * kinds are present. */
    memset(&out->metrics, 0, sizeof out->metrics);
    pref_metrics_add(&out->metrics, "kl", kl);
    if (n_d) {
        pref_metrics_add(&out->metrics, "rewards/chosen", rc / n_d);
        pref_metrics_add(&out->metrics, "logps/chosen", lc / n_d);
    }
    if (n_u) {
        pref_metrics_add(&out->metrics, "rewards/rejected", rr / n_u);
        pref_metrics_add(&out->metrics, "logps/rejected", lr / n_u);
    }
    if (n_d && n_u) pref_metrics_add(&out->metrics, "rewards/margins", rc / n_d - rr / n_u);
    return 0;
}

int kto_loss(const KtoOptions *opt, const KtoBatch *b, KtoLossOutput *out) {
    if (opt->loss_type == KTO_LOSS_KTO && (!b->kl_logp || !b->kl_ref))
        return err_set("the 'kto' loss needs the batch's KL rows (mismatched prompt/completion "
                       "pairs); only 'apo_zero_unpaired' runs without them");
    return kto_loss_with_kl(opt, b, kto_kl_mean(b), out);
}
