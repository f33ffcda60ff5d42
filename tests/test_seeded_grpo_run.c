/* A GRPO run reproduced from its seed alone (issue 34): `rlhf train` on a YAML with seed: 11
 * against TRL 1.9's GRPOTrainer with the same seed, LoRA, prompts and Python reward
 * (tests/fixtures/seeded_run/grpo_lora.json, grpo_reward.py, grpo_prompts.jsonl;
 * tools/reference/make_seeded_run_fixtures.py), with nothing aligned by hand: TRL's prompt order
 * (RepeatSampler), PEFT's fresh adapter, the completions transformers' generate() samples
 * (torch.multinomial on the global generator) and the row shuffle must all come out of the seed
 * as they do in TRL. Every metric TRL logs for the 3 steps (but its wall time) must be logged,
 * equal to 1e-4 (relative to the larger of 1 and the value). The TRL script hands the trainer
 * the prompts in file order, so the YAML sets shuffle_merged_datasets: false. */
#include "cli/commands.h"
#include "common/error.h"
#include "common/fileio.h"
#include "harness.h"
#include "python/py_embed.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
    if (!py_embed_compiled()) {
        printf("test_seeded_grpo_run: SKIPPED: the run's reward is Python, and this build has "
               "no Python (RLHF_PYTHON)\n");
        return 77;
    }
    json_t *ref = harness_load_fixture_json("tests/fixtures/seeded_run/grpo_lora.json");
    if (!ref) return 1;
    /* the reward module beside the YAML, where `rlhf train` looks for it */
    char *py = NULL;
    size_t len = 0;
    CHECK(read_file(harness_source_path("tests/fixtures/seeded_run/grpo_reward.py"), &py, &len) ==
              0,
          "%s", err_msg());
    harness_write_file(harness_tmp_path("grpo_reward.py"), py, len);
    free(py);
    const json_t *k = json_object_get(ref, "config");
#define NUM(key) json_number_value(json_object_get(k, key))
    char model[1024], prompts[1024], text[4096];
    snprintf(model, sizeof model, "%s", harness_source_path("tests/fixtures/models/llama_text"));
    snprintf(prompts, sizeof prompts, "%s",
             harness_source_path("tests/fixtures/seeded_run/grpo_prompts.jsonl"));
    /* TRL's GRPOConfig of the fixture, as an Axolotl user writes it */
    snprintf(text, sizeof text,
             "base_model: %s\nrl: grpo\ndatasets:\n  - path: %s\n"
             "trl:\n  num_generations: %g\n  max_completion_length: %g\n  beta: %g\n"
             "  loss_type: %s\n  scale_rewards: %s\n  temperature: %g\n"
             "  reward_funcs: [grpo_reward.reward]\n"
             "micro_batch_size: %g\ngradient_accumulation_steps: %g\nlearning_rate: %g\n"
             "lr_scheduler: %s\nwarmup_steps: %g\nweight_decay: %g\nadam_beta1: %g\n"
             "adam_beta2: %g\nadam_epsilon: %g\nmax_grad_norm: %g\nmax_steps: %g\n"
             "logging_steps: %g\nseed: %g\nshuffle_merged_datasets: false\n"
             "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_dropout: 0.0\n"
             "lora_target_linear: true\n",
             model, prompts, NUM("num_generations"), NUM("max_completion_length"), NUM("beta"),
             json_string_value(json_object_get(k, "loss_type")),
             json_string_value(json_object_get(k, "scale_rewards")), NUM("temperature"),
             NUM("per_device_train_batch_size"), NUM("gradient_accumulation_steps"),
             NUM("learning_rate"), json_string_value(json_object_get(k, "lr_scheduler_type")),
             NUM("warmup_steps"), NUM("weight_decay"), NUM("adam_beta1"), NUM("adam_beta2"),
             NUM("adam_epsilon"), NUM("max_grad_norm"), NUM("max_steps"), NUM("logging_steps"),
             NUM("seed"));
#undef NUM
    char config[2048], out[2048];
    snprintf(config, sizeof config, "%s", harness_tmp_path("grpo.yaml"));
    snprintf(out, sizeof out, "%s", harness_tmp_path("out"));
    harness_write_file(config, text, strlen(text));
    char *args[] = {config, "--output_dir", out};
    CHECK(cli_train(3, args) == CLI_EXIT_OK, "rlhf train: %s", err_msg());

    const json_t *history = json_object_get(ref, "log_history");
    CHECK(json_array_size(history) == 3, "TRL logged %zu steps", json_array_size(history));
    int compared = harness_check_log_history(out, history, "step_time"); /* wall time */
    /* the sampled completions must have carried the comparison: rewards spread in a group */
    const json_t *first = json_array_get(history, 0);
    CHECK(compared >= 3 * 20 && json_number_value(json_object_get(first, "reward_std")) > 0.01,
          "%d values compared; TRL's first reward_std %g", compared,
          json_number_value(json_object_get(first, "reward_std")));
    json_decref(ref);
    return harness_finish("test_seeded_grpo_run");
}
