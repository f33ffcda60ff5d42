#include "train/sft_packed.h"

#include "common/error.h"
#include "dist/dist.h"
#include "model/forward.h"
#include "train/data_order.h"

#include <stdlib.h>
#include <string.h>

void sft_packed_plan(const TrainConfig *cfg, const SftDataset *ds, bool shuffled, PackedBins *bins,
                     FILE *log) {
    PackingOptions opt = {.capacity = cfg->micro_batch_size * cfg->sequence_len,
                          .bin_size = cfg->sample_packing_bin_size,
                          .group_size = cfg->sample_packing_group_size,
                          .sequential = cfg->sample_packing_sequentially};
    size_t *order = xmalloc((ds->n ? ds->n : 1) * sizeof *order);
    if (shuffled)
        data_order_shuffle(order, ds->n, cfg->seed, 0);
    else
        for (size_t i = 0; i < ds->n; i++)
            order[i] = i;
    sample_packing_pack(ds, order, ds->n, &opt, bins);
    free(order);
    fprintf(log,
            "sample packing (%s%s): %zu examples, %zu tokens, into %zu rows of up to %lld tokens "
            "(micro_batch_size %lld x sequence_len %lld): efficiency %.1f%%\n",
            opt.sequential ? "next-fit" : "first-fit", shuffled ? "" : ", evaluation", ds->n,
            bins->tokens, bins->n_bins, (long long)opt.capacity, (long long)cfg->micro_batch_size,
            (long long)cfg->sequence_len, 100.0 * sample_packing_efficiency(bins, opt.capacity));
}

MicroBatch sft_packed_micro_batch(const SftDataset *ds, const PackedBins *bins, const size_t *order,
                                  size_t first, int count, int32_t pad_id, PackedRows *rows,
                                  size_t *tokens) {
    /* the rows of a micro-batch need not be adjacent bins: gather them into one view */
    PackedBins view = {.n_bins = (size_t)count};
    view.start = xmalloc((size_t)(count + 1) * sizeof *view.start);
    size_t members = 0;
    for (int r = 0; r < count; r++) {
        size_t b = order[first + (size_t)r];
        members += bins->start[b + 1] - bins->start[b];
    }
    view.members = xmalloc((members ? members : 1) * sizeof *view.members);
    size_t m = 0;
    for (int r = 0; r < count; r++) {
        size_t b = order[first + (size_t)r];
        view.start[r] = m;
        for (size_t k = bins->start[b]; k < bins->start[b + 1]; k++)
            view.members[m++] = bins->members[k];
    }
    view.start[count] = m;
    sample_packing_rows(ds, &view, 0, count, pad_id, rows);
    sample_packing_free(&view);
    *tokens = rows->tokens_real;
    return (MicroBatch){{.batch = rows->rows,
                         .t_len = rows->t_len,
                         .tokens = rows->tokens,
                         .attn_mask = rows->attn,
                         .positions = rows->positions,
                         .packed = true},
                        rows->labels};
}

int sft_packed_evaluate(Model *m, const SftDataset *val, const PackedBins *bins, int32_t pad_id,
                        double *loss) {
    double sums[2] = {0, 0}; /* row means, rows */
    int rc = 0;
    for (size_t b = (size_t)dist_rank(); b < bins->n_bins && rc == 0; b += (size_t)dist_size()) {
        PackedRows rows;
        size_t tokens;
        MicroBatch mb = sft_packed_micro_batch(val, bins, &b, 0, 1, pad_id, &rows, &tokens);
        float *logp = xmalloc((size_t)rows.t_len * sizeof *logp);
        rc = model_token_logprobs(m, &mb.batch, mb.label_mask, logp);
        double sum = 0;
        size_t count = 0;
        for (int t = 0; rc == 0 && t < rows.t_len; t++)
            if (rows.labels[t]) sum += logp[t], count++;
        if (rc == 0 && count) sums[0] += -sum / (double)count, sums[1] += 1;
        free(logp);
        sample_packing_rows_free(&rows);
    }
    if (dist_agree(rc) != 0) return -1;
    dist_allreduce_sum_f64(sums, 2);
    *loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
    return 0;
}
