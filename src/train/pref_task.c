#include "train/pref_task.h"

#include "common/error.h"
#include "data/sft_dataset.h"
#include "train/data_order.h"
#include "train/pref_method.h"
#include "train/reference.h"
#include "train/train_task.h"

#include <stdlib.h>
#include <string.h>

int pref_task_held_out(PrefDataset *ds, const TrainConfig *cfg, const Tokenizer *tok, bool kto,
                       PrefDataset *val, FILE *log) {
    memset(val, 0, sizeof *val);
    if (cfg->n_test_datasets) {
        TrainConfig eval = train_task_test_config(cfg);
        if (pref_dataset_load(val, &eval, tok, log) != 0) return err_prefix("test_datasets");
        return 0;
    }
    size_t *order, n_val;
    if (data_order_validation_draw(kto ? ds->n_rows : ds->n_pairs, cfg, &order, &n_val) != 0)
        return -1;
    if (n_val == 0) return 0;
    if (kto) {
        data_order_move_held_out((void **)&ds->rows, &ds->n_rows, sizeof *ds->rows, order, n_val,
                                 (void **)&val->rows);
        val->n_rows = n_val;
    } else {
        data_order_move_held_out((void **)&ds->pairs, &ds->n_pairs, sizeof *ds->pairs, order, n_val,
                                 (void **)&val->pairs);
        val->n_pairs = n_val;
    }
    free(order);
    return 0;
}

typedef struct {
    const PrefDataset *ds;
    int32_t pad_id;
    int64_t max_len;
    PrefMicroBatch *window; /* one per micro-batch of a window */
    PrefMethod *pm;
    /* precompute_ref_log_probs' output, per pair: one array (owned; NULL until precomputed),
     * the chosen sums then the rejected ones */
    double *pre_chosen, *pre_rejected;
} PrefTask;

static void pref_build(void *ctx, int slot, const size_t *order, size_t first, int count,
                       MicroBatch *mb, size_t *tokens) {
    PrefTask *t = ctx;
    PrefMicroBatch *b = &t->window[slot];
    pref_batch_build(b, t->ds, order, first, count, t->max_len, t->pad_id,
                     pref_method_all_positions(t->pm));
    *mb = b->mb;
    *tokens = 0;
    for (size_t i = 0; i < (size_t)b->mb.batch.batch * b->mb.batch.t_len; i++)
        *tokens += b->attn[i];
}

static void pref_release(void *ctx, int slot) {
    PrefTask *t = ctx;
    pref_batch_free(&t->window[slot]);
}

static void pref_begin_step(void *ctx, int n_micro, int n_window) {
    PrefTask *t = ctx;
    (void)n_micro;
    t->pm->window = t->window;
    t->pm->n_window = n_window; /* each micro-batch's loss is 1/n_window of the window's */
}

static void pref_flush(void *ctx, json_t *entry, const char *prefix) {
    PrefTask *t = ctx;
    pref_method_flush_metrics(t->pm, entry, prefix);
}

static double pref_trained_tokens(void *ctx) {
    PrefTask *t = ctx;
    return t->pm->metrics.num_tokens;
}

/* precompute_ref_log_probs: the reference's sums of the pairs of slot 0. */
static int pref_precompute_batch(void *ctx, size_t first, int count) {
    PrefTask *t = ctx;
    (void)count;
    return pref_reference_sums(t->pm->ref, &t->window[0], t->pre_chosen + first,
                               t->pre_rejected + first);
}

/* The task of ds through pm, with `slots` micro-batch buffers (t->window is the caller's to
 * free). */
static TrainTask pref_task(PrefTask *t, const PrefDataset *ds, PrefMethod *pm,
                           const TrainConfig *cfg, int32_t pad, int slots) {
    *t = (PrefTask){.ds = ds,
                    .pad_id = pad,
                    .max_len = cfg->sequence_len,
                    .window = xcalloc((size_t)slots, sizeof *t->window),
                    .pm = pm};
    return (TrainTask){.ctx = t,
                       .n_examples = ds->n_pairs,
                       .build = pref_build,
                       .release = pref_release,
                       .begin_step = pref_begin_step,
                       .method = pref_method_train_method(pm),
                       .flush_metrics = pref_flush,
                       .trained_tokens = pref_trained_tokens};
}

/* Every pair's reference sums once (into t->pre_chosen, which the caller frees), the
 * held-out pairs' too; the method then reads them instead of running the reference. */
static int precompute_reference(TrainTask *task, PrefTask *t, const TrainConfig *cfg) {
    size_t n = t->ds->n_pairs;
    t->pre_chosen = xmalloc((2 * n + 1) * sizeof *t->pre_chosen);
    t->pre_rejected = t->pre_chosen + n;
    if (train_task_each_batch(task, cfg->micro_batch_size, pref_precompute_batch) != 0) return -1;
    t->pm->pre_ref_chosen = t->pre_chosen;
    t->pm->pre_ref_rejected = t->pre_rejected;
    return 0;
}

int pref_task_run(const TrainConfig *cfg, Model *m, LoraAdapter *lora, const Tokenizer *tok,
                  TrainOutcome *out, FILE *log) {
    PrefMethod pm;
    if (pref_method_init(&pm, cfg) != 0) return -1;
    int32_t eos = -1, pad = 0;
    PrefDataset ds = {0}, val = {0};
    int rc = tokenizer_special_ids(cfg->tokenizer_config, tok, &eos, &pad);
    if (rc == 0) rc = pref_dataset_load(&ds, cfg, tok, log);
    if (rc == 0) rc = pref_task_held_out(&ds, cfg, tok, false, &val, log);
    ReferencePolicy ref = {0};
    bool needs_ref = pref_method_needs_reference(&pm);
    if (rc == 0 && needs_ref) rc = train_reference_open(&ref, cfg, m, lora, log);
    if (rc == 0 && !needs_ref) {
        fprintf(log, "reference: none (rl: %s compares the policy's own responses)\n",
                rl_method_name(cfg->rl));
        if (cfg->precompute_ref_log_probs)
            fprintf(log, "warning: precompute_ref_log_probs has no effect with rl: %s\n",
                    rl_method_name(cfg->rl));
    }
    pm.ref = needs_ref ? &ref : NULL;
    /* the held-out pairs go through a second instance of the method: its own metrics, and the
     * held-out pairs' precomputed reference sums */
    PrefMethod held_pm = pm;
    PrefTask t, held_t;
    TrainTask task = pref_task(&t, &ds, &pm, cfg, pad, (int)cfg->gradient_accumulation_steps);
    TrainTask held = pref_task(&held_t, &val, &held_pm, cfg, pad, 1);
    if (rc == 0 && needs_ref && cfg->precompute_ref_log_probs) {
        rc = precompute_reference(&task, &t, cfg);
        if (rc == 0 && val.n_pairs) rc = precompute_reference(&held, &held_t, cfg);
        if (rc == 0)
            fprintf(log, "reference log-probs precomputed for %zu pairs\n",
                    ds.n_pairs + val.n_pairs);
        pm.ref = held_pm.ref = NULL;
        train_reference_close(&ref); /* a frozen copy is no longer needed in memory */
    }
    if (rc == 0) {
        task.held_out = val.n_pairs ? &held : NULL;
        rc = train_task_run(cfg, m, lora, &task, out, log);
    }
    free(t.window), free(held_t.window);
    free(t.pre_chosen), free(held_t.pre_chosen);
    train_reference_close(&ref);
    pref_dataset_free(&val);
    pref_dataset_free(&ds);
    return rc;
}
