/* The logistic function and the losses built on it, shared by the preference methods.
 * Evaluated in double in forms that neither overflow nor lose the tail: every preference loss
 * feeds them margins that grow with sequence length. */
#ifndef RLHF_METHODS_LOGISTIC_H
#define RLHF_METHODS_LOGISTIC_H

#include <math.h>

static inline double logistic_sigmoid(double x) {
    if (x >= 0) return 1.0 / (1.0 + exp(-x));
    double e = exp(x);
    return e / (1.0 + e);
}

/* log σ(x) = −softplus(−x). */
static inline double logistic_log_sigmoid(double x) {
    return x >= 0 ? -log1p(exp(-x)) : x - log1p(exp(x));
}

/* The label-smoothed logistic loss −(1−ε)·logσ(x) − ε·logσ(−x) (conservative DPO, CPO, AOT);
 * writes its derivative in x to *dx. */
static inline double logistic_loss_smoothed(double x, double eps, double *dx) {
    *dx = -(1 - eps) * logistic_sigmoid(-x) + eps * logistic_sigmoid(x);
    return -(1 - eps) * logistic_log_sigmoid(x) - eps * logistic_log_sigmoid(-x);
}

#endif
