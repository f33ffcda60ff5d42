#include "model/sequence_scores.h"

#include "common/error.h"
#include "model/forward.h"

#include <stdlib.h>
#include <string.h>

static int score_batch(const Model *m, const SequenceToScore *items, int count,
                       SequenceScore *scores) {
    int t_len = 0;
    for (int i = 0; i < count; i++) {
        int len = items[i].prompt_len + items[i].completion_len;
        if (len > t_len) t_len = len;
    }
    size_t n = (size_t)count * t_len;
    int32_t *tokens = xcalloc(n, sizeof *tokens);
    uint8_t *attn = xcalloc(n, 1), *target = xcalloc(n, 1);
    float *logp = xmalloc(n * sizeof *logp);
    for (int i = 0; i < count; i++) {
        const SequenceToScore *pc = &items[i];
        int len = pc->prompt_len + pc->completion_len;
        memcpy(tokens + (size_t)i * t_len, pc->ids, (size_t)len * sizeof *tokens);
        memset(attn + (size_t)i * t_len, 1, (size_t)len);
        memset(target + (size_t)i * t_len + pc->prompt_len, 1, (size_t)pc->completion_len);
    }
    TokenBatch batch = {.batch = count, .t_len = t_len, .tokens = tokens, .attn_mask = attn};
    int rc = model_token_logprobs(m, &batch, target, logp);
    for (int i = 0; rc == 0 && i < count; i++) {
        double sum = 0.0;
        const float *row = logp + (size_t)i * t_len;
        for (int t = items[i].prompt_len; t < items[i].prompt_len + items[i].completion_len; t++)
            sum += row[t];
        scores[i].logp = sum;
        scores[i].tokens = items[i].completion_len;
    }
    free(logp);
    free(target);
    free(attn);
    free(tokens);
    return rc;
}

int sequence_scores(const Model *m, const SequenceToScore *seqs, size_t n, int batch_size,
                    SequenceScore *scores, size_t *failed) {
    if (failed) *failed = n;
    if (batch_size < 1) return err_set("batch size must be at least 1");
    /* Dynamic NTK and longrope RoPE take their frequencies from the padded batch length, as
     * transformers does; scoring one sequence at a time keeps a score independent of its
     * neighbours. */
    if (m->cfg.rope.type == ROPE_DYNAMIC || m->cfg.rope.type == ROPE_LONGROPE) batch_size = 1;
    for (size_t i = 0; i < n; i += (size_t)batch_size) {
        int count = n - i < (size_t)batch_size ? (int)(n - i) : batch_size;
        if (score_batch(m, seqs + i, count, scores + i) != 0) {
            if (failed) *failed = i;
            return -1;
        }
    }
    return 0;
}
