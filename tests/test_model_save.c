/* Saving weights: the file rlhf.c writes for a model loaded from a transformers checkpoint is
 * byte-identical to the one transformers' save_pretrained wrote (fp32 fixtures), and a bf16
 * checkpoint re-saved as BF16 is byte-identical too (fp32 holds bf16 values exactly). */
#include "common/error.h"
#include "common/fileio.h"
#include "harness.h"
#include "model/model.h"

#include <stdlib.h>
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

int main(void) {
    check_identical("tests/fixtures/models/llama_tied", ST_F32);
    check_identical("tests/fixtures/models/qwen3_qknorm", ST_F32);
    check_identical("tests/fixtures/models/llama_rope_llama3", ST_F32);
    check_identical("tests/fixtures/models/llama_bf16", ST_BF16);
    return harness_finish("test_model_save");
}
