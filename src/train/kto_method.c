#include "train/kto_method.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

int kto_method_init(KtoMethod *km, const TrainConfig *cfg) {
    memset(km, 0, sizeof *km);
    if (cfg->rl != RL_KTO) return err_set("%s: kto_method is for rl: kto", cfg->source);
    KtoOptions *o = &km->kto;
    o->loss_type = KTO_LOSS_KTO;
    o->beta = cfg->beta;
    o->desirable_weight = cfg->kto_desirable_weight;
    o->undesirable_weight = cfg->kto_undesirable_weight;
    /* Axolotl has no key for KTOConfig.loss_type; rlhf.c reads it from the trl: block, where
     * TRL's own name for it lives (Axolotl passes trl.loss_type to GRPO only). */
    const json_t *lt = cfg->trl ? json_object_get(cfg->trl, "loss_type") : NULL;
    if (lt && !json_is_null(lt)) {
        if (!json_is_string(lt))
            return err_set("%s:%d: key 'trl.loss_type': expected a string (kto or "
                           "apo_zero_unpaired)",
                           cfg->source, cfg->trl_line);
        if (kto_loss_type_parse(json_string_value(lt), &o->loss_type) != 0)
            return err_prefix("%s:%d: key 'trl.loss_type'", cfg->source, cfg->trl_line);
    }
    km->with_kl = o->loss_type == KTO_LOSS_KTO;
    /* TRL's check (KTOTrainer.__init__): one row per micro-batch makes its KL row its own
     * prompt with its own completion, so the KL term would equal the implied reward. */
    if (km->with_kl && cfg->micro_batch_size <= 1)
        return err_set("%s: key 'micro_batch_size': %lld: Actual (not effective) batch size must "
                       "be > 1. KTO will not work properly because the KL term will be "
                       "equivalent to the implied reward. (trl.loss_type: apo_zero_unpaired has "
                       "no KL term and takes micro_batch_size 1.)",
                       cfg->source, (long long)cfg->micro_batch_size);
    return 0;
}

void kto_method_flush_metrics(KtoMethod *km, json_t *entry, const char *prefix) {
    step_metrics_flush_ranks(&km->metrics, entry, prefix);
}

/* Sums of log-probs of the marked tokens of each row of `batch` under the reference, or under
 * the policy when ref is NULL. */
static int scored_sums(const ReferencePolicy *ref, const Model *policy, const TokenBatch *batch,
                       const uint8_t *mark, double *sums) {
    size_t cells = (size_t)batch->batch * batch->t_len;
    float *logp = xmalloc(cells * sizeof *logp);
    int rc = ref ? reference_token_logprobs(ref, batch, mark, logp)
                 : model_token_logprobs(policy, batch, mark, logp);
    if (rc == 0) logp_row_sums(logp, mark, batch->batch, batch->t_len, sums, NULL);
    free(logp);
    return rc;
}

int kto_reference_sums(const ReferencePolicy *ref, const KtoMicroBatch *b, double *ref_sums,
                       double *ref_kl) {
    if (scored_sums(ref, NULL, &b->mb.batch, b->completion, ref_sums) != 0) return -1;
    if (ref_kl && b->kl.tokens && scored_sums(ref, NULL, &b->kl, b->kl_completion, ref_kl) != 0)
        return -1;
    return 0;
}

/* TRL's logit statistics of the policy's forward: entropy over every completion token, the
 * mean logit per kind (only for a kind with tokens), the running token count. */
static void logit_metrics(KtoMethod *km, const KtoMicroBatch *b, const LogitStats *stats) {
    const TokenBatch *tb = &b->mb.batch;
    int T = tb->t_len;
    double entropy = 0, logits[2] = {0, 0};
    int tokens[2] = {0, 0};
    for (int r = 0; r < b->n_rows; r++) {
        int kind = b->desirable[r] ? 0 : 1;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)r * T + t;
            if (!b->completion[i]) continue;
            entropy += stats[i].entropy;
            logits[kind] += stats[i].mean_logit;
            tokens[kind]++;
        }
    }
    int all = tokens[0] + tokens[1];
    step_metrics_add(&km->metrics, "entropy", all ? entropy / all : 0.0);
    step_metrics_add_tokens(&km->metrics, (double)kto_batch_tokens(b));
    if (tokens[0]) step_metrics_add(&km->metrics, "logits/chosen", logits[0] / tokens[0]);
    if (tokens[1]) step_metrics_add(&km->metrics, "logits/rejected", logits[1] / tokens[1]);
}

static int kto_micro_loss(void *ctx, int index, const MicroBatch *mb, const float *logp,
                          const LogitStats *stats, float *dlogp, double *loss) {
    KtoMethod *km = ctx;
    const KtoMicroBatch *b = &km->window[index];
    int n = b->n_rows, T = mb->batch.t_len;
    double *sums = xmalloc((size_t)n * sizeof *sums), *ref = xmalloc((size_t)n * sizeof *ref);
    double *kl = xmalloc(2 * (size_t)n * sizeof *kl), *kl_ref = kl + n;
    double *d_logp = xcalloc((size_t)n, sizeof *d_logp);
    int *lens = xmalloc((size_t)n * sizeof *lens);
    logp_row_sums(logp, b->completion, n, T, sums, lens);
    int rc = 0;
    /* the KL rows under the policy: a plain forward, as TRL's no_grad (they carry no gradient) */
    if (km->with_kl) rc = scored_sums(NULL, km->policy, &b->kl, b->kl_completion, kl);
    if (rc == 0 && km->pre_ref) {
        for (int i = 0; i < n; i++) {
            ref[i] = km->pre_ref[b->row_index[i]];
            if (km->with_kl) kl_ref[i] = km->pre_ref_kl[b->row_index[i]];
        }
    } else if (rc == 0) {
        rc = kto_reference_sums(km->ref, b, ref, km->with_kl ? kl_ref : NULL);
    }
    KtoBatch batch = {
        n, sums, lens, ref, b->desirable, km->with_kl ? kl : NULL, km->with_kl ? kl_ref : NULL};
    KtoLossOutput out = {0, d_logp, {{0}, {0}, 0}};
    if (rc == 0) rc = kto_loss(&km->kto, &batch, &out);
    if (rc == 0) {
        double scale = 1.0 / km->n_window;
        *loss = out.loss * scale;
        for (int r = 0; r < n; r++)
            for (int t = 0; t < T; t++) {
                size_t i = (size_t)r * T + t;
                dlogp[i] = b->completion[i] ? (float)(d_logp[r] * scale) : 0.0f;
            }
        /* TRL's order: kl, the logit statistics, then rewards and logps */
        for (int k = 0; k < out.metrics.n; k++) {
            step_metrics_add(&km->metrics, out.metrics.name[k], out.metrics.value[k]);
            if (stats && strcmp(out.metrics.name[k], "kl") == 0) logit_metrics(km, b, stats);
        }
    }
    free(sums), free(ref), free(kl), free(d_logp), free(lens);
    return rc;
}

TrainMethod kto_method_train_method(KtoMethod *km) {
    return (TrainMethod){.ctx = km, .micro_loss = kto_micro_loss, .wants_stats = true};
}
