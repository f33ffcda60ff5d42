/* Encoding throughput of the C tokenizer on one thread.
 *
 *   build/tokenize_bench TOKENIZER_DIR DOCS.jsonl [REPEATS]
 *
 * DOCS.jsonl holds one {"text": "..."} per line. Every document is encoded with
 * add_special_tokens = false, once to warm up (the word cache, like the `tokenizers` one, then
 * holds the frequent words) and then REPEATS times (default 3) timed. Prints one JSON line:
 * {"docs", "bytes", "tokens", "seconds" (best pass), "tokens_per_s", "mb_per_s", "ids_hash"}.
 * ids_hash (FNV-1a over all ids) lets the driver check that both sides produced the same ids.
 * bench/tokenize_bench.py runs this next to the `tokenizers` library on the same text. */
#include "common/error.h"
#include "common/fileio.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_DIR DOCS.jsonl [REPEATS]\n", argv[0]);
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    if (repeats < 1) repeats = 1;
    Tokenizer tok;
    if (tokenizer_load(&tok, argv[1]) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    char *data;
    size_t len;
    if (read_file(argv[2], &data, &len) != 0) {
        fprintf(stderr, "%s\n", err_msg());
        return 1;
    }
    size_t n_docs = 0, cap = 0, bytes = 0;
    char **docs = NULL;
    size_t *lens = NULL;
    for (char *line = data; line < data + len;) {
        char *end = memchr(line, '\n', (size_t)(data + len - line));
        if (!end) end = data + len;
        if (end > line) {
            json_error_t jerr;
            json_t *j = json_loadb(line, (size_t)(end - line), JSON_ALLOW_NUL, &jerr);
            const json_t *t = j ? json_object_get(j, "text") : NULL;
            if (!json_is_string(t)) {
                fprintf(stderr, "%s: line %zu: expected {\"text\": ...}\n", argv[2], n_docs + 1);
                return 1;
            }
            if (n_docs == cap) {
                cap = cap ? cap * 2 : 1024;
                docs = realloc(docs, cap * sizeof *docs);
                lens = realloc(lens, cap * sizeof *lens);
            }
            lens[n_docs] = json_string_length(t);
            docs[n_docs] = malloc(lens[n_docs] + 1);
            memcpy(docs[n_docs], json_string_value(t), lens[n_docs] + 1);
            bytes += lens[n_docs];
            n_docs++;
            json_decref(j);
        }
        line = end + 1;
    }
    free(data);

    double best = 1e30;
    size_t tokens = 0;
    uint64_t hash = 1469598103934665603ull;
    for (int pass = 0; pass <= repeats; pass++) {
        double t0 = now();
        size_t count = 0;
        for (size_t i = 0; i < n_docs; i++) {
            int32_t *ids;
            size_t n;
            if (tokenizer_encode(&tok, docs[i], lens[i], false, &ids, &n) != 0) {
                fprintf(stderr, "doc %zu: %s\n", i, err_msg());
                return 1;
            }
            if (pass == 0)
                for (size_t k = 0; k < n; k++)
                    hash = (hash ^ (uint32_t)ids[k]) * 1099511628211ull;
            count += n;
            free(ids);
        }
        double dt = now() - t0;
        if (pass > 0 && dt < best) best = dt;
        tokens = count;
    }
    printf("{\"docs\": %zu, \"bytes\": %zu, \"tokens\": %zu, \"seconds\": %.6f, "
           "\"tokens_per_s\": %.1f, \"mb_per_s\": %.3f, \"ids_hash\": \"%016llx\"}\n",
           n_docs, bytes, tokens, best, tokens / best, bytes / best / 1e6,
           (unsigned long long)hash);
    for (size_t i = 0; i < n_docs; i++)
        free(docs[i]);
    free(docs);
    free(lens);
    tokenizer_free(&tok);
    return 0;
}
