#include "methods/orpo.h"

#include "common/error.h"
#include "methods/logistic.h"

#include <math.h>
#include <string.h>

/* log(1 − e^x) for x < 0 without cancellation: log1p(−e^x) far from 0, log(−expm1(x)) near it
 * (the branch at −ln 2 is where each form loses accuracy to the other). */
static double log1mexp(double x) {
    return x < -M_LN2 ? log1p(-exp(x)) : log(-expm1(x));
}

int orpo_loss(const OrpoOptions *opt, const PrefBatch *b, PrefLossOutput *out) {
    if (b->n < 1) return err_set("ORPO: empty micro-batch");
    if (!b->seq_logp_chosen || !b->seq_len_chosen)
        return err_set("ORPO needs the chosen sequences' whole-sequence log-probs (its NLL term)");
    double seq_tokens = 0, seq_sum = 0;
    for (int i = 0; i < b->n; i++) {
        if (b->len_chosen[i] < 1 || b->len_rejected[i] < 1)
            return err_set("ORPO averages completion log-probs, but pair %d has an empty %s "
                           "completion",
                           i, b->len_chosen[i] < 1 ? "chosen" : "rejected");
        seq_tokens += b->seq_len_chosen[i];
        seq_sum += b->seq_logp_chosen[i];
    }
    if (seq_tokens == 0) return err_set("ORPO: the chosen sequences have no tokens to predict");

    double beta = opt->beta, inv_n = 1.0 / b->n, nll = -seq_sum / seq_tokens;
    double or_sum = 0, lo_sum = 0, rc = 0, rr = 0, acc = 0;
    for (int i = 0; i < b->n; i++) {
        double pc = b->logp_chosen[i] / b->len_chosen[i];
        double pr = b->logp_rejected[i] / b->len_rejected[i];
        double lo = (pc - pr) - (log1mexp(pc) - log1mexp(pr));
        double ratio = logistic_log_sigmoid(lo);
        or_sum += ratio;
        lo_sum += lo;
        /* d lo/dP = 1 + e^P/(1 − e^P) = −1/expm1(P) for the chosen side, its negative for the
         * rejected; L carries −β·mean(logσ(lo)). */
        double dlo = -beta * inv_n * logistic_sigmoid(-lo);
        out->d_chosen[i] = dlo * (-1 / expm1(pc)) / b->len_chosen[i];
        out->d_rejected[i] = dlo * (1 / expm1(pr)) / b->len_rejected[i];
        out->d_seq_chosen[i] = -1 / seq_tokens;
        rc += beta * pc, rr += beta * pr, acc += beta * pc > beta * pr;
    }
    out->loss = nll - beta * or_sum * inv_n;

    memset(&out->metrics, 0, sizeof out->metrics);
    double lc = 0, lr = 0;
    for (int i = 0; i < b->n; i++) {
        lc += b->logp_chosen[i] / b->len_chosen[i];
        lr += b->logp_rejected[i] / b->len_rejected[i];
    }
    pref_metrics_add(&out->metrics, "rewards/chosen", rc * inv_n);
    pref_metrics_add(&out->metrics, "rewards/rejected", rr * inv_n);
    pref_metrics_add(&out->metrics, "rewards/accuracies", acc * inv_n);
    pref_metrics_add(&out->metrics, "rewards/margins", (rc - rr) * inv_n);
    pref_metrics_add(&out->metrics, "logps/rejected", lr * inv_n);
    pref_metrics_add(&out->metrics, "logps/chosen", lc * inv_n);
    pref_metrics_add(&out->metrics, "nll_loss", nll);
    pref_metrics_add(&out->metrics, "log_odds_ratio", or_sum * inv_n);
    pref_metrics_add(&out->metrics, "log_odds_chosen", lo_sum * inv_n);
    return 0;
}
