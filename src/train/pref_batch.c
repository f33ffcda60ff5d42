#include "train/pref_batch.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

/* The length of prompt + response after the keep_start cut. */
static int row_length(int n_prompt, int n_response, int64_t max_len) {
    int64_t n = (int64_t)n_prompt + n_response;
    return (int)(n < max_len ? n : max_len);
}

/* The rejected sequence's prompt length (its own prompt when the tokenizer merged differently). */
static int rejected_prompt_length(const PrefPair *p) {
    return p->rejected_prompt ? p->n_rejected_prompt : p->n_prompt;
}

void pref_batch_build(PrefMicroBatch *out, const PrefDataset *ds, const size_t *order, size_t first,
                      int count, int64_t max_len, int32_t pad_id, bool all_positions) {
    memset(out, 0, sizeof *out);
    int rows = 2 * count, t_len = 1;
    for (int i = 0; i < count; i++) {
        const PrefPair *p = &ds->pairs[order[first + i]];
        int a = row_length(p->n_prompt, p->n_chosen, max_len);
        int b = row_length(rejected_prompt_length(p), p->n_rejected, max_len);
        if (a > t_len) t_len = a;
        if (b > t_len) t_len = b;
    }
    size_t cells = (size_t)rows * t_len;
    out->tokens = xmalloc(cells * sizeof *out->tokens);
    out->attn = xcalloc(cells, 1);
    out->completion = xcalloc(cells, 1);
    uint8_t *needed = xcalloc(cells, 1);
    for (size_t i = 0; i < cells; i++)
        out->tokens[i] = pad_id;
    for (int r = 0; r < rows; r++) {
        const PrefPair *p = &ds->pairs[order[first + (size_t)(r % count)]];
        bool chosen = r < count;
        const int32_t *resp = chosen ? p->chosen : p->rejected;
        int n_resp = chosen ? p->n_chosen : p->n_rejected;
        const int32_t *prompt = chosen || !p->rejected_prompt ? p->prompt : p->rejected_prompt;
        int n_prompt = chosen ? p->n_prompt : rejected_prompt_length(p);
        int len = row_length(n_prompt, n_resp, max_len);
        int32_t *row = out->tokens + (size_t)r * t_len;
        for (int t = 0; t < len; t++) {
            bool in_prompt = t < n_prompt;
            row[t] = in_prompt ? prompt[t] : resp[t - n_prompt];
            out->attn[(size_t)r * t_len + t] = 1;
            out->completion[(size_t)r * t_len + t] = !in_prompt && t > 0; /* t = 0 has no logp */
            needed[(size_t)r * t_len + t] = all_positions ? t > 0 : !in_prompt;
        }
    }
    out->n_pairs = count;
    out->pair_index = order + first;
    out->mb = (MicroBatch){
        {.batch = rows, .t_len = t_len, .tokens = out->tokens, .attn_mask = out->attn}, needed};
}

void pref_batch_free(PrefMicroBatch *b) {
    free(b->tokens);
    free(b->attn);
    free(b->completion);
    free((void *)b->mb.label_mask);
    memset(b, 0, sizeof *b);
}
