/* tokenizer.json parsing, and encoding/decoding arbitrary bytes with fixture tokenizers. */
#include "fuzz_util.h"
#include "targets.h"
#include "tokenizer/tokenizer.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Encodes and decodes `text` both ways; errors are fine, crashes and leaks are not. */
static void exercise(const Tokenizer *tok, const char *text, size_t len, bool special) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (tokenizer_encode(tok, text, len, special, &ids, &n) != 0) return;
    for (int skip = 0; skip < 2; skip++) {
        char *out = NULL;
        if (tokenizer_decode(tok, ids, n, skip, &out, NULL) == 0) free(out);
    }
    free(ids);
}

int fuzz_tokenizer_json(const uint8_t *data, size_t size) {
    Tokenizer tok;
    if (tokenizer_load_json(&tok, (const char *)data, size, "fuzz") == 0) {
        static const char text[] = "Hello, world! 123 héllo\n\t<|im_end|>";
        exercise(&tok, text, sizeof text - 1, true);
    }
    tokenizer_free(&tok);
    return 0;
}

/* One of each model kind (byte-level BPE, SentencePiece BPE, the misc feature sets). Loaded
 * on first use and kept: static, so LeakSanitizer sees them as reachable. */
static const char *const fixtures[] = {
    "tests/fixtures/tokenizers/qwen2_bytelevel/tokenizer.json",
    "tests/fixtures/tokenizers/llama2_sp_legacy/tokenizer.json",
    "tests/fixtures/tokenizers/bytelevel_misc/tokenizer.json",
    "tests/fixtures/tokenizers/sp_misc/tokenizer.json",
    "tests/fixtures/tokenizers/components_misc/tokenizer.json",
};
enum { N_FIXTURES = sizeof fixtures / sizeof fixtures[0] };
static Tokenizer toks[N_FIXTURES];

/* The first byte picks the tokenizer, add_special_tokens (0x80) and whether the rest is text
 * to encode or raw int32 ids to decode (0x40: decode must skip ids outside the vocabulary). */
int fuzz_tokenizer_encode(const uint8_t *data, size_t size) {
    static bool loaded;
    if (!loaded) {
        for (int i = 0; i < N_FIXTURES; i++)
            if (tokenizer_load(&toks[i], fuzz_source_path(fixtures[i])) != 0) abort();
        loaded = true;
    }
    if (size == 0) return 0;
    const Tokenizer *tok = &toks[(data[0] & 0x3f) % N_FIXTURES];
    if (data[0] & 0x40) {
        size_t n = (size - 1) / sizeof(int32_t);
        int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
        memcpy(ids, data + 1, n * sizeof *ids);
        char *out = NULL;
        if (tokenizer_decode(tok, ids, n, data[0] & 0x80, &out, NULL) == 0) free(out);
        free(ids);
        return 0;
    }
    exercise(tok, (const char *)data + 1, size - 1, data[0] & 0x80);
    return 0;
}
