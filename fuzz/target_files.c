/* Parsers that insist on a path: each input is written to a private temp directory first. */
#include "common/fileio.h"
#include "config/train_config.h"
#include "data/dataset_rows.h"
#include "fuzz_util.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/lora.h"
#include "targets.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int fuzz_safetensors(const uint8_t *data, size_t size) {
    char path[4096];
    fuzz_write_file("model.safetensors", data, size, path);
    SafetensorsFile f;
    if (safetensors_open(&f, path) != 0) return 0;
    /* Converting reads every byte the header claims: the bounds checks are what is tested. */
    for (size_t i = 0; i < f.n_tensors; i++) {
        const SafetensorsTensor *t = &f.tensors[i];
        if (safetensors_find(&f, t->name) == NULL) abort(); /* the index must find every name */
        float *out = malloc((t->numel > 0 ? (size_t)t->numel : 1) * sizeof *out);
        if (out) safetensors_to_f32(t, out);
        free(out);
    }
    safetensors_close(&f);
    return 0;
}

int fuzz_train_config(const uint8_t *data, size_t size) {
    char path[4096];
    fuzz_write_file("config.yaml", data, size, path);
    TrainConfig cfg;
    if (train_config_load(&cfg, path, NULL, 0) == 0) train_config_free(&cfg);
    return 0;
}

static int count_row(void *ctx, const json_t *row) {
    (*(size_t *)ctx)++;
    return 0;
}

int fuzz_dataset_rows(const uint8_t *data, size_t size) {
    char path[4096];
    fuzz_write_file("data.jsonl", data, size, path);
    DatasetConfig dc;
    memset(&dc, 0, sizeof dc);
    dc.path = path;
    size_t rows = 0;
    dataset_rows_foreach(&dc, count_row, &rows);
    return 0;
}

/* adapter_config.json against a fixed base model and its matching adapter weights, so that a
 * config that parses goes on to the shape checks against real tensors. */
int fuzz_lora_config(const uint8_t *data, size_t size) {
    static ModelConfig base;
    static bool loaded;
    char path[4096];
    if (!loaded) {
        char *st;
        size_t len;
        if (model_config_load(&base, fuzz_source_path("tests/fixtures/models/qwen2_bias")) != 0 ||
            read_file(fuzz_source_path("tests/fixtures/lora/qwen2_qv/adapter_model.safetensors"),
                      &st, &len) != 0)
            abort();
        fuzz_write_file("adapter_model.safetensors", (const uint8_t *)st, len, path);
        free(st);
        loaded = true;
    }
    fuzz_write_file("adapter_config.json", data, size, path);
    LoraAdapter a;
    if (lora_load(&a, &base, fuzz_tmpdir()) == 0) lora_free(&a);
    return 0;
}
