#include "data/prompt_completion.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"

#include <stdlib.h>
#include <string.h>

static int read_ids(const json_t *row, const char *key, int vocab_size, int32_t **ids, int *len) {
    const json_t *arr = json_object_get(row, key);
    if (!arr)
        return err_set("missing field \"%s\" (an array of token ids; or give \"prompt\" and "
                       "\"completion\" as text)",
                       key);
    if (!json_is_array(arr)) return err_set("field \"%s\": expected an array of token ids", key);
    size_t n = json_array_size(arr);
    if (n > (1u << 24)) return err_set("field \"%s\": %zu tokens is too long", key, n);
    *ids = xrealloc(*ids, (n + (size_t)*len) * sizeof **ids);
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        if (json_as_int64(json_array_get(arr, i), &v) != 0)
            return err_set("field \"%s\"[%zu]: expected an integer token id", key, i);
        if (v < 0 || v >= vocab_size)
            return err_set("field \"%s\"[%zu]: token id %lld is outside the vocabulary [0, %d)",
                           key, i, (long long)v, vocab_size);
        (*ids)[*len + (int)i] = (int32_t)v;
    }
    *len += (int)n;
    return 0;
}

typedef struct {
    int vocab_size;
    const Tokenizer *tok;
    const char *no_tokenizer_reason;
} LineContext;

/* Appends the tokens of row[key] (a string) to pc->ids. */
static int read_text(const json_t *row, const char *key, bool add_special, const LineContext *ctx,
                     int32_t **ids, int *len) {
    const json_t *v = json_object_get(row, key);
    if (!v) return err_set("missing field \"%s\" (text)", key);
    if (!json_is_string(v)) return err_set("field \"%s\": expected a string", key);
    if (!ctx->tok)
        return err_set("field \"%s\": text input needs a tokenizer (%s)", key,
                       ctx->no_tokenizer_reason);
    int32_t *piece;
    size_t n;
    if (tokenizer_encode(ctx->tok, json_string_value(v), json_string_length(v), add_special, &piece,
                         &n) != 0)
        return err_prefix("field \"%s\"", key);
    int rc = 0;
    *ids = xrealloc(*ids, (n + (size_t)*len + 1) * sizeof **ids);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (piece[i] >= ctx->vocab_size)
            rc = err_set("field \"%s\": the tokenizer gave id %d, outside the model's vocabulary "
                         "[0, %d)",
                         key, piece[i], ctx->vocab_size);
        (*ids)[*len + (int)i] = piece[i];
    }
    if (rc == 0) *len += (int)n;
    free(piece);
    return rc;
}

static int parse_line(PromptCompletion *pc, const char *text, size_t len, const LineContext *ctx) {
    json_t *row;
    if (json_load_text(text, len, NULL, &row) != 0) return -1;
    int rc = -1;
    int total = 0;
    if (!json_is_object(row)) {
        err_set("expected a JSON object with prompt_ids and completion_ids (or prompt and "
                "completion as text)");
        goto done;
    }
    bool as_text = !json_object_get(row, "prompt_ids") && json_object_get(row, "prompt");
    if (as_text ? read_text(row, "prompt", true, ctx, &pc->ids, &total)
                : read_ids(row, "prompt_ids", ctx->vocab_size, &pc->ids, &total))
        goto done;
    pc->prompt_len = total;
    if (pc->prompt_len == 0) {
        err_set("field \"%s\": must give at least one token (the first completion token is "
                "predicted from it)",
                as_text ? "prompt" : "prompt_ids");
        goto done;
    }
    if (as_text ? read_text(row, "completion", false, ctx, &pc->ids, &total)
                : read_ids(row, "completion_ids", ctx->vocab_size, &pc->ids, &total))
        goto done;
    pc->completion_len = total - pc->prompt_len;
    if (pc->completion_len == 0) {
        err_set("field \"%s\": must give at least one token",
                as_text ? "completion" : "completion_ids");
        goto done;
    }
    rc = 0;
done:
    json_decref(row);
    return rc;
}

static bool is_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return false;
    return true;
}

int prompt_completion_read_jsonl(PromptCompletionSet *set, const char *path, int vocab_size,
                                 const Tokenizer *tok, const char *no_tokenizer_reason) {
    memset(set, 0, sizeof *set);
    LineContext ctx = {vocab_size, tok, no_tokenizer_reason ? no_tokenizer_reason : "none given"};
    char *text;
    size_t len;
    if (read_file(path, &text, &len) != 0) return -1;
    size_t cap = 0;
    int line = 0;
    for (size_t pos = 0; pos < len;) {
        line++;
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - start) : len - pos;
        pos += n + 1;
        if (is_blank(start, n)) continue;
        if (set->n == cap) {
            cap = cap ? 2 * cap : 64;
            set->items = xrealloc(set->items, cap * sizeof *set->items);
        }
        PromptCompletion *pc = &set->items[set->n];
        memset(pc, 0, sizeof *pc);
        pc->line = line;
        set->n++;
        if (parse_line(pc, start, n, &ctx) != 0) {
            err_prefix("%s:%d", path, line);
            free(text);
            prompt_completion_free(set);
            return -1;
        }
    }
    free(text);
    if (set->n == 0) return err_set("%s: no examples (the file is empty)", path);
    return 0;
}

void prompt_completion_free(PromptCompletionSet *set) {
    for (size_t i = 0; i < set->n; i++)
        free(set->items[i].ids);
    free(set->items);
    memset(set, 0, sizeof *set);
}
