/* A run reproduced from its seed alone (issue 34): `rlhf train` on a YAML with seed: 11 against
 * TRL's DPOTrainer with the same seed, LoRA and data (tests/fixtures/seeded_run/dpo_lora.json,
 * tools/reference/make_seeded_run_fixtures.py), with nothing aligned by hand: TRL's shuffled
 * batches and PEFT's fresh adapter must come out of the seed as they do in TRL. Every metric TRL
 * logs for the 3 steps must be logged, equal to 1e-4. The TRL script hands the trainer the file's
 * rows in order, so the YAML turns off Axolotl's merged-dataset shuffle
 * (shuffle_merged_datasets: false; test_dataset_order checks that shuffle). */
#include "cli/commands.h"
#include "common/error.h"
#include "harness.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

int main(void) {
    json_error_t jerr;
    json_t *ref =
        json_load_file(harness_source_path("tests/fixtures/seeded_run/dpo_lora.json"), 0, &jerr);
    if (!ref) {
        fprintf(stderr, "dpo_lora.json: %s (line %d)\n", jerr.text, jerr.line);
        return 1;
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
             "shuffle_merged_datasets: false\n"
             "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_dropout: 0.0\n"
             "lora_target_linear: true\n",
             model, pairs);
    char config[2048], out[2048];
    snprintf(config, sizeof config, "%s", harness_tmp_path("dpo.yaml"));
    snprintf(out, sizeof out, "%s", harness_tmp_path("out"));
    harness_write_file(config, text, strlen(text));
    char *args[] = {config, "--output_dir", out};
    CHECK(cli_train(3, args) == CLI_EXIT_OK, "rlhf train: %s", err_msg());

    const json_t *history = json_object_get(ref, "log_history");
    CHECK(json_array_size(history) == 3, "TRL logged %zu steps", json_array_size(history));
    harness_check_log_history(out, history, NULL);
    json_decref(ref);
    return harness_finish("test_seeded_run");
}
