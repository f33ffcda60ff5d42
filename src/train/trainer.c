#include "train/trainer.h"

#include "common/error.h"
#include "methods/sft.h"
#include "model/backward.h"

#include <stdlib.h>
#include <string.h>

int trainer_init(Trainer *t, Model *m, const TrainerOptions *opt) {
    memset(t, 0, sizeof *t);
    t->model = m;
    t->opt = *opt;
    t->spans = xcalloc((size_t)m->n_param_tensors, sizeof *t->spans);
    for (int p = 0; p < m->n_param_tensors; p++)
        t->spans[p] = (ParamSpan){m->param_info[p].offset, m->param_info[p].numel,
                                  param_gets_weight_decay(m->param_info[p].name)};
    t->grads = calloc(m->n_params, sizeof *t->grads);
    if (!t->grads || adamw_init(&t->adamw, &opt->adamw, t->spans, m->n_param_tensors) != 0) {
        free(t->grads);
        free(t->spans);
        return err_set("out of memory for gradients and optimizer state (%zu parameters)",
                       m->n_params);
    }
    return 0;
}

void trainer_free(Trainer *t) {
    adamw_free(&t->adamw);
    free(t->spans);
    free(t->grads);
    memset(t, 0, sizeof *t);
}

int trainer_sft_step(Trainer *t, const MicroBatch *mbs, int n, StepStats *stats) {
    Model *m = t->model;
    memset(stats, 0, sizeof *stats);
    for (int i = 0; i < n; i++)
        stats->tokens +=
            sft_count_labels(mbs[i].label_mask, (size_t)mbs[i].batch.batch * mbs[i].batch.t_len);
    memset(t->grads, 0, m->n_params * sizeof *t->grads);
    for (int i = 0; i < n; i++) {
        size_t cells = (size_t)mbs[i].batch.batch * mbs[i].batch.t_len;
        float *logp = xmalloc(cells * sizeof *logp), *dlogp = xmalloc(cells * sizeof *dlogp);
        ForwardTape tape;
        int rc = model_forward_tape(m, &mbs[i].batch, t->opt.gradient_checkpointing, &tape);
        if (rc == 0) {
            model_tape_logprobs(m, &tape, mbs[i].label_mask, logp);
            stats->loss += sft_loss(logp, mbs[i].label_mask, cells, stats->tokens, dlogp);
            rc = model_backward(m, &tape, mbs[i].label_mask, dlogp, t->grads, NULL);
            forward_tape_free(&tape);
        }
        free(logp);
        free(dlogp);
        if (rc != 0) return err_prefix("micro-batch %d", i);
    }
    stats->grad_norm = grad_global_norm(t->grads, t->spans, m->n_param_tensors);
    if (t->opt.max_grad_norm > 0)
        grad_clip(t->grads, t->spans, m->n_param_tensors, t->opt.max_grad_norm, stats->grad_norm);
    stats->lr = t->opt.learning_rate * lr_schedule_factor(t->opt.schedule, t->step,
                                                          t->opt.warmup_steps, t->opt.total_steps);
    adamw_step(&t->adamw, m->params, t->grads, stats->lr);
    t->step++;
    return 0;
}
