#include "train/sft_task.h"

#include "common/error.h"
#include "data/dataset_cache.h"
#include "data/sft_dataset.h"
#include "dist/dist.h"
#include "model/forward.h"
#include "train/data_order.h"
#include "train/eval_batch_mean.h"
#include "train/sft_packed.h"
#include "train/train_task.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *tokens;
    uint8_t *attn, *labels;
    PackedRows packed; /* sample_packing: the arrays of the micro-batch instead */
} BatchBuffers;

/* Right-pads examples order[first .. first+count) into one micro-batch. */
static MicroBatch build_micro_batch(const SftDataset *ds, const size_t *order, size_t first,
                                    int count, int32_t pad_id, BatchBuffers *buf) {
    int t_len = 0;
    for (int i = 0; i < count; i++)
        if (ds->items[order[first + i]].len > t_len) t_len = ds->items[order[first + i]].len;
    size_t cells = (size_t)count * t_len;
    memset(&buf->packed, 0, sizeof buf->packed);
    buf->tokens = xmalloc(cells * sizeof *buf->tokens);
    buf->attn = xcalloc(cells, 1);
    buf->labels = xcalloc(cells, 1);
    for (size_t i = 0; i < cells; i++)
        buf->tokens[i] = pad_id;
    for (int i = 0; i < count; i++) {
        const SftExample *e = &ds->items[order[first + i]];
        memcpy(buf->tokens + (size_t)i * t_len, e->ids, (size_t)e->len * sizeof *e->ids);
        memset(buf->attn + (size_t)i * t_len, 1, (size_t)e->len);
        memcpy(buf->labels + (size_t)i * t_len, e->labels, (size_t)e->len);
    }
    return (MicroBatch){
        {.batch = count, .t_len = t_len, .tokens = buf->tokens, .attn_mask = buf->attn},
        buf->labels};
}

static void free_buffers(BatchBuffers *buf) {
    free(buf->tokens), free(buf->attn), free(buf->labels);
    sample_packing_rows_free(&buf->packed);
    buf->tokens = NULL, buf->attn = NULL, buf->labels = NULL;
}

/* val_set_size: the drawn examples move from `all` to `val`. */
static int split_validation(SftDataset *all, const TrainConfig *cfg, SftDataset *val) {
    memset(val, 0, sizeof *val);
    size_t *order, n_val;
    if (data_order_validation_draw(all->n, cfg, &order, &n_val) != 0) return -1;
    if (n_val == 0) return 0;
    data_order_move_held_out((void **)&all->items, &all->n, sizeof *all->items, order, n_val,
                             (void **)&val->items);
    val->n = n_val;
    free(order);
    return 0;
}

int sft_task_evaluate_nll(Model *m, const SftDataset *val, int64_t batch_size, int32_t pad_id,
                          double *loss) {
    size_t *order = xmalloc(val->n * sizeof *order);
    for (size_t i = 0; i < val->n; i++)
        order[i] = i;
    EvalBatchMean acc = {0};
    int rc = 0;
    size_t stride = (size_t)batch_size * (size_t)dist_size();
    for (size_t first = (size_t)batch_size * (size_t)dist_rank(); first < val->n && rc == 0;
         first += stride) {
        int n = (int)(val->n - first < (size_t)batch_size ? val->n - first : (size_t)batch_size);
        BatchBuffers buf;
        MicroBatch mb = build_micro_batch(val, order, first, n, pad_id, &buf);
        size_t cells = (size_t)mb.batch.batch * mb.batch.t_len;
        float *logp = xmalloc(cells * sizeof *logp);
        rc = model_token_logprobs(m, &mb.batch, mb.label_mask, logp);
        double sum = 0;
        size_t labels = 0;
        /* position 0 of a row is no target (methods/sft.h, invariant 1): not counted */
        for (size_t i = 0; rc == 0 && i < cells; i++)
            if (i % (size_t)mb.batch.t_len != 0 && mb.label_mask[i]) sum += logp[i], labels++;
        if (rc == 0) eval_batch_mean_add(&acc, sum, labels, n);
        free(logp);
        free_buffers(&buf);
    }
    free(order);
    if (dist_agree(rc) != 0) return -1;
    *loss = eval_batch_mean_finish(&acc);
    return 0;
}

typedef struct {
    const SftDataset *ds, *val;
    const PackedBins *bins;     /* sample_packing: the task's items are these rows */
    const PackedBins *val_bins; /* eval_sample_packing: the held-out rows */
    int64_t rows_per_batch;     /* packed rows in a micro-batch */
    int32_t pad_id;
    int64_t batch_size;
    BatchBuffers *bufs; /* one per micro-batch of a window */
    size_t window_tokens;
} SftTask;

static void sft_build(void *ctx, int slot, const size_t *order, size_t first, int count,
                      MicroBatch *mb, size_t *tokens) {
    SftTask *t = ctx;
    if (t->bins) {
        memset(&t->bufs[slot], 0, sizeof t->bufs[slot]);
        *mb = sft_packed_micro_batch(t->ds, t->bins, order, first, count, t->pad_id,
                                     &t->bufs[slot].packed, tokens);
        return;
    }
    *mb = build_micro_batch(t->ds, order, first, count, t->pad_id, &t->bufs[slot]);
    *tokens = 0;
    for (int e = 0; e < count; e++)
        *tokens += (size_t)t->ds->items[order[first + e]].len;
}

static void sft_release(void *ctx, int slot) {
    SftTask *t = ctx;
    free_buffers(&t->bufs[slot]);
}

static int sft_evaluate(void *ctx, Model *m, json_t *entry) {
    SftTask *t = ctx;
    double loss;
    if (t->val_bins
            ? sft_packed_evaluate(m, t->val, t->val_bins, t->rows_per_batch, t->pad_id, &loss)
            : sft_task_evaluate_nll(m, t->val, t->batch_size, t->pad_id, &loss))
        return -1;
    json_object_set_new(entry, "eval_loss", json_real(loss));
    return 0;
}

int sft_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                 TrainOutcome *out, FILE *log) {
    int32_t eos = -1, pad = 0;
    SftDataset ds = {0}, val = {0};
    int rc = tokenizer_special_ids(cfg->tokenizer_config, tok, &eos, &pad);
    char cache_dir[4096];
    if (rc == 0)
        rc = sft_dataset_prepare(&ds, cfg, tok, eos, m->cfg.vocab_size, false, log, cache_dir,
                                 sizeof cache_dir);
    if (rc == 0 && ds.dropped_too_long)
        fprintf(log, "warning: %zu examples longer than sequence_len %lld were dropped\n",
                ds.dropped_too_long, (long long)cfg->sequence_len);
    if (rc == 0 && cfg->n_test_datasets) {
        TrainConfig eval = train_task_test_config(cfg);
        rc = sft_dataset_prepare(&val, &eval, tok, eos, m->cfg.vocab_size, false, log, cache_dir,
                                 sizeof cache_dir);
        if (rc != 0) err_prefix("test_datasets");
    } else if (rc == 0) {
        rc = split_validation(&ds, cfg, &val);
    }
    PackedBins bins = {0}, val_bins = {0};
    bool eval_packed = cfg->sample_packing && cfg->eval_sample_packing && val.n;
    if (rc == 0 && cfg->sample_packing) sft_packed_plan(cfg, &ds, true, &bins, log);
    if (rc == 0 && eval_packed) sft_packed_plan(cfg, &val, false, &val_bins, log);
    if (rc == 0) {
        SftTask t = {.ds = &ds,
                     .bins = cfg->sample_packing ? &bins : NULL,
                     .val_bins = eval_packed ? &val_bins : NULL,
                     .rows_per_batch = sft_packed_rows_per_micro_batch(cfg),
                     .val = &val,
                     .pad_id = pad,
                     .batch_size = cfg->micro_batch_size,
                     .bufs = xmalloc((size_t)cfg->gradient_accumulation_steps * sizeof *t.bufs)};
        TrainTask task = {.ctx = &t,
                          .n_examples = cfg->sample_packing ? bins.n_bins : ds.n,
                          .micro_batch_items =
                              cfg->sample_packing ? sft_packed_rows_per_micro_batch(cfg) : 0,
                          .item_name = cfg->sample_packing ? "packed rows" : NULL,
                          .build = sft_build,
                          .release = sft_release,
                          .method = trainer_sft_method(&t.window_tokens),
                          .evaluate = sft_evaluate,
                          .n_eval = val.n};
        rc = train_task_run(cfg, m, lora, &task, out, log);
        free(t.bufs);
    }
    sample_packing_free(&bins);
    sample_packing_free(&val_bins);
    sft_dataset_free(&val);
    sft_dataset_free(&ds);
    return rc;
}
