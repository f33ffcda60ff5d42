#include "train/pref_method.h"

#include "common/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* CPOTrainer's options: rl: simpo is its simpo loss (Axolotl), rl: cpo any of its types. */
static int cpo_init(CpoOptions *o, const TrainConfig *cfg) {
    *o =
        (CpoOptions){CPO_SIMPO,        cfg->beta, 0.0, isnan(cfg->cpo_alpha) ? 1.0 : cfg->cpo_alpha,
                     cfg->simpo_gamma, 0.0};
    if (cfg->rl == RL_CPO &&
        cpo_loss_type_parse(cfg->cpo_loss_type ? cfg->cpo_loss_type : "sigmoid", o) != 0)
        return err_prefix("%s: key 'cpo_loss_type'", cfg->source);
    if (cpo_options_check(o) != 0) return err_prefix("%s", cfg->source);
    return 0;
}

int pref_method_init(PrefMethod *pm, const TrainConfig *cfg) {
    memset(pm, 0, sizeof *pm);
    pm->rl = cfg->rl;
    if (cfg->rl == RL_ORPO) {
        pm->orpo.beta = cfg->beta;
        return 0;
    }
    if (cfg->rl == RL_SIMPO || cfg->rl == RL_CPO) return cpo_init(&pm->cpo, cfg);
    if (cfg->rl != RL_DPO && cfg->rl != RL_IPO)
        return err_set("%s: rl: %s is not implemented in this build yet", cfg->source,
                       rl_method_name(cfg->rl));
    DpoOptions *o = &pm->dpo;
    o->beta = cfg->beta;
    o->label_smoothing = cfg->dpo_label_smoothing;
    o->discopop_tau = 0.05;
    o->legacy_compat = cfg->dpo_legacy_compat;
    o->rpo_alpha = isnan(cfg->rpo_alpha) ? 0.0 : cfg->rpo_alpha;
    if (cfg->n_dpo_loss_type > DPO_MAX_LOSSES)
        return err_set("%s: key 'dpo_loss_type': at most %d loss types", cfg->source,
                       DPO_MAX_LOSSES);
    for (int k = 0; k < cfg->n_dpo_loss_type; k++) {
        if (dpo_loss_type_parse(cfg->dpo_loss_type[k], &o->types[k]) != 0)
            return err_prefix("%s: key 'dpo_loss_type'", cfg->source);
        o->weights[k] = cfg->dpo_loss_weight_values[k];
    }
    o->n_types = cfg->n_dpo_loss_type;
    if (dpo_options_check(o) != 0) return err_prefix("%s", cfg->source);
    return 0;
}

void pref_method_flush_metrics(PrefMethod *pm, json_t *entry, const char *prefix) {
    step_metrics_flush_ranks(&pm->metrics, entry, prefix);
}

int pref_reference_sums(const ReferencePolicy *ref, const PrefMicroBatch *pmb, double *chosen,
                        double *rejected) {
    const TokenBatch *b = &pmb->mb.batch;
    size_t cells = (size_t)b->batch * b->t_len;
    float *logp = xmalloc(cells * sizeof *logp);
    double *sums = xmalloc((size_t)b->batch * sizeof *sums);
    int rc = reference_token_logprobs(ref, b, pmb->completion, logp);
    if (rc == 0) {
        logp_row_sums(logp, pmb->completion, b->batch, b->t_len, sums, NULL);
        memcpy(chosen, sums, (size_t)pmb->n_pairs * sizeof *chosen);
        memcpy(rejected, sums + pmb->n_pairs, (size_t)pmb->n_pairs * sizeof *rejected);
    }
    free(logp);
    free(sums);
    return rc;
}

/* TRL's model-level metrics from the statistics of the policy's logits. */
static void logit_metrics(PrefMethod *pm, const PrefMicroBatch *pmb, const LogitStats *stats) {
    const TokenBatch *b = &pmb->mb.batch;
    int n = pmb->n_pairs, T = b->t_len;
    double entropy = 0, logits[2] = {0, 0}, correct = 0, attn = 0;
    int tokens[2] = {0, 0};
    for (int r = 0; r < 2 * n; r++) {
        int half = r >= n;
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)r * T + t;
            attn += b->attn_mask[i];
            if (!pmb->completion[i]) continue;
            entropy += stats[i].entropy;
            logits[half] += stats[i].mean_logit;
            tokens[half]++;
            if (!half) correct += stats[i].argmax == b->tokens[i];
        }
    }
    int all = tokens[0] + tokens[1];
    step_metrics_add(&pm->metrics, "entropy", all ? entropy / all : 0.0);
    step_metrics_add_tokens(&pm->metrics, attn);
    step_metrics_add(&pm->metrics, "logits/chosen", tokens[0] ? logits[0] / tokens[0] : 0.0);
    step_metrics_add(&pm->metrics, "logits/rejected", tokens[1] ? logits[1] / tokens[1] : 0.0);
    step_metrics_add(&pm->metrics, "mean_token_accuracy", tokens[0] ? correct / tokens[0] : 0.0);
}

static int pref_micro_loss(void *ctx, int index, const MicroBatch *mb, const float *logp,
                           const LogitStats *stats, float *dlogp, double *loss) {
    PrefMethod *pm = ctx;
    const PrefMicroBatch *pmb = &pm->window[index];
    int n = pmb->n_pairs, rows = 2 * n, T = mb->batch.t_len;
    double *sums = xmalloc((size_t)rows * sizeof *sums), *ref = xmalloc((size_t)rows * sizeof *ref);
    double *seq = xmalloc((size_t)rows * sizeof *seq);
    int *lens = xmalloc((size_t)rows * sizeof *lens),
        *seq_lens = xmalloc((size_t)rows * sizeof *seq_lens);
    double *grads = xcalloc(3 * (size_t)n, sizeof *grads);
    logp_row_sums(logp, pmb->completion, rows, T, sums, lens);
    logp_row_sums(logp, mb->label_mask, rows, T, seq, seq_lens);
    int rc = 0;
    bool has_ref = pref_method_needs_reference(pm);
    if (!has_ref) {
        /* ORPO, CPO/SimPO: no reference */
    } else if (pm->pre_ref_chosen) {
        for (int i = 0; i < n; i++) {
            ref[i] = pm->pre_ref_chosen[pmb->pair_index[i]];
            ref[n + i] = pm->pre_ref_rejected[pmb->pair_index[i]];
        }
    } else {
        rc = pref_reference_sums(pm->ref, pmb, ref, ref + n);
    }
    PrefBatch batch = {
        n,   sums,    sums + n, lens, lens + n, has_ref ? ref : NULL, has_ref ? ref + n : NULL,
        seq, seq_lens};
    PrefLossOutput out = {0, grads, grads + n, grads + 2 * n, {{0}, {0}, 0}};
    if (rc == 0)
        rc = pm->rl == RL_ORPO                        ? orpo_loss(&pm->orpo, &batch, &out)
             : pm->rl == RL_SIMPO || pm->rl == RL_CPO ? cpo_loss(&pm->cpo, &batch, &out)
                                                      : dpo_loss(&pm->dpo, &batch, &out);
    if (rc == 0) {
        double scale = 1.0 / pm->n_window;
        *loss = out.loss * scale;
        memset(dlogp, 0, (size_t)rows * T * sizeof *dlogp);
        for (int r = 0; r < rows; r++) {
            double d = (r < n ? out.d_chosen[r] : out.d_rejected[r - n]) * scale;
            double d_seq = r < n ? out.d_seq_chosen[r] * scale : 0.0;
            for (int t = 0; t < T; t++) {
                size_t i = (size_t)r * T + t;
                dlogp[i] =
                    (float)((pmb->completion[i] ? d : 0.0) + (mb->label_mask[i] ? d_seq : 0.0));
            }
        }
        for (int k = 0; k < out.metrics.n; k++)
            step_metrics_add(&pm->metrics, out.metrics.name[k], out.metrics.value[k]);
        if (stats) logit_metrics(pm, pmb, stats);
    }
    free(sums), free(ref), free(seq), free(lens), free(seq_lens), free(grads);
    return rc;
}

bool pref_method_needs_reference(const PrefMethod *pm) {
    return pm->rl == RL_DPO || pm->rl == RL_IPO;
}

bool pref_method_all_positions(const PrefMethod *pm) {
    return pm->rl == RL_ORPO;
}

TrainMethod pref_method_train_method(PrefMethod *pm) {
    return (TrainMethod){.ctx = pm, .micro_loss = pref_micro_loss, .wants_stats = true};
}
