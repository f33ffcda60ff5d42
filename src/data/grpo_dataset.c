#include "data/grpo_dataset.h"

#include "chat/chat_template.h"
#include "common/error.h"
#include "data/dataset_merge.h"
#include "data/dataset_rows.h"
#include "data/python_transform.h"
#include "data/template_choice.h"

#include <stdlib.h>
#include <string.h>

static int collect_row(void *ctx, const json_t *row) {
    json_array_append_new(ctx, json_deep_copy(row));
    return 0;
}

/* The rows of one dataset entry, after its transform when it names one. */
static int entry_rows(const TrainConfig *cfg, const DatasetConfig *dc, int index, json_t **out) {
    json_t *rows = json_array();
    if (dataset_rows_foreach(dc, collect_row, rows) != 0) {
        json_decref(rows);
        return -1;
    }
    if (!dc->type || !*dc->type) {
        *out = rows;
        return 0;
    }
    /* Axolotl loads GRPO rows through its dpo loader with the user's transform; rlhf.c's
     * built-in preference types make prompt/chosen/rejected rows, which are no GRPO prompts */
    if (!strchr(dc->type, '.')) {
        json_decref(rows);
        return err_set("%s:%d: datasets[%d].type: \"%s\" is not a GRPO transform (a Python "
                       "function module.fn, e.g. rewards.gsm8k_transform; leave type out when "
                       "the rows have a prompt column)",
                       cfg->source, dc->line, index, dc->type);
    }
    int rc = python_transform_rows(dc->type, cfg->raw, index, rows, out);
    json_decref(rows);
    return rc == 0 ? 0 : err_prefix("%s:%d: datasets[%d]", cfg->source, dc->line, index);
}

typedef struct {
    const Tokenizer *tok;
    ChatTemplate *tpl;
    json_t *special_tokens;
    const json_t *kwargs;
} PromptRenderer;

static int renderer_init(PromptRenderer *r, const TrainConfig *cfg, const Tokenizer *tok) {
    r->tok = tok;
    r->kwargs = cfg->grpo.chat_template_kwargs;
    ChatTemplateSource src = {0};
    char *text = NULL;
    int rc = chat_template_source_load(cfg->tokenizer_config, &src);
    if (rc == 0) r->special_tokens = json_incref(src.special_tokens);
    const char *choice = cfg->chat_template ? cfg->chat_template : "tokenizer_default";
    if (rc == 0) rc = template_choice_text(choice, cfg->chat_template_jinja, &src, &text);
    if (rc == 0) rc = chat_template_compile(text, strlen(text), &r->tpl);
    free(text);
    chat_template_source_free(&src);
    return rc;
}

static void renderer_free(PromptRenderer *r) {
    if (r->tpl) chat_template_free(r->tpl);
    json_decref(r->special_tokens);
}

static int tokenize_prompt(PromptRenderer *r, const TrainConfig *cfg, const json_t *prompt,
                           int32_t **ids, int *len) {
    size_t n = 0;
    if (json_is_string(prompt)) {
        if (tokenizer_encode(r->tok, json_string_value(prompt), json_string_length(prompt), true,
                             ids, &n) != 0)
            return -1;
    } else {
        if (!r->tpl && renderer_init(r, cfg, r->tok) != 0) return -1;
        ChatApplyArgs args = {.messages = prompt,
                              .add_generation_prompt = true,
                              .special_tokens = r->special_tokens,
                              .kwargs = r->kwargs};
        ChatRenderResult res;
        if (chat_template_apply(r->tpl, &args, &res) != 0) return -1;
        int rc = tokenizer_encode(r->tok, res.text, res.len, false, ids, &n);
        chat_render_result_free(&res);
        if (rc != 0) return -1;
    }
    *len = (int)n;
    return 0;
}

static bool is_messages(const json_t *v) {
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    size_t i;
    json_t *m;
    json_array_foreach(v, i, m) {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) return false;
    }
    return true;
}

/* Axolotl's merge_datasets (data/dataset_merge.h): GRPO drops no row for length, so every
 * row of every dataset is shuffled. */
static int merge_datasets(GrpoDataset *ds, const TrainConfig *cfg, const size_t *part_rows,
                          int n_parts) {
    size_t *order;
    if (dataset_merge_order(cfg, part_rows, n_parts, &order) != 0) return -1;
    if (!order) return 0;
    dataset_permute(ds->prompt_ids, ds->n, sizeof *ds->prompt_ids, order);
    dataset_permute(ds->prompt_lens, ds->n, sizeof *ds->prompt_lens, order);
    json_t *rows = json_array();
    for (size_t i = 0; i < ds->n; i++)
        json_array_append(rows, json_array_get(ds->rows, order[i]));
    json_decref(ds->rows);
    ds->rows = rows;
    free(order);
    return 0;
}

int grpo_dataset_load(GrpoDataset *ds, const TrainConfig *cfg, const DatasetConfig *list, int n,
                      const Tokenizer *tok, FILE *log) {
    memset(ds, 0, sizeof *ds);
    ds->rows = json_array();
    PromptRenderer r = {.tok = tok};
    int rc = 0;
    size_t *part_rows = xcalloc((size_t)(n > 0 ? n : 1), sizeof *part_rows);
    for (int d = 0; d < n && rc == 0; d++) {
        json_t *rows = NULL;
        rc = entry_rows(cfg, &list[d], d, &rows);
        size_t first = json_array_size(ds->rows);
        part_rows[d] = rows ? json_array_size(rows) : 0;
        if (rc == 0) json_array_extend(ds->rows, rows);
        json_decref(rows);
        size_t total = json_array_size(ds->rows);
        ds->prompt_ids = xrealloc(ds->prompt_ids, (total ? total : 1) * sizeof *ds->prompt_ids);
        ds->prompt_lens = xrealloc(ds->prompt_lens, (total ? total : 1) * sizeof *ds->prompt_lens);
        for (size_t i = first; i < total && rc == 0; i++) {
            const json_t *prompt = json_object_get(json_array_get(ds->rows, i), "prompt");
            bool chat = is_messages(prompt);
            if (!json_is_string(prompt) && !chat)
                rc = err_set("%s: row %zu: GRPO needs a \"prompt\" column: a string or a list of "
                             "{role, content} messages",
                             list[d].path, i - first + 1);
            else if (ds->n > 0 && chat != ds->conversational)
                rc = err_set("%s: row %zu: prompts mix strings and message lists", list[d].path,
                             i - first + 1);
            else if (tokenize_prompt(&r, cfg, prompt, &ds->prompt_ids[i], &ds->prompt_lens[i]))
                rc = err_prefix("%s: row %zu", list[d].path, i - first + 1);
            else if (ds->prompt_lens[i] == 0)
                rc =
                    err_set("%s: row %zu: the prompt gives no tokens", list[d].path, i - first + 1),
                free(ds->prompt_ids[i]);
            if (rc == 0) ds->conversational = chat, ds->n++;
        }
    }
    renderer_free(&r);
    if (rc == 0) rc = merge_datasets(ds, cfg, part_rows, n);
    free(part_rows);
    if (rc != 0) {
        grpo_dataset_free(ds);
        return -1;
    }
    fprintf(log, "%zu GRPO prompts (%s)\n", ds->n, ds->conversational ? "chat" : "text");
    return 0;
}

void grpo_dataset_free(GrpoDataset *ds) {
    for (size_t i = 0; i < ds->n; i++)
        free(ds->prompt_ids[i]);
    free(ds->prompt_ids);
    free(ds->prompt_lens);
    json_decref(ds->rows);
    memset(ds, 0, sizeof *ds);
}

void grpo_dataset_split(GrpoDataset *ds, const size_t *order, size_t n_move, GrpoDataset *out) {
    memset(out, 0, sizeof *out);
    out->rows = json_array();
    out->conversational = ds->conversational;
    out->prompt_ids = xmalloc((n_move ? n_move : 1) * sizeof *out->prompt_ids);
    out->prompt_lens = xmalloc((n_move ? n_move : 1) * sizeof *out->prompt_lens);
    bool *moved = xcalloc(ds->n ? ds->n : 1, 1);
    for (size_t k = 0; k < n_move; k++) {
        size_t i = order[k];
        moved[i] = true;
        json_array_append(out->rows, json_array_get(ds->rows, i));
        out->prompt_ids[k] = ds->prompt_ids[i];
        out->prompt_lens[k] = ds->prompt_lens[i];
    }
    out->n = n_move;
    json_t *kept = json_array();
    size_t w = 0;
    for (size_t i = 0; i < ds->n; i++) {
        if (moved[i]) continue;
        json_array_append(kept, json_array_get(ds->rows, i));
        ds->prompt_ids[w] = ds->prompt_ids[i];
        ds->prompt_lens[w++] = ds->prompt_lens[i];
    }
    json_decref(ds->rows);
    ds->rows = kept;
    ds->n = w;
    free(moved);
}
