/* One fuzz target per parser. Each body takes arbitrary bytes, runs the project's real parsing
 * API on them and frees everything; a crash, sanitizer report, leak or hang is a finding, a
 * parse error is not. The table drives both libFuzzer (fuzz/libfuzzer_main.c, one binary per
 * target) and tests/test_fuzz_regressions.c (every seed and regression input, normal build). */
#ifndef RLHF_FUZZ_TARGETS_H
#define RLHF_FUZZ_TARGETS_H

#include <stddef.h>
#include <stdint.h>

typedef int (*FuzzFn)(const uint8_t *data, size_t size);

typedef struct {
    const char *name; /* build-fuzz/fuzz_<name>, fuzz/corpus dirs, fuzz_regressions/<name> */
    FuzzFn fn;
    /* Seed inputs: glob patterns relative to the source tree. "key@pattern" takes the string
     * member `key` of each matching JSON file (chat template fixtures hold the template). */
    const char *seeds[6];
} FuzzTarget;

int fuzz_json(const uint8_t *data, size_t size);
int fuzz_model_config(const uint8_t *data, size_t size);
int fuzz_tokenizer_json(const uint8_t *data, size_t size);
int fuzz_tokenizer_encode(const uint8_t *data, size_t size);
int fuzz_chat_template(const uint8_t *data, size_t size);
int fuzz_safetensors(const uint8_t *data, size_t size);
int fuzz_train_config(const uint8_t *data, size_t size);
int fuzz_dataset_rows(const uint8_t *data, size_t size);
int fuzz_lora_config(const uint8_t *data, size_t size);

extern const FuzzTarget fuzz_targets[];
extern const size_t n_fuzz_targets;

/* Calls fn(ctx, name, bytes, len) for every seed of t; stops at the first nonzero return and
 * returns it. Returns -1 when a seed cannot be read. */
int fuzz_seeds_foreach(const FuzzTarget *t,
                       int (*fn)(void *ctx, const char *name, const uint8_t *data, size_t len),
                       void *ctx);

#endif
