/* Saving weights: the file rlhf.c writes for a model loaded from a transformers checkpoint is
 * byte-identical to the one transformers' save_pretrained wrote (fp32 fixtures), and a bf16
 * checkpoint re-saved as BF16 is byte-identical too (fp32 holds bf16 values exactly). */
#include "common/error.h"
#include "common/fileio.h"
#include "harness.h"
#include "model/model.h"

#include "common/json_util.h"

#include <stdbool.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

static void check_identical(const char *fixture, SafetensorsDtype dtype) {
    char dir[2048], saved[4096], original[4096];
    snprintf(dir, sizeof dir, "%s", harness_source_path(fixture));
    snprintf(original, sizeof original, "%s/model.safetensors", dir);
    snprintf(saved, sizeof saved, "%s/%s.safetensors", harness_tmpdir(), strrchr(fixture, '/') + 1);
    Model m;
    CHECK(model_load(&m, dir) == 0, "load %s: %s", fixture, err_msg());
    CHECK(model_save_safetensors(&m, saved, dtype) == 0, "save: %s", err_msg());
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(read_file(original, &a, &na) == 0 && read_file(saved, &b, &nb) == 0, "read back");
    CHECK(na == nb && a && b && memcmp(a, b, na) == 0,
          "%s: %zu bytes written vs %zu from transformers", fixture, nb, na);
    free(a);
    free(b);
    model_free(&m);
}

/* Sharded saving: the 2-shard fixture re-saved with the limit transformers used gives the same
 * shard files and index, byte for byte; a limit below the embedding's size reproduces
 * transformers' split (the oversized tensor alone, the open shard continuing past it); and a
 * later single-file save removes the stale shards. */
/* Puts the fixture's config.json into dir, so that dir loads as a model. */
static void copy_config(const char *fixture, const char *dir) {
    char from[4096], to[4096];
    snprintf(from, sizeof from, "%s/config.json", harness_source_path(fixture));
    snprintf(to, sizeof to, "%s/config.json", dir);
    char *text = NULL;
    size_t len = 0;
    CHECK(read_file(from, &text, &len) == 0 && write_file_atomic(to, text, len) == 0,
          "copy config");
    free(text);
}

static void test_sharded_save(void) {
    Model m;
    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/llama_sharded")) == 0, "%s",
          err_msg());
    char dir[2048];
    snprintf(dir, sizeof dir, "%s/sharded", harness_tmpdir());
    mkdir(dir, 0755);
    CHECK(model_save_weights(&m, dir, ST_F32, 54000) == 0, "save: %s", err_msg()); /* "54KB" */
    const char *files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                           "model.safetensors.index.json"};
    for (int i = 0; i < 3; i++) {
        char ours[4096], theirs[4096];
        snprintf(ours, sizeof ours, "%s/%s", dir, files[i]);
        snprintf(theirs, sizeof theirs, "%s/%s",
                 harness_source_path("tests/fixtures/models/llama_sharded"), files[i]);
        CHECK(harness_same_file(ours, theirs), "%s is byte-identical to transformers'", files[i]);
    }
    copy_config("tests/fixtures/models/llama_sharded", dir);
    Model back;
    CHECK(model_load(&back, dir) == 0 && memcmp(back.params, m.params, m.n_params * 4) == 0,
          "the 2-shard save loads back to the same weights: %s", err_msg());
    model_free(&back);
    /* back to one file: the shards and the index go */
    CHECK(model_save_weights(&m, dir, ST_F32, MODEL_DEFAULT_MAX_SHARD_BYTES) == 0, "%s", err_msg());
    char path[4096];
    snprintf(path, sizeof path, "%s/model-00001-of-00002.safetensors", dir);
    CHECK(!file_exists(path), "stale shard removed");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK(!file_exists(path), "stale index removed");
    model_free(&m);

    CHECK(model_load(&m, harness_source_path("tests/fixtures/models/llama_tied")) == 0, "%s",
          err_msg());
    snprintf(dir, sizeof dir, "%s/sharded10k", harness_tmpdir());
    mkdir(dir, 0755);
    CHECK(model_save_weights(&m, dir, ST_F32, 10000) == 0, "save: %s", err_msg());
    json_t *ours = NULL, *theirs = NULL;
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    CHECK(json_load_path(path, &ours) == 0, "%s", err_msg());
    CHECK(json_load_path(harness_source_path("tests/fixtures/shards/llama_tied_10KB.index.json"),
                         &theirs) == 0,
          "%s", err_msg());
    CHECK(json_equal(json_object_get(ours, "weight_map"), json_object_get(theirs, "weight_map")),
          "weight_map equals transformers' for a 10 KB limit");
    json_decref(ours);
    json_decref(theirs);
    copy_config("tests/fixtures/models/llama_tied", dir);
    Model again;
    CHECK(model_load(&again, dir) == 0 && memcmp(again.params, m.params, m.n_params * 4) == 0,
          "the 11-shard save loads back to the same weights");
    model_free(&again);
    model_free(&m);
}

int main(void) {
    test_sharded_save();
    check_identical("tests/fixtures/models/llama_tied", ST_F32);
    check_identical("tests/fixtures/models/qwen3_qknorm", ST_F32);
    check_identical("tests/fixtures/models/llama_rope_llama3", ST_F32);
    check_identical("tests/fixtures/models/llama_bf16", ST_BF16);
    check_identical("tests/fixtures/models/phi3_longrope", ST_F32); /* fused tensors, their order */
    check_identical("tests/fixtures/models/smollm3_window", ST_F32); /* 4 layers, biases, untied */
    check_identical("tests/fixtures/models/gemma2_tiny",
                    ST_F32); /* four norms a layer, their order */
    check_identical("tests/fixtures/models/gemma3_tiny", ST_F32); /* and q/k norms after o_proj */
    return harness_finish("test_model_save");
}
