#include "grpo/grpo_trainer.h"

#include "common/error.h"
#include "dist/dist.h"
#include "model/forward.h"
#include "rollout/sampler.h"
#include "grpo/grpo_share.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A generation batch shared by its queued micro-steps; freed with the last of them. */
struct GrpoQueuedBatch {
    GrpoBatch b;
    double loss_tokens; /* Σ loss mask over the whole batch: dapo's normaliser */
    int refs;
};

void grpo_trainer_init(GrpoTrainer *g, const GrpoConfig *cfg, Trainer *trainer,
                       const ReferencePolicy *ref, int micro_batch_size, int accumulation_steps,
                       uint64_t seed) {
    *g = (GrpoTrainer){.cfg = cfg,
                       .trainer = trainer,
                       .ref = ref,
                       .micro_batch_size = micro_batch_size,
                       .accumulation_steps = accumulation_steps,
                       .shuffle_rows = true,
                       .seed = seed};
}

static void release(GrpoMicroStep *s) {
    free(s->rows);
    if (--s->batch->refs == 0) {
        grpo_batch_free(&s->batch->b);
        free(s->batch);
    }
}

void grpo_trainer_free(GrpoTrainer *g) {
    for (int i = 0; i < g->n_queued; i++)
        release(&g->queue[i]);
    free(g->queue);
    g->queue = NULL;
    g->n_queued = 0;
}

bool grpo_trainer_needs_old_logps(const GrpoTrainer *g) {
    int generate_every = g->cfg->steps_per_generation * g->cfg->num_iterations;
    return g->accumulation_steps % generate_every != 0 || g->replay_on;
}

int grpo_trainer_queued(const GrpoTrainer *g) {
    return g->n_queued;
}

int grpo_trainer_window(const GrpoTrainer *g) {
    return g->accumulation_steps * g->trainer->world;
}

/* rows of b as a token batch [prompt | completion], each part as wide as its longest row among
 * them: RoPE sees only position differences, so dropping common left padding changes nothing.
 * mark selects the completion tokens that count (the loss mask). */
typedef struct {
    TokenBatch batch;
    int32_t *tokens;
    uint8_t *attn, *mark;
    int prompt_w, completion_w;
} RowsBatch;

static void rows_batch(RowsBatch *rb, const GrpoBatch *b, const int *rows, int n) {
    int pw = 1, cw = 1;
    for (int i = 0; i < n; i++) {
        if (b->prompt_len[rows[i]] > pw) pw = b->prompt_len[rows[i]];
        if (b->completion_len[rows[i]] > cw) cw = b->completion_len[rows[i]];
    }
    int T = pw + cw;
    rb->prompt_w = pw, rb->completion_w = cw;
    rb->tokens = xmalloc((size_t)n * T * sizeof *rb->tokens);
    rb->attn = xcalloc((size_t)n * T, 1);
    rb->mark = xcalloc((size_t)n * T, 1);
    for (int i = 0; i < n; i++) {
        int r = rows[i];
        int32_t *tok = rb->tokens + (size_t)i * T;
        uint8_t *attn = rb->attn + (size_t)i * T, *mark = rb->mark + (size_t)i * T;
        const int32_t *p = b->prompt_ids + (size_t)r * b->prompt_w + (b->prompt_w - pw);
        const uint8_t *pm = b->prompt_mask + (size_t)r * b->prompt_w + (b->prompt_w - pw);
        const int32_t *c = b->completion_ids + (size_t)r * b->completion_w;
        const uint8_t *cm = b->completion_mask + (size_t)r * b->completion_w;
        const uint8_t *em = b->env_mask ? b->env_mask + (size_t)r * b->completion_w : NULL;
        for (int t = 0; t < pw; t++)
            tok[t] = p[t], attn[t] = pm[t];
        for (int t = 0; t < cw; t++) {
            tok[pw + t] = t < b->completion_w ? c[t] : b->pad_id;
            /* TRL's attention mask is the (possibly truncation-masked) completion mask */
            attn[pw + t] = mark[pw + t] = t < b->completion_w && cm[t];
            /* TRL's loss mask: completion_mask x tool_mask */
            if (em && t < b->completion_w && !em[t]) mark[pw + t] = 0;
        }
    }
    rb->batch = (TokenBatch){.batch = n, .t_len = T, .tokens = rb->tokens, .attn_mask = rb->attn};
}

static void rows_batch_free(RowsBatch *rb) {
    free(rb->tokens), free(rb->attn), free(rb->mark);
}

/* Log-probs of rows [lo, hi) of b into out, micro_batch_size rows at a time from lo. */
static int logprobs_rows(Model *model, const ReferencePolicy *ref, const GrpoBatch *b,
                         int micro_batch_size, int lo, int hi, float *out) {
    int *rows = xmalloc((size_t)micro_batch_size * sizeof *rows);
    int rc = 0;
    for (int first = lo; first < hi && rc == 0; first += micro_batch_size) {
        int n = hi - first < micro_batch_size ? hi - first : micro_batch_size;
        for (int i = 0; i < n; i++)
            rows[i] = first + i;
        RowsBatch rb;
        rows_batch(&rb, b, rows, n);
        float *logp = xmalloc((size_t)n * rb.batch.t_len * sizeof *logp);
        rc = ref ? reference_token_logprobs(ref, &rb.batch, rb.mark, logp)
                 : model_token_logprobs(model, &rb.batch, rb.mark, logp);
        for (int i = 0; i < n && rc == 0; i++)
            for (int t = 0; t < rb.completion_w && t < b->completion_w; t++)
                out[(size_t)(first + i) * b->completion_w + t] =
                    logp[(size_t)i * rb.batch.t_len + rb.prompt_w + t];
        free(logp);
        rows_batch_free(&rb);
    }
    free(rows);
    return rc;
}

int grpo_batch_logprobs(Model *model, const ReferencePolicy *ref, const GrpoBatch *b,
                        int micro_batch_size, float *out) {
    memset(out, 0, (size_t)b->n_rows * b->completion_w * sizeof *out);
    return logprobs_rows(model, ref, b, micro_batch_size, 0, b->n_rows, out);
}

/* grpo_batch_logprobs over the ranks: each computes a contiguous run of the micro-batches one
 * process would run (so each row sees the same padding and the same arithmetic as there), then
 * every rank gets every row. */
static int shared_logprobs(GrpoTrainer *g, const ReferencePolicy *ref, const GrpoBatch *b,
                           float *out) {
    int mb = g->micro_batch_size, chunks = (b->n_rows + mb - 1) / mb;
    DistShards part;
    if (dist_shards_init(&part, (size_t)chunks) != 0) return -1;
    int lo = (int)part.offset[g->trainer->rank] * mb,
        hi = (int)part.offset[g->trainer->rank + 1] * mb;
    dist_shards_free(&part);
    if (hi > b->n_rows) hi = b->n_rows;
    if (lo > hi) lo = hi;
    memset(out, 0, (size_t)b->n_rows * b->completion_w * sizeof *out);
    int rc = logprobs_rows(g->trainer->model, ref, b, mb, lo, hi, out);
    if (dist_agree(rc) != 0) return -1;
    grpo_share_rows_f32(out, b->n_rows, b->completion_w, lo, hi);
    return 0;
}

int grpo_trainer_logprobs(GrpoTrainer *g, GrpoBatch *b) {
    size_t cells = (size_t)b->n_rows * b->completion_w;
    if (grpo_trainer_needs_old_logps(g) && !b->old_logps) {
        b->old_logps = xmalloc((cells ? cells : 1) * sizeof(float));
        if (shared_logprobs(g, NULL, b, b->old_logps) != 0) return err_prefix("old log-probs");
    }
    if (g->cfg->beta != 0 && !b->ref_logps) {
        b->ref_logps = xmalloc((cells ? cells : 1) * sizeof(float));
        if (shared_logprobs(g, g->ref, b, b->ref_logps) != 0)
            return err_prefix("reference log-probs");
    }
    return 0;
}

/* A seeded Fisher-Yates permutation (TRL uses torch.randperm; only the distribution matters). */
static void permute(int *order, int n, uint64_t seed, uint64_t stream) {
    SamplerRng rng;
    sampler_rng_seed(&rng, seed, stream);
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(sampler_rng_uniform(&rng) * (i + 1));
        int t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

void grpo_trainer_add(GrpoTrainer *g, GrpoBatch *b) {
    GrpoQueuedBatch *q = xmalloc(sizeof *q);
    q->b = *b;
    memset(b, 0, sizeof *b);
    q->loss_tokens = 0;
    for (size_t c = 0; c < (size_t)q->b.n_rows * q->b.completion_w; c++)
        q->loss_tokens += q->b.completion_mask[c] != 0 && (!q->b.env_mask || q->b.env_mask[c]);
    int n = q->b.n_rows, mb = g->micro_batch_size, chunks = n / mb;
    int *order = xmalloc((size_t)n * sizeof *order);
    if (g->torch_rng) { /* new row i is old row perm[i]: trl's v[permutation] */
        int64_t *perm = xmalloc((size_t)(n ? n : 1) * sizeof *perm);
        torch_randperm(g->torch_rng, perm, n);
        for (int i = 0; i < n; i++)
            order[i] = g->shuffle_rows ? (int)perm[i] : i;
        free(perm);
    } else if (g->shuffle_rows) {
        permute(order, n, g->seed ^ 0x6772706fu, (uint64_t)g->batches_added);
    } else {
        for (int i = 0; i < n; i++)
            order[i] = i;
    }
    g->batches_added++;
    int steps = chunks * g->cfg->num_iterations;
    if (g->n_queued + steps > g->queue_cap) {
        g->queue_cap = g->n_queued + steps + 8;
        g->queue = xrealloc(g->queue, (size_t)g->queue_cap * sizeof *g->queue);
    }
    q->refs = steps;
    for (int it = 0; it < g->cfg->num_iterations; it++)
        for (int k = 0; k < chunks; k++) {
            GrpoMicroStep *s = &g->queue[g->n_queued++];
            s->batch = q;
            s->rows = xmalloc((size_t)mb * sizeof *s->rows);
            memcpy(s->rows, order + (size_t)k * mb, (size_t)mb * sizeof *s->rows);
        }
    free(order);
    if (steps == 0) {
        grpo_batch_free(&q->b);
        free(q);
    }
}

/* ---- the TrainMethod: per micro-step, the GRPO loss on its completion tokens ---- */

/* What grpo_micro_loss reads for micro-step `index` of the running window. */
typedef struct {
    GrpoTrainer *g;
    const RowsBatch *rbs;
} WindowView;

static int grpo_micro_loss(void *ctx, int index, const MicroBatch *mb, const float *logp,
                           const LogitStats *stats, float *dlogp, double *loss) {
    const WindowView *w = ctx;
    GrpoTrainer *g = w->g;
    /* this rank's micro-step `index` is the window's index x world + rank (trainer.h) */
    const GrpoMicroStep *s = &g->queue[index * g->trainer->world + g->trainer->rank];
    const RowsBatch *rb = &w->rbs[index];
    const GrpoBatch *b = &s->batch->b;
    int n = mb->batch.batch, T = mb->batch.t_len, C = rb->completion_w, pw = rb->prompt_w;
    size_t cells = (size_t)n * C;
    float *lp = xmalloc(cells * sizeof *lp), *old = NULL, *ref = NULL;
    float *ent = xmalloc(cells * sizeof *ent), *adv = xmalloc((size_t)n * sizeof *adv);
    float *d = xmalloc(cells * sizeof *d);
    uint8_t *mask = xmalloc(cells);
    if (b->old_logps) old = xmalloc(cells * sizeof *old);
    if (b->ref_logps) ref = xmalloc(cells * sizeof *ref);
    for (int i = 0; i < n; i++) {
        int r = s->rows[i];
        adv[i] = b->advantages[r];
        for (int t = 0; t < C; t++) {
            size_t at = (size_t)i * C + t, src = (size_t)r * b->completion_w + t;
            size_t pos = (size_t)i * T + pw + t;
            lp[at] = logp[pos];
            ent[at] = stats[pos].entropy;
            mask[at] = mb->label_mask[pos];
            if (old) old[at] = b->old_logps[src];
            if (ref) ref[at] = b->ref_logps[src];
        }
    }
    /* the global window's micro-batch count: summed over ranks, the one-process normalisation */
    GrpoMicroBatch gm = {
        n, C, lp, old, ref, ent, adv, mask, grpo_trainer_window(g), s->batch->loss_tokens};
    GrpoLossMetrics m;
    GrpoLossOptions opt = grpo_loss_options_from_config(g->cfg);
    *loss = grpo_loss(&opt, &gm, d, &m);
    memset(dlogp, 0, (size_t)n * T * sizeof *dlogp);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < C; t++)
            dlogp[(size_t)i * T + pw + t] = d[(size_t)i * C + t];
    if (g->cfg->beta != 0) step_metrics_add(&g->metrics, "kl", m.kl);
    step_metrics_add(&g->metrics, "entropy", m.entropy);
    step_metrics_add(&g->metrics, "clip_ratio/low_mean", m.clip_low_mean);
    step_metrics_add(&g->metrics, "clip_ratio/low_min", m.clip_low_min);
    step_metrics_add(&g->metrics, "clip_ratio/high_mean", m.clip_high_mean);
    step_metrics_add(&g->metrics, "clip_ratio/high_max", m.clip_high_max);
    step_metrics_add(&g->metrics, "clip_ratio/region_mean", m.clip_region_mean);
    free(lp), free(old), free(ref), free(ent), free(adv), free(d), free(mask);
    return 0;
}

int grpo_trainer_step(GrpoTrainer *g, StepStats *stats) {
    int window = grpo_trainer_window(g), n = g->accumulation_steps;
    int world = g->trainer->world, rank = g->trainer->rank;
    if (g->n_queued < window)
        return err_set("GRPO: %d micro-steps queued, %d needed for a step", g->n_queued, window);
    RowsBatch *rbs = xmalloc((size_t)n * sizeof *rbs);
    MicroBatch *mbs = xmalloc((size_t)n * sizeof *mbs);
    for (int i = 0; i < n; i++) {
        const GrpoMicroStep *s = &g->queue[i * world + rank];
        rows_batch(&rbs[i], &s->batch->b, s->rows, g->micro_batch_size);
        mbs[i] = (MicroBatch){rbs[i].batch, rbs[i].mark};
    }
    WindowView view = {g, rbs};
    TrainMethod method = {&view, NULL, grpo_micro_loss, true};
    int rc = trainer_step(g->trainer, mbs, n, &method, stats);
    for (int i = 0; i < n; i++)
        rows_batch_free(&rbs[i]);
    for (int i = 0; i < window; i++)
        release(&g->queue[i]);
    memmove(g->queue, g->queue + window, (size_t)(g->n_queued - window) * sizeof *g->queue);
    g->n_queued -= window;
    free(rbs);
    free(mbs);
    return rc;
}
