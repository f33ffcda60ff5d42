/* The output directory of `rlhf train` (train/output_dir.h): a LoRA run then a full fine-tune
 * into one directory is refused with a message naming what is there and both ways on, and
 * leaves the directory as it was; with --overwrite_output_dir true only the new run's files
 * remain (no adapter, no stale checkpoint, other files kept); the same config runs again into
 * its own directory; files no run record accounts for are refused; a resume with another
 * config names the keys that differ, and one with another max_steps goes on. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/json_util.h"
#include "harness.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

static char config[4096], out[4096];

static void write_config(void) {
    char rows[1 << 14];
    size_t n = 0;
    for (int i = 0; i < 16; i++)
        n += (size_t)snprintf(rows + n, sizeof rows - n,
                              "{\"instruction\": \"What is %d plus %d?\", \"input\": \"\", "
                              "\"output\": \"%d\"}\n",
                              i, i, 2 * i);
    harness_write_file(harness_tmp_path("rows.jsonl"), rows, n);
    char text[4096];
    int len = snprintf(text, sizeof text,
                       "base_model: %s\ndatasets:\n  - path: %s\n    type: alpaca\n"
                       "sequence_len: 128\nmicro_batch_size: 4\nmax_steps: 2\nlearning_rate: 1e-3\n"
                       "logging_steps: 1\nsave_steps: 1\ndataset_prepared_path: %s\n",
                       harness_source_path("tests/fixtures/models/llama_text"),
                       harness_tmp_path("rows.jsonl"), harness_tmp_path("prepared"));
    snprintf(config, sizeof config, "%s", harness_tmp_path("run.yaml"));
    harness_write_file(config, text, (size_t)len);
}

/* rlhf train config --output_dir out [more key value pairs] */
static int train(const char *const *kv, int n) {
    char *args[32] = {config, "--output_dir", out};
    for (int i = 0; i < 2 * n; i++)
        args[3 + i] = (char *)kv[i];
    return cli_train(3 + 2 * n, args);
}

static bool in_out(const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", out, name);
    return file_exists(path) || dir_exists(path);
}

/* The names in out, sorted and joined, to tell whether a refused run touched anything. */
static void listing(char *buf, size_t cap) {
    struct dirent **names;
    int n = scandir(out, &names, NULL, alphasort);
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s ", names[i]->d_name);
        free(names[i]);
    }
    if (n >= 0) free(names);
}

int main(void) {
    write_config();
    snprintf(out, sizeof out, "%s", harness_tmp_path("out"));

    /* a LoRA run with its checkpoints */
    const char *lora[] = {"--adapter", "lora", "--lora_r", "4", "--lora_target_linear", "true"};
    CHECK(train(lora, 3) == CLI_EXIT_OK, "LoRA run: %s", err_msg());
    CHECK(in_out("adapter_config.json") && in_out("checkpoint-2"), "the LoRA run's files");
    harness_write_file(harness_tmp_path("out/notes.txt"), "mine\n", 5);

    /* the same config again into its own directory goes on */
    CHECK(train(lora, 3) == CLI_EXIT_OK, "the same config again: %s", err_msg());

    /* a full fine-tune into it is refused, and nothing there changes */
    char before[8192], after[8192], adapter[4400];
    listing(before, sizeof before);
    snprintf(adapter, sizeof adapter, "%s/adapter_model.safetensors", out);
    char *weights = NULL;
    size_t weights_len = 0;
    CHECK(read_file(adapter, &weights, &weights_len) == 0, "%s", err_msg());
    const char *full[] = {"--learning_rate", "2e-3"};
    CHECK(train(full, 1) == CLI_EXIT_FAILURE, "a full fine-tune into the LoRA run's directory");
    const char *msg = err_msg();
    CHECK(strstr(msg, "holds another run") && strstr(msg, "adapter_config.json") &&
              strstr(msg, "checkpoint-2") && strstr(msg, "--overwrite_output_dir true") &&
              strstr(msg, "--output_dir DIR") && strstr(msg, "adapter (\"lora\" -> unset)") &&
              strstr(msg, "learning_rate (0.001 -> 0.002)") &&
              strstr(msg, "what is trained (adapter -> model)"),
          "the message names what is there, what differs and the two ways on: %s", msg);
    listing(after, sizeof after);
    char *again = NULL;
    size_t again_len = 0;
    CHECK(strcmp(before, after) == 0 && read_file(adapter, &again, &again_len) == 0 &&
              again_len == weights_len && memcmp(again, weights, weights_len) == 0,
          "a refused run leaves the directory as it was (%s / %s)", before, after);
    free(weights);
    free(again);

    /* --overwrite_output_dir true: only the new run's files remain */
    const char *overwrite[] = {"--learning_rate",        "2e-3", "--save_steps", "0",
                               "--overwrite_output_dir", "true"};
    CHECK(train(overwrite, 3) == CLI_EXIT_OK, "overwrite: %s", err_msg());
    CHECK(!in_out("adapter_config.json") && !in_out("adapter_model.safetensors") &&
              !in_out("checkpoint-1") && !in_out("checkpoint-2"),
          "no adapter and no checkpoint of the LoRA run is left");
    CHECK(in_out("model.safetensors") && in_out("config.json") && in_out("metrics.jsonl"),
          "the new run's model");
    CHECK(in_out("notes.txt"), "a file no run writes is kept");
    json_t *record = NULL;
    char path[4400];
    snprintf(path, sizeof path, "%s/rlhf_run.json", out);
    CHECK(json_load_path(path, &record) == 0 &&
              strcmp(json_string_value(json_object_get(record, "kind")), "model") == 0,
          "the run record is the new run's");
    json_decref(record);

    /* files of a run with no record (an older rlhf.c, or HF's Trainer) are refused too */
    snprintf(out, sizeof out, "%s", harness_tmp_path("unrecorded"));
    CHECK(make_dirs(out) == 0, "%s", err_msg());
    harness_write_file(harness_tmp_path("unrecorded/model.safetensors"), "x", 1);
    CHECK(train(NULL, 0) == CLI_EXIT_FAILURE && strstr(err_msg(), "no rlhf_run.json") &&
              strstr(err_msg(), "model.safetensors"),
          "unrecorded run files: %s", err_msg());

    /* resuming: another config names what differs; another length goes on */
    snprintf(out, sizeof out, "%s", harness_tmp_path("first"));
    CHECK(train(NULL, 0) == CLI_EXIT_OK, "a run with checkpoints: %s", err_msg());
    char ckpt[4400];
    snprintf(ckpt, sizeof ckpt, "%s/checkpoint-1", out);
    snprintf(out, sizeof out, "%s", harness_tmp_path("resumed"));
    const char *changed[] = {
        "--resume_from_checkpoint", ckpt, "--learning_rate", "5e-4", "--trl.beta", "0.3"};
    CHECK(train(changed, 3) == CLI_EXIT_FAILURE && strstr(err_msg(), "another config") &&
              strstr(err_msg(), "learning_rate (0.001 -> 0.0005)") &&
              strstr(err_msg(), "trl (unset -> {\"beta\":0.3})"),
          "resume with another config: %s", err_msg());
    const char *longer[] = {"--resume_from_checkpoint", ckpt, "--max_steps", "3"};
    CHECK(train(longer, 2) == CLI_EXIT_OK, "resume with another max_steps: %s", err_msg());
    return harness_finish("test_output_dir");
}
