#include "data/sft_dataset.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "data/dataset_merge.h"
#include "data/dataset_rows.h"
#include "data/sft_chat.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALPACA_WITH_INPUT                                                                          \
    "Below is an instruction that describes a task, paired with an input that provides further "   \
    "context. Write a response that appropriately completes the request.\n\n"                      \
    "### Instruction:\n%s\n\n### Input:\n%s\n\n### Response:\n"
#define ALPACA_NO_INPUT                                                                            \
    "Below is an instruction that describes a task. Write a response that appropriately "          \
    "completes the request.\n\n### Instruction:\n%s\n\n### Response:\n"

char *alpaca_prompt(const char *instruction, const char *input) {
    bool with_input = input && *input;
    size_t n = strlen(instruction) + (with_input ? strlen(input) : 0) + 512;
    char *s = xmalloc(n);
    if (with_input)
        snprintf(s, n, ALPACA_WITH_INPUT, instruction, input);
    else
        snprintf(s, n, ALPACA_NO_INPUT, instruction);
    return s;
}

typedef enum { SFT_COMPLETION, SFT_ALPACA, SFT_CHAT } SftType;

typedef struct {
    SftDataset *ds;
    const Tokenizer *tok;
    int32_t eos_id;
    int64_t seq_len;
    SftType type;
    ChatSftStrategy chat; /* SFT_CHAT */
} LoadContext;

static void push(SftDataset *ds, const int32_t *ids, const uint8_t *labels, int len) {
    ds->items = xrealloc(ds->items, (ds->n + 1) * sizeof *ds->items);
    SftExample *e = &ds->items[ds->n++];
    e->len = len;
    e->ids = xmalloc((size_t)len * sizeof *e->ids);
    e->labels = xmalloc((size_t)len);
    memcpy(e->ids, ids, (size_t)len * sizeof *ids);
    memcpy(e->labels, labels, (size_t)len);
    e->row = ds->rows;
}

static void drop_too_long(SftDataset *ds, size_t len) {
    if (ds->dropped_too_long++ == 0 || len < ds->shortest_dropped) ds->shortest_dropped = len;
}

static const char *string_field(const json_t *row, const char *key, bool required, int *rc) {
    const json_t *v = json_object_get(row, key);
    if (!v || json_is_null(v)) {
        if (required) *rc = err_set("missing field \"%s\"", key);
        return NULL;
    }
    if (!json_is_string(v)) {
        *rc = err_set("field \"%s\": expected a string", key);
        return NULL;
    }
    return json_string_value(v);
}

/* Encodes text; with add_eos, appends EOS unless it is already last. */
static int encode(const LoadContext *c, const char *text, bool special, bool add_eos, int32_t **ids,
                  size_t *n) {
    if (tokenizer_encode(c->tok, text, strlen(text), special, ids, n) != 0) return -1;
    if (add_eos && c->eos_id >= 0 && (*n == 0 || (*ids)[*n - 1] != c->eos_id)) {
        *ids = xrealloc(*ids, (*n + 1) * sizeof **ids);
        (*ids)[(*n)++] = c->eos_id;
    }
    return 0;
}

static int add_completion(const LoadContext *c, const json_t *row) {
    int rc = 0;
    const char *text = string_field(row, "text", true, &rc);
    if (rc) return -1;
    int32_t *ids;
    size_t n;
    if (encode(c, text, true, true, &ids, &n) != 0) return -1;
    uint8_t *labels = xmalloc(n ? n : 1);
    memset(labels, 1, n);
    for (size_t i = 0; i < n; i += (size_t)c->seq_len) {
        size_t len = n - i < (size_t)c->seq_len ? n - i : (size_t)c->seq_len;
        if (len >= 2) push(c->ds, ids + i, labels + i, (int)len);
        c->ds->rows++;
    }
    free(labels);
    free(ids);
    return 0;
}

static int add_alpaca(const LoadContext *c, const json_t *row) {
    int rc = 0;
    const char *instruction = string_field(row, "instruction", true, &rc);
    const char *input = rc ? NULL : string_field(row, "input", false, &rc);
    const char *output = rc ? NULL : string_field(row, "output", true, &rc);
    if (rc) return -1;
    char *prompt = alpaca_prompt(instruction, input);
    int32_t *p_ids = NULL, *r_ids = NULL;
    size_t np = 0, nr = 0;
    rc = encode(c, prompt, true, false, &p_ids, &np);
    if (rc == 0) rc = encode(c, output, false, true, &r_ids, &nr);
    free(prompt);
    if (rc == 0) {
        size_t n = np + nr;
        if (n > (size_t)c->seq_len) {
            drop_too_long(c->ds, n);
        } else {
            int32_t *ids = xmalloc(n * sizeof *ids);
            uint8_t *labels = xcalloc(n, 1);
            memcpy(ids, p_ids, np * sizeof *ids);
            memcpy(ids + np, r_ids, nr * sizeof *ids);
            memset(labels + np, 1, nr);
            push(c->ds, ids, labels, (int)n);
            free(ids);
            free(labels);
        }
        c->ds->rows++;
    }
    free(p_ids);
    free(r_ids);
    return rc;
}

static int add_chat(const LoadContext *c, const json_t *row) {
    int32_t *ids;
    uint8_t *labels;
    size_t n;
    if (chat_sft_example(&c->chat, row, &ids, &labels, &n) != 0) return -1;
    if (n > (size_t)c->seq_len)
        drop_too_long(c->ds, n);
    else if (n >= 2)
        push(c->ds, ids, labels, (int)n);
    c->ds->rows++;
    free(ids);
    free(labels);
    return 0;
}

static int add_row(void *ctx, const json_t *row) {
    const LoadContext *c = ctx;
    switch (c->type) {
    case SFT_COMPLETION:
        return add_completion(c, row);
    case SFT_ALPACA:
        return add_alpaca(c, row);
    case SFT_CHAT:
        return add_chat(c, row);
    }
    return -1;
}

int sft_dataset_load(SftDataset *ds, const TrainConfig *cfg, const Tokenizer *tok, int32_t eos_id) {
    memset(ds, 0, sizeof *ds);
    ds->part_rows =
        xcalloc((size_t)(cfg->n_datasets > 0 ? cfg->n_datasets : 1), sizeof *ds->part_rows);
    ds->n_parts = cfg->n_datasets;
    for (int d = 0; d < cfg->n_datasets; d++) {
        const DatasetConfig *dc = &cfg->datasets[d];
        size_t rows_before = ds->rows;
        LoadContext c = {ds, tok, eos_id, cfg->sequence_len, SFT_COMPLETION, {0}};
        const char *type = dc->type ? dc->type : "";
        if (strcmp(type, "completion") == 0) {
            c.type = SFT_COMPLETION;
        } else if (strcmp(type, "alpaca") == 0) {
            c.type = SFT_ALPACA;
        } else if (strcmp(type, "chat_template") == 0) {
            c.type = SFT_CHAT;
            if (chat_sft_init(&c.chat, cfg, dc, d, tok, eos_id) != 0) {
                sft_dataset_free(ds);
                return -1;
            }
        } else {
            sft_dataset_free(ds);
            return err_set("%s:%d: datasets[%d].type: \"%s\" is not supported for supervised "
                           "fine-tuning yet (chat_template, completion, alpaca)",
                           cfg->source, dc->line, d, type);
        }
        int rc = dataset_rows_foreach(dc, add_row, &c);
        ds->part_rows[d] = ds->rows - rows_before;
        if (c.type == SFT_CHAT) chat_sft_free(&c.chat);
        if (rc != 0) {
            sft_dataset_free(ds);
            return -1;
        }
    }
    if (ds->n == 0) {
        size_t dropped = ds->dropped_too_long, shortest = ds->shortest_dropped;
        sft_dataset_free(ds);
        if (dropped)
            return err_set("%s: every example is longer than sequence_len %lld tokens (%zu "
                           "dropped, the shortest has %zu): raise sequence_len or shorten them",
                           cfg->source, (long long)cfg->sequence_len, dropped, shortest);
        return err_set("%s: the datasets hold no usable example (no row yields two or more tokens)",
                       cfg->source);
    }
    return 0;
}

void sft_dataset_free(SftDataset *ds) {
    for (size_t i = 0; i < ds->n; i++) {
        free(ds->items[i].ids);
        free(ds->items[i].labels);
    }
    free(ds->items);
    free(ds->part_rows);
    memset(ds, 0, sizeof *ds);
}

int sft_dataset_merge(SftDataset *ds, const TrainConfig *cfg) {
    if (ds->n_parts == 0) return 0; /* not from the loader: no rows to shuffle */
    size_t *order;
    if (dataset_merge_order(cfg, ds->part_rows, ds->n_parts, &order) != 0) return -1;
    if (!order) return 0;
    /* item_of[row]: the kept example of a tokenised row, or SIZE_MAX for a dropped one */
    size_t *item_of = xmalloc((ds->rows ? ds->rows : 1) * sizeof *item_of);
    for (size_t r = 0; r < ds->rows; r++)
        item_of[r] = SIZE_MAX;
    for (size_t i = 0; i < ds->n; i++)
        item_of[ds->items[i].row] = i;
    size_t *kept = xmalloc((ds->n ? ds->n : 1) * sizeof *kept), w = 0;
    for (size_t k = 0; k < ds->rows; k++)
        if (item_of[order[k]] != SIZE_MAX) kept[w++] = item_of[order[k]];
    dataset_permute(ds->items, ds->n, sizeof *ds->items, kept);
    free(kept);
    free(item_of);
    free(order);
    return 0;
}

int tokenizer_special_ids(const char *tok_dir, const Tokenizer *tok, int32_t *eos, int32_t *pad) {
    ChatTemplateSource src;
    *eos = *pad = -1;
    if (chat_template_source_load(tok_dir, &src) != 0) return -1;
    const char *e = json_string_value(json_object_get(src.special_tokens, "eos_token"));
    const char *p = json_string_value(json_object_get(src.special_tokens, "pad_token"));
    if (e) *eos = tokenizer_token_to_id(tok, e, strlen(e));
    if (p) *pad = tokenizer_token_to_id(tok, p, strlen(p));
    chat_template_source_free(&src);
    if (*pad < 0) *pad = *eos >= 0 ? *eos : 0;
    return 0;
}
