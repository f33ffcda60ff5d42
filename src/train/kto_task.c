/* KTO (rl: kto) as a training task: unpaired rows in dataset order (train_task.h's sequential
 * task: each micro-batch's KL rows pair its prompts with its own completions, kto_batch.h). */
#include "common/error.h"
#include "data/sft_dataset.h"
#include "train/kto_method.h"
#include "train/pref_task.h"
#include "train/reference.h"
#include "train/train_task.h"

#include <math.h>
#include <stdlib.h>

typedef struct {
    const PrefDataset *ds;
    int32_t pad_id;
    int64_t max_len;
    KtoMicroBatch *window; /* one per micro-batch of a window */
    KtoMethod *km;
    /* precompute_ref_log_probs' output, per row: one array (owned; NULL until precomputed), the
     * rows' sums then their KL rows' */
    double *pre, *pre_kl;
} KtoTask;

static void kto_build(void *ctx, int slot, const size_t *order, size_t first, int count,
                      MicroBatch *mb, size_t *tokens) {
    KtoTask *t = ctx;
    KtoMicroBatch *b = &t->window[slot];
    kto_batch_build(b, t->ds, order, first, count, t->max_len, t->pad_id, t->km->with_kl);
    *mb = b->mb;
    *tokens = kto_batch_tokens(b);
}

static void kto_release(void *ctx, int slot) {
    KtoTask *t = ctx;
    kto_batch_free(&t->window[slot]);
}

static void kto_begin_step(void *ctx, int n_micro, int n_window) {
    KtoTask *t = ctx;
    (void)n_micro;
    t->km->window = t->window;
    t->km->n_window = n_window; /* each micro-batch's loss is 1/n_window of the window's */
}

static void kto_flush(void *ctx, json_t *entry, const char *prefix) {
    KtoTask *t = ctx;
    kto_method_flush_metrics(t->km, entry, prefix);
}

/* precompute_ref_log_probs: the reference's sums of the rows (and KL rows) of slot 0. */
static int kto_precompute_batch(void *ctx, size_t first, int count) {
    KtoTask *t = ctx;
    (void)count;
    return kto_reference_sums(t->km->ref, &t->window[0], t->pre + first,
                              t->km->with_kl ? t->pre_kl + first : NULL);
}

/* The task of ds through km, with `slots` micro-batch buffers (t->window is the caller's to
 * free). */
static TrainTask kto_task(KtoTask *t, const PrefDataset *ds, KtoMethod *km, const TrainConfig *cfg,
                          int32_t pad, int slots) {
    *t = (KtoTask){.ds = ds,
                   .pad_id = pad,
                   .max_len = cfg->sequence_len,
                   .window = xcalloc((size_t)slots, sizeof *t->window),
                   .km = km};
    return (TrainTask){.ctx = t,
                       .n_examples = ds->n_rows,
                       .sequential = true,
                       .build = kto_build,
                       .release = kto_release,
                       .begin_step = kto_begin_step,
                       .method = kto_method_train_method(km),
                       .flush_metrics = kto_flush};
}

/* Every row's (and KL row's) reference sums once, over the micro-batches training will see, so
 * that each row's KL row is the one it trains with (into t->pre, which the caller frees). */
static int precompute_reference(TrainTask *task, KtoTask *t, const TrainConfig *cfg) {
    size_t n = t->ds->n_rows;
    t->pre = xcalloc(2 * n + 1, sizeof *t->pre);
    t->pre_kl = t->pre + n;
    if (train_task_each_batch(task, cfg->micro_batch_size, kto_precompute_batch) != 0) return -1;
    t->km->pre_ref = t->pre;
    t->km->pre_ref_kl = t->pre_kl;
    return 0;
}

/* TRL's advice when the kinds are unbalanced (KTO paper eq. 8): a warning, never an error. */
static void kto_weight_advice(const PrefDataset *ds, const TrainConfig *cfg, FILE *log) {
    double n_d = 0;
    for (size_t i = 0; i < ds->n_rows; i++)
        n_d += ds->rows[i].desirable;
    double n_u = fmax((double)ds->n_rows - fmax(n_d, 1), 1);
    n_d = fmax(n_d, 1);
    if (n_d == n_u) return;
    double wd = cfg->kto_desirable_weight, wu = cfg->kto_undesirable_weight;
    /* TRL rounds the bounds to 2 decimals before comparing */
    double d_lo = round(n_u * wu / n_d * 100) / 100,
           d_hi = round(n_u * wu / n_d * 1.33 * 100) / 100;
    double u_lo = round(n_d * wd / n_u / 1.33 * 100) / 100,
           u_hi = round(n_d * wd / n_u * 100) / 100;
    if ((d_lo <= wd && wd <= d_hi) || (u_lo <= wu && wu <= u_hi)) return;
    fprintf(log,
            "warning: %.0f desirable and %.0f undesirable rows, but kto_desirable_weight %g and "
            "kto_undesirable_weight %g are not in the range TRL recommends: EITHER "
            "kto_desirable_weight in [%.2f, %.2f] or kto_undesirable_weight in [%.2f, %.2f] (but "
            "NOT BOTH)\n",
            n_d, n_u, wd, wu, d_lo, d_hi, u_lo, u_hi);
}

int kto_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                 TrainOutcome *out, FILE *log) {
    KtoMethod km;
    if (kto_method_init(&km, cfg) != 0) return -1;
    int32_t eos = -1, pad = 0;
    PrefDataset ds = {0}, val = {0};
    int rc = tokenizer_special_ids(cfg->tokenizer_config, tok, &eos, &pad);
    if (rc == 0) rc = pref_dataset_load(&ds, cfg, tok, log);
    if (rc == 0) rc = pref_task_held_out(&ds, cfg, tok, true, &val, log);
    if (rc == 0) kto_weight_advice(&ds, cfg, log);
    /* The reference as for DPO (trl-methods.md §8) */
    ReferencePolicy ref = {0};
    if (rc == 0) rc = train_reference_open(&ref, cfg, m, lora, log);
    km.policy = m; /* its KL rows run through the trained adapter, which the loop attaches */
    km.ref = &ref;
    /* the held-out rows go through a second instance of the method (see pref_task_run) */
    KtoMethod held_km = km;
    KtoTask t, held_t;
    TrainTask task = kto_task(&t, &ds, &km, cfg, pad, (int)cfg->gradient_accumulation_steps);
    TrainTask held = kto_task(&held_t, &val, &held_km, cfg, pad, 1);
    if (rc == 0 && cfg->precompute_ref_log_probs) {
        rc = precompute_reference(&task, &t, cfg);
        if (rc == 0 && val.n_rows) rc = precompute_reference(&held, &held_t, cfg);
        if (rc == 0)
            fprintf(log, "reference log-probs precomputed for %zu rows\n", ds.n_rows + val.n_rows);
        km.ref = held_km.ref = NULL;
        train_reference_close(&ref); /* a frozen copy is no longer needed in memory */
    }
    if (rc == 0) {
        task.held_out = val.n_rows ? &held : NULL;
        rc = train_task_run(cfg, m, lora, &task, out, log);
    }
    free(t.window), free(held_t.window);
    free(t.pre), free(held_t.pre);
    train_reference_close(&ref);
    pref_dataset_free(&val);
    pref_dataset_free(&ds);
    return rc;
}
