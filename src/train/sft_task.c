#include "train/sft_task.h"

#include "common/error.h"
#include "data/dataset_cache.h"
#include "data/sample_packing.h"
#include "data/sft_dataset.h"
#include "dist/dist.h"
#include "model/forward.h"
#include "train/data_order.h"
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

/* Packed rows bins[order[first .. first+count)] as one micro-batch: the bins are the task's
 * items (one per micro-batch, as Axolotl's multipack batch sampler yields them). */
static MicroBatch build_packed_micro_batch(const SftDataset *ds, const PackedBins *bins,
                                           const size_t *order, size_t first, int count,
                                           int32_t pad_id, BatchBuffers *buf, size_t *tokens) {
    memset(buf, 0, sizeof *buf);
    /* bins of the window need not be adjacent: gather them into one PackedBins view */
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
    sample_packing_rows(ds, &view, 0, count, pad_id, &buf->packed);
    sample_packing_free(&view);
    const PackedRows *r = &buf->packed;
    *tokens = r->tokens_real;
    return (MicroBatch){{.batch = r->rows,
                         .t_len = r->t_len,
                         .tokens = r->tokens,
                         .attn_mask = r->attn,
                         .positions = r->positions,
                         .packed = true},
                        r->labels};
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

/* Mean negative log-likelihood over every label token of the validation set (over several
 * ranks, batch b is rank b % world's, and the sums are taken over ranks). */
static int evaluate_nll(Model *m, const SftDataset *val, int64_t batch_size, int32_t pad_id,
                        double *loss) {
    size_t *order = xmalloc(val->n * sizeof *order);
    for (size_t i = 0; i < val->n; i++)
        order[i] = i;
    double sum = 0;
    size_t count = 0;
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
        for (size_t i = 0; rc == 0 && i < cells; i++)
            if (mb.label_mask[i]) sum += logp[i], count++;
        free(logp);
        free_buffers(&buf);
    }
    free(order);
    if (dist_agree(rc) != 0) return -1;
    double sums[2] = {sum, (double)count};
    dist_allreduce_sum_f64(sums, 2);
    *loss = sums[1] > 0 ? -sums[0] / sums[1] : 0.0;
    return 0;
}

typedef struct {
    const SftDataset *ds, *val;
    const PackedBins *bins; /* sample_packing: the task's items are these rows */
    int32_t pad_id;
    int64_t batch_size;
    BatchBuffers *bufs; /* one per micro-batch of a window */
    size_t window_tokens;
} SftTask;

static void sft_build(void *ctx, int slot, const size_t *order, size_t first, int count,
                      MicroBatch *mb, size_t *tokens) {
    SftTask *t = ctx;
    if (t->bins) {
        *mb = build_packed_micro_batch(t->ds, t->bins, order, first, count, t->pad_id,
                                       &t->bufs[slot], tokens);
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
    if (evaluate_nll(m, t->val, t->batch_size, t->pad_id, &loss) != 0) return -1;
    json_object_set_new(entry, "eval_loss", json_real(loss));
    return 0;
}

/* sample_packing: the training examples, in the order of a (seed, epoch 0) shuffle, packed
 * into rows of micro_batch_size x sequence_len tokens once for the run; the training loop then
 * shuffles the rows every epoch. Logs what the packing made. */
static void pack_training_rows(const TrainConfig *cfg, const SftDataset *ds, PackedBins *bins,
                               FILE *log) {
    PackingOptions opt = {.capacity = cfg->micro_batch_size * cfg->sequence_len,
                          .bin_size = cfg->sample_packing_bin_size,
                          .group_size = cfg->sample_packing_group_size,
                          .sequential = cfg->sample_packing_sequentially};
    size_t *order = xmalloc((ds->n ? ds->n : 1) * sizeof *order);
    data_order_shuffle(order, ds->n, cfg->seed, 0);
    sample_packing_pack(ds, order, ds->n, &opt, bins);
    free(order);
    fprintf(log,
            "sample packing (%s): %zu examples, %zu tokens, into %zu rows of up to %lld tokens "
            "(micro_batch_size %lld x sequence_len %lld): efficiency %.1f%%\n",
            opt.sequential ? "next-fit" : "first-fit", ds->n, bins->tokens, bins->n_bins,
            (long long)opt.capacity, (long long)cfg->micro_batch_size, (long long)cfg->sequence_len,
            100.0 * sample_packing_efficiency(bins, opt.capacity));
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
    PackedBins bins = {0};
    if (rc == 0 && cfg->sample_packing) pack_training_rows(cfg, &ds, &bins, log);
    if (rc == 0) {
        SftTask t = {.ds = &ds,
                     .bins = cfg->sample_packing ? &bins : NULL,
                     .val = &val,
                     .pad_id = pad,
                     .batch_size = cfg->micro_batch_size,
                     .bufs = xmalloc((size_t)cfg->gradient_accumulation_steps * sizeof *t.bufs)};
        TrainTask task = {.ctx = &t,
                          .n_examples = cfg->sample_packing ? bins.n_bins : ds.n,
                          .micro_batch_items = cfg->sample_packing ? 1 : 0,
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
    sft_dataset_free(&val);
    sft_dataset_free(&ds);
    return rc;
}
