#include "train/kto_batch.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* The length of prompt + completion after the keep_start cut. */
static int cut_length(int n_prompt, int n_completion, int64_t max_len) {
    int64_t n = (int64_t)n_prompt + n_completion;
    return (int)(n < max_len ? n : max_len);
}

/* Right-padded rows prompts[r] + completions[r] into freshly allocated buffers. */
static void collate(const KtoRow *const *prompts, const KtoRow *const *completions, int rows,
                    int64_t max_len, int32_t pad_id, int32_t **tokens, uint8_t **attn,
                    uint8_t **completion, int *t_len_out) {
    int t_len = 1;
    for (int r = 0; r < rows; r++) {
        int len = cut_length(prompts[r]->n_prompt, completions[r]->n_completion, max_len);
        if (len > t_len) t_len = len;
    }
    size_t cells = (size_t)rows * t_len;
    *tokens = xmalloc(cells * sizeof **tokens);
    *attn = xcalloc(cells, 1);
    *completion = xcalloc(cells, 1);
    for (size_t i = 0; i < cells; i++)
        (*tokens)[i] = pad_id;
    for (int r = 0; r < rows; r++) {
        const KtoRow *p = prompts[r], *c = completions[r];
        int len = cut_length(p->n_prompt, c->n_completion, max_len);
        size_t base = (size_t)r * t_len;
        for (int t = 0; t < len; t++) {
            bool in_prompt = t < p->n_prompt;
            (*tokens)[base + t] = in_prompt ? p->prompt[t] : c->completion[t - p->n_prompt];
            (*attn)[base + t] = 1;
            (*completion)[base + t] = !in_prompt && t > 0; /* t = 0 has no logp */
        }
    }
    *t_len_out = t_len;
}

void kto_batch_build(KtoMicroBatch *out, const PrefDataset *ds, const size_t *order, size_t first,
                     int count, int64_t max_len, int32_t pad_id, bool with_kl) {
    memset(out, 0, sizeof *out);
    const KtoRow **rows = xmalloc((size_t)count * sizeof *rows);
    const KtoRow **rotated = xmalloc((size_t)count * sizeof *rotated);
    out->desirable = xmalloc((size_t)count * sizeof *out->desirable);
    for (int r = 0; r < count; r++) {
        rows[r] = &ds->rows[order[first + (size_t)r]];
        out->desirable[r] = rows[r]->desirable;
    }
    for (int r = 0; r < count; r++)
        rotated[r] = rows[(r + count - 1) % count];
    int t_len;
    collate(rows, rows, count, max_len, pad_id, &out->tokens, &out->attn, &out->completion, &t_len);
    /* the label mask is the completion mask; a separate copy keeps ownership simple */
    uint8_t *label = xmalloc((size_t)count * t_len);
    memcpy(label, out->completion, (size_t)count * t_len);
    out->mb = (MicroBatch){
        {.batch = count, .t_len = t_len, .tokens = out->tokens, .attn_mask = out->attn}, label};
    if (with_kl) {
        int kl_len;
        collate(rows, rotated, count, max_len, pad_id, &out->kl_tokens, &out->kl_attn,
                &out->kl_completion, &kl_len);
        out->kl = (TokenBatch){
            .batch = count, .t_len = kl_len, .tokens = out->kl_tokens, .attn_mask = out->kl_attn};
    }
    out->n_rows = count;
    out->row_index = order + first;
    free(rows);
    free(rotated);
}

void kto_batch_free(KtoMicroBatch *b) {
    free(b->tokens);
    free(b->attn);
    free(b->completion);
    free((void *)b->mb.label_mask);
    free(b->kl_tokens);
    free(b->kl_attn);
    free(b->kl_completion);
    free(b->desirable);
    memset(b, 0, sizeof *b);
}

size_t kto_batch_tokens(const KtoMicroBatch *b) {
    size_t n = 0, cells = (size_t)b->mb.batch.batch * b->mb.batch.t_len;
    for (size_t i = 0; i < cells; i++)
        n += b->attn[i];
    return n;
}
