#include "train/eval_batch_mean.h"
#include "dist/dist.h"

void eval_batch_mean_add(EvalBatchMean *acc, double logp_sum, size_t labels, int rows) {
    if (labels == 0) return; /* invariant 2 */
    acc->weighted += -logp_sum / (double)labels * rows;
    acc->rows += rows;
}

double eval_batch_mean_finish(EvalBatchMean *acc) {
    double sums[2] = {acc->weighted, acc->rows};
    dist_allreduce_sum_f64(sums, 2);
    return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
}
