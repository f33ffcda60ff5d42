#include "train/sft_packed.h"

#include "common/error.h"
#include "dist/dist.h"
#include "model/forward.h"
#include "train/data_order.h"
#include "train/eval_batch_mean.h"

#include <stdlib.h>
#include <string.h>

int64_t sft_packed_row_tokens(const TrainConfig *cfg) {
    return cfg->multipack_real_batches ? cfg->sequence_len
                                       : cfg->micro_batch_size * cfg->sequence_len;
}

int64_t sft_packed_rows_per_micro_batch(const TrainConfig *cfg) {
    return cfg->multipack_real_batches ? cfg->micro_batch_size : 1;
}

void sft_packed_plan(const TrainConfig *cfg, const SftDataset *ds, bool shuffled, PackedBins *bins,
                     FILE *log) {
    PackingOptions opt = {.capacity = sft_packed_row_tokens(cfg),
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
            "(%s): efficiency %.1f%%\n",
            opt.sequential ? "next-fit" : "first-fit", shuffled ? "" : ", evaluation", ds->n,
            bins->tokens, bins->n_bins, (long long)opt.capacity,
            cfg->multipack_real_batches ? "sequence_len; micro_batch_size rows a micro-batch"
                                        : "micro_batch_size x sequence_len; one row a micro-batch",
            100.0 * sample_packing_efficiency(bins, opt.capacity));
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

int sft_packed_evaluate(Model *m, const SftDataset *val, const PackedBins *bins,
                        int64_t rows_per_batch, int32_t pad_id, double *loss) {
    EvalBatchMean acc = {0};
    int rc = 0;
    size_t per = (size_t)rows_per_batch, n_batches = (bins->n_bins + per - 1) / per;
    size_t *order = xmalloc((bins->n_bins ? bins->n_bins : 1) * sizeof *order);
    for (size_t b = 0; b < bins->n_bins; b++)
        order[b] = b;
    for (size_t k = (size_t)dist_rank(); k < n_batches && rc == 0; k += (size_t)dist_size()) {
        size_t first = k * per;
        int count = (int)(bins->n_bins - first < per ? bins->n_bins - first : per);
        PackedRows rows;
        size_t tokens;
        MicroBatch mb =
            sft_packed_micro_batch(val, bins, order, first, count, pad_id, &rows, &tokens);
        size_t cells = (size_t)rows.rows * (size_t)rows.t_len;
        float *logp = xmalloc(cells * sizeof *logp);
        rc = model_token_logprobs(m, &mb.batch, mb.label_mask, logp);
        double sum = 0;
        size_t labels = 0;
        for (size_t i = 0; rc == 0 && i < cells; i++)
            if (rows.labels[i]) sum += logp[i], labels++;
        if (rc == 0) eval_batch_mean_add(&acc, sum, labels, count);
        free(logp);
        sample_packing_rows_free(&rows);
    }
    free(order);
    if (dist_agree(rc) != 0) return -1;
    *loss = eval_batch_mean_finish(&acc);
    return 0;
}
