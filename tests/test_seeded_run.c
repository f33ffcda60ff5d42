/* A run reproduced from its seed alone (issue 34): `rlhf train` on a YAML with seed: 11 against
 * TRL's DPOTrainer with the same seed, LoRA and data (tests/fixtures/seeded_run/dpo_lora.json,
 * tools/reference/make_seeded_run_fixtures.py), with nothing aligned by hand: TRL's shuffled
 * batches and PEFT's fresh adapter must come out of the seed as they do in TRL. Every metric TRL
 * logs for the 3 steps must be logged, equal to 1e-4. Twice: the TRL script handing the trainer
 * the file's rows in order against the YAML with Axolotl's merged-dataset shuffle off
 * (shuffle_merged_datasets: false), and the script shuffling them first as Axolotl's
 * merge_datasets does (Dataset.shuffle(seed)) against the YAML as it is, shuffle on. */
#include "cli/commands.h"
#include "common/error.h"
#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

/* Runs `rlhf train` on the fixture's YAML (with `extra` appended) and compares every logged
 * step with the TRL run recorded in tests/fixtures/seeded_run/<fixture>. */
static void check_run(const char *fixture, const char *extra, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "tests/fixtures/seeded_run/%s", fixture);
    json_t *ref = harness_load_fixture_json(path);
    if (!ref) {
        CHECK(0, "%s: the fixture loads", fixture);
        return;
    }
    char model[1024], pairs[1024], text[4096];
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(pairs, sizeof pairs, "%s",
             harness_source_path("tests/fixtures/pref_train/pairs.jsonl"));
    /* TRL's DPOConfig of the fixture, as an Axolotl user writes it. */
    snprintf(text, sizeof text,
             "base_model: %s\nrl: dpo\nrl_beta: 0.1\ndatasets:\n  - path: %s\n"
             "sequence_len: 48\nmicro_batch_size: 2\ngradient_accumulation_steps: 2\n"
             "max_steps: 3\nlearning_rate: 5e-3\nlr_scheduler: linear\nwarmup_steps: 0\n"
             "weight_decay: 0.0\nmax_grad_norm: 1.0\nlogging_steps: 1\nseed: 11\n"
             "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_dropout: 0.0\n"
             "lora_target_linear: true\n%s",
             model, pairs, extra);
    char config[2048], out[2048], yaml[64];
    snprintf(yaml, sizeof yaml, "%s.yaml", name);
    snprintf(config, sizeof config, "%s", harness_tmp_path(yaml));
    snprintf(out, sizeof out, "%s", harness_tmp_path(name));
    harness_write_file(config, text, strlen(text));
    char *args[] = {config, "--output_dir", out};
    CHECK(cli_train(3, args) == CLI_EXIT_OK, "%s: rlhf train: %s", name, err_msg());

    const json_t *history = json_object_get(ref, "log_history");
    CHECK(json_array_size(history) == 3, "%s: TRL logged %zu steps", name,
          json_array_size(history));
    harness_check_log_history(out, history, NULL);
    json_decref(ref);
}

int main(void) {
    /* the TRL script's file order: Axolotl's merged-dataset shuffle off */
    check_run("dpo_lora.json", "shuffle_merged_datasets: false\n", "file-order");
    /* Axolotl's default order: the script shuffles the filtered rows as merge_datasets does */
    check_run("dpo_lora_axolotl_order.json", "", "axolotl-order");
    return harness_finish("test_seeded_run");
}
