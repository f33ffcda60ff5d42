#include "data/prompt_completion.h"

#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"

#include <stdlib.h>
#include <string.h>

static int read_ids(const json_t *row, const char *key, int vocab_size, int32_t **ids, int *len) {
    const json_t *arr = json_object_get(row, key);
    if (!arr) return err_set("missing field \"%s\" (an array of token ids)", key);
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

static int parse_line(PromptCompletion *pc, const char *text, size_t len, int vocab_size) {
    json_t *row;
    if (json_load_text(text, len, NULL, &row) != 0) return -1;
    int rc = -1;
    int total = 0;
    if (!json_is_object(row)) {
        err_set("expected a JSON object with prompt_ids and completion_ids");
        goto done;
    }
    if (read_ids(row, "prompt_ids", vocab_size, &pc->ids, &total) != 0) goto done;
    pc->prompt_len = total;
    if (pc->prompt_len == 0) {
        err_set("field \"prompt_ids\": must hold at least one token (the first completion token "
                "is predicted from it)");
        goto done;
    }
    if (read_ids(row, "completion_ids", vocab_size, &pc->ids, &total) != 0) goto done;
    pc->completion_len = total - pc->prompt_len;
    if (pc->completion_len == 0) {
        err_set("field \"completion_ids\": must hold at least one token");
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

int prompt_completion_read_jsonl(PromptCompletionSet *set, const char *path, int vocab_size) {
    memset(set, 0, sizeof *set);
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
        if (parse_line(pc, start, n, vocab_size) != 0) {
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
