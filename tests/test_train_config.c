/* The YAML training config: the configs of axolotl-config.md §17 parse, defaults and overrides
 * apply, unknown keys warn with the nearest known key, and each bad input is one error naming
 * the file, the line and the key. */
#include "common/error.h"
#include "config/train_config.h"
#include "harness.h"
#include "kernels/cpu/kernels.h"

#include <dirent.h>
#include <math.h>
#include <string.h>

static const char *write_yaml(const char *name, const char *text) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", harness_tmpdir(), name);
    harness_write_file(path, text, strlen(text));
    return path;
}

static bool has_warning(const TrainConfig *c, const char *a, const char *b) {
    for (int i = 0; i < c->n_warnings; i++)
        if (strstr(c->warnings[i], a) && (!b || strstr(c->warnings[i], b))) return true;
    return false;
}

#define BASE "base_model: m\ndatasets:\n  - path: d.jsonl\n"

static void test_sft_config(void) {
    const char *path = write_yaml("sft.yaml", "base_model: models/tiny-arith\n"
                                              "datasets:\n"
                                              "  - path: data/train.jsonl\n"
                                              "    type: chat_template\n"
                                              "  - path: data/dir\n"
                                              "    data_files: [a.jsonl, b.jsonl]\n"
                                              "    split: train\n"
                                              "    type: alpaca\n"
                                              "learning_rate: \"2e-5\"\n"
                                              "micro_batch_size: 2\n"
                                              "gradient_accumulation_steps: 4\n"
                                              "lr_scheduler: linear\n"
                                              "warmup_ratio: 0.1\n"
                                              "bf16: auto\n"
                                              "resume_from_checkpoint: true\n"
                                              "learning_rat: 3\n"
                                              "flash_attention: true\n"
                                              "wandb_project: ~\n"
                                              "sample_packing: false\n");
    TrainConfig c;
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(strcmp(c.base_model, "models/tiny-arith") == 0 &&
              strcmp(c.tokenizer_config, c.base_model) == 0,
          "base_model, tokenizer_config default");
    CHECK(c.rl == RL_NONE, "no rl: SFT");
    CHECK(c.n_datasets == 2 && strcmp(c.datasets[0].type, "chat_template") == 0 &&
              c.datasets[0].ds_type == NULL && c.datasets[0].name == NULL &&
              strcmp(c.datasets[0].split, "train") == 0,
          "dataset 0");
    CHECK(c.datasets[1].n_data_files == 2 && strcmp(c.datasets[1].data_files[1], "b.jsonl") == 0,
          "data_files list");
    CHECK(c.learning_rate == 2e-5, "numeric string learning rate");
    CHECK(c.micro_batch_size == 2 && c.gradient_accumulation_steps == 4, "batch keys");
    CHECK(c.warmup_ratio == 0.1 && c.warmup_steps == -1, "warmup");
    CHECK(c.sequence_len == 512 && c.seed == 42 && c.max_grad_norm == 1.0 && c.max_steps == -1 &&
              c.max_consecutive_bad_steps == 5,
          "defaults");
    CHECK(strcmp(c.optimizer, "adamw_torch") == 0 && strcmp(c.output_dir, "./outputs") == 0,
          "optimizer and output_dir defaults");
    /* Axolotl's auto: on where supported; here where the build has AVX512_BF16 dot products */
    CHECK(c.bf16 == packed_bf16_available() && c.bf16_auto && c.resume_from_checkpoint &&
              strcmp(c.resume_from_checkpoint, "true") == 0,
          "bf16 auto (%d, AVX512_BF16 %d), resume true", c.bf16, packed_bf16_available());
    CHECK(has_warning(&c, "sft.yaml:16:", "did you mean 'learning_rate'"), "typo warning");
    CHECK(has_warning(&c, "sft.yaml:17:", "'flash_attention' has no effect in rlhf.c"),
          "documented no-op key");
    CHECK(!has_warning(&c, "sample_packing", NULL), "a no-op value that matches is silent");
    CHECK(!has_warning(&c, "wandb_project", NULL), "null keys vanish silently");
    train_config_free(&c);

    const char *overrides[] = {"learning_rate", "1e-4", "max_steps", "7", "lr_scheduler", "cosine"};
    CHECK(train_config_load(&c, path, overrides, 3) == 0, "%s", err_msg());
    CHECK(c.learning_rate == 1e-4 && c.max_steps == 7 && strcmp(c.lr_scheduler, "cosine") == 0,
          "overrides win over the file");
    train_config_free(&c);
}

/* axolotl-config.md §17: the DPO example parses, LoRA keys included. */
static void test_spec_dpo_config(void) {
    const char *path = write_yaml("dpo.yaml", "base_model: Qwen/Qwen2.5-0.5B-Instruct\n"
                                              "rl: dpo\n"
                                              "rl_beta: 0.1\n"
                                              "datasets:\n"
                                              "  - path: data/pairs.jsonl\n"
                                              "    split: train\n"
                                              "    type: chatml.intel\n"
                                              "sequence_len: 1024\n"
                                              "micro_batch_size: 2\n"
                                              "gradient_accumulation_steps: 4\n"
                                              "num_epochs: 1\n"
                                              "learning_rate: 5.0e-6\n"
                                              "adapter: lora\n"
                                              "lora_r: 16\n"
                                              "lora_alpha: 32\n"
                                              "lora_target_linear: true\n"
                                              "output_dir: ./out/dpo\n");
    TrainConfig c;
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.rl == RL_DPO && c.sequence_len == 1024 && c.learning_rate == 5e-6, "dpo config values");
    CHECK(c.adapter && strcmp(c.adapter, "lora") == 0 && c.lora_r == 16 && c.lora_alpha == 32 &&
              c.lora_target_linear && c.lora_dropout == 0 && !c.peft_use_rslora,
          "adapter keys");
    CHECK(!has_warning(&c, "adapter", NULL) && !has_warning(&c, "lora", NULL),
          "adapter keys are used, not warned about");
    train_config_free(&c);
}

/* axolotl-config.md §9.6: target modules as a list, a string or a command-line list; PEFT's
 * defaults where keys are left out; lora keys without an adapter warn. */
static void test_lora_keys(void) {
    const char *path = write_yaml("lora.yaml", BASE "learning_rate: 1e-4\n"
                                                    "adapter: lora\n"
                                                    "lora_r: 8\n"
                                                    "lora_dropout: 0.05\n"
                                                    "use_rslora: true\n"
                                                    "lora_target_modules:\n"
                                                    "  - q_proj\n"
                                                    "  - self_attn.o_proj\n");
    TrainConfig c;
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.lora_r == 8 && c.lora_alpha == 8 && c.lora_dropout == 0.05 && c.peft_use_rslora,
          "lora values, alpha defaulting to PEFT's 8");
    CHECK(c.n_lora_target_modules == 2 && strcmp(c.lora_target_modules[1], "self_attn.o_proj") == 0,
          "target list");
    train_config_free(&c);
    const char *ov[] = {"lora_target_modules", "gate_proj, up_proj,down_proj"};
    CHECK(train_config_load(&c, path, ov, 1) == 0, "%s", err_msg());
    CHECK(c.n_lora_target_modules == 3 && strcmp(c.lora_target_modules[0], "gate_proj") == 0 &&
              strcmp(c.lora_target_modules[1], "up_proj") == 0,
          "comma-separated override");
    train_config_free(&c);

    path =
        write_yaml("lora_min.yaml", BASE
                   "learning_rate: 1e-4\nadapter: lora\nlora_r: 4\nlora_target_modules: k_proj\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.n_lora_target_modules == 1 && strcmp(c.lora_target_modules[0], "k_proj") == 0,
          "a single name");
    train_config_free(&c);
    path = write_yaml("lora_def.yaml", BASE "learning_rate: 1e-4\nadapter: lora\nlora_r: 4\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.n_lora_target_modules == 2 && strcmp(c.lora_target_modules[0], "q_proj") == 0 &&
              strcmp(c.lora_target_modules[1], "v_proj") == 0,
          "PEFT's default targets");
    train_config_free(&c);

    path = write_yaml("noadapter.yaml", BASE "learning_rate: 1e-4\nlora_r: 4\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(!c.adapter && has_warning(&c, "lora_* keys are set but 'adapter' is not", NULL),
          "lora keys without an adapter warn");
    train_config_free(&c);
}

static void expect_error(const char *name, const char *text, const char *want1, const char *want2) {
    const char *path = write_yaml(name, text);
    TrainConfig c;
    int rc = train_config_load(&c, path, NULL, 0);
    CHECK(rc != 0, "%s: accepted", name);
    if (rc == 0) {
        train_config_free(&c);
        return;
    }
    CHECK(strstr(err_msg(), want1) != NULL, "%s: \"%s\" lacks \"%s\"", name, err_msg(), want1);
    CHECK(!want2 || strstr(err_msg(), want2) != NULL, "%s: \"%s\" lacks \"%s\"", name, err_msg(),
          want2);
}

static void test_errors(void) {
    /* Found by fuzz_train_config: a second `datasets:` leaked the first list. The last one
     * wins, as in PyYAML (test_fuzz_regressions replays the input under the sanitizers). */
    {
        const char *path = write_yaml("dup.yaml", BASE "learning_rate: 1e-5\ndatasets:\n"
                                                       "  - path: e.jsonl\n    data_files: a\n"
                                                       "    data_files: [b, c]\n");
        TrainConfig c;
        CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
        CHECK(c.n_datasets == 1 && strcmp(c.datasets[0].path, "e.jsonl") == 0 &&
                  c.datasets[0].n_data_files == 2,
              "the last datasets: and data_files: win");
        train_config_free(&c);
    }
    expect_error("rl.yaml", BASE "learning_rate: 1e-5\nrl: ppo\n", "rl.yaml:5: key 'rl'",
                 "unknown method \"ppo\"");
    expect_error("type.yaml", BASE "learning_rate: 1e-5\nmicro_batch_size: two\n",
                 "type.yaml:5: key 'micro_batch_size'", "expected an integer");
    /* pure bf16 weights would change what is trained: refused, not run as true */
    expect_error("bf16_full.yaml", BASE "learning_rate: 1e-5\nbf16: full\n",
                 "bf16_full.yaml:5: key 'bf16'", "\"full\" (bf16 weights without fp32 master");
    expect_error("bool.yaml", BASE "learning_rate: 1e-5\ngradient_checkpointing: 3\n",
                 "bool.yaml:5: key 'gradient_checkpointing'", "true or false");
    expect_error("bad_steps.yaml", BASE "learning_rate: 1e-5\nmax_consecutive_bad_steps: -1\n",
                 "key 'max_consecutive_bad_steps'", "must not be negative");
    expect_error("list.yaml", BASE "learning_rate: [1, 2]\n", "list.yaml:4: key 'learning_rate'",
                 "not a list");
    expect_error("nobase.yaml", "datasets:\n  - path: d.jsonl\nlearning_rate: 1e-5\n",
                 "nobase.yaml", "'base_model': missing");
    expect_error("nolr.yaml", BASE, "nolr.yaml", "'learning_rate': missing");
    expect_error("nopath.yaml", "base_model: m\nlearning_rate: 1\ndatasets:\n  - type: alpaca\n",
                 "nopath.yaml:4: datasets[0]", "missing 'path'");
    expect_error("hub.yaml",
                 "base_model: m\nlearning_rate: 1\ndatasets:\n  - path: x\n    ds_type: xml\n",
                 "hub.yaml:4: datasets[0].ds_type", "\"xml\" is not a dataset type");
    expect_error("syntax.yaml", "base_model: m\n  bad: [\n", "syntax.yaml:", "invalid YAML");
    expect_error("top.yaml", "- a\n- b\n", "top.yaml:1:", "mapping");
    expect_error("warm.yaml", BASE "learning_rate: 1\nwarmup_steps: 3\nwarmup_ratio: 0.1\n",
                 "warm.yaml", "mutually exclusive");
    expect_error("neg.yaml", BASE "learning_rate: -1e-5\n", "neg.yaml", "must be positive");
    expect_error("qlora.yaml", BASE "learning_rate: 1\nadapter: qlora\nlora_r: 8\n", "qlora.yaml",
                 "Require cfg.load_in_4bit to be True for qlora");
    expect_error("4bit.yaml", BASE "learning_rate: 1\nload_in_4bit: true\n", "4bit.yaml",
                 "not supported without setting an adapter");
    expect_error("adapter.yaml", BASE "learning_rate: 1\nadapter: ia3\n", "adapter.yaml",
                 "'adapter': \"ia3\" is not supported");
    expect_error("nor.yaml", BASE "learning_rate: 1\nadapter: lora\n", "nor.yaml",
                 "'lora_r': missing");
    expect_error("negr.yaml", BASE "learning_rate: 1\nadapter: lora\nlora_r: -2\n", "negr.yaml",
                 "'lora_r': must be positive");
    expect_error("drop.yaml", BASE "learning_rate: 1\nadapter: lora\nlora_r: 2\nlora_dropout: 1\n",
                 "drop.yaml", "'lora_dropout': must be in [0, 1)");
    expect_error("regex.yaml",
                 BASE "learning_rate: 1\nadapter: lora\nlora_r: 2\nlora_target_modules: .*proj\n",
                 "regex.yaml:7: key 'lora_target_modules'", "regular expression");
    expect_error("tlist.yaml",
                 BASE "learning_rate: 1\nadapter: lora\nlora_r: 2\nlora_target_modules: [a, [b]]\n",
                 "tlist.yaml:7", "lora_target_modules[1]: expected a name");
    expect_error("sched.yaml", BASE "learning_rate: 1\nlr_scheduler: rex\n", "sched.yaml",
                 "'lr_scheduler': \"rex\" is not supported");
    expect_error("optim.yaml", BASE "learning_rate: 1\noptimizer: lion_8bit\n", "optim.yaml",
                 "'optimizer'");
    expect_error("optim8z.yaml",
                 BASE "learning_rate: 1\noptimizer: paged_adamw_8bit\nzero_stage: 1\n",
                 "optim8z.yaml", "'zero_stage': 1 shards the fp32 AdamW moments");
    TrainConfig c;
    const char *names8[] = {"adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit"};
    for (int i = 0; i < 3; i++) {
        char text[512];
        snprintf(text, sizeof text, BASE "learning_rate: 1\noptimizer: %s\n", names8[i]);
        CHECK(train_config_load(&c, write_yaml("optim8.yaml", text), NULL, 0) == 0,
              "optimizer %s: %s", names8[i], err_msg());
        CHECK(optimizer_is_8bit(c.optimizer), "%s is 8-bit", names8[i]);
        train_config_free(&c);
    }
    CHECK(!optimizer_is_8bit("adamw_torch"), "adamw_torch is not 8-bit");
    CHECK(train_config_load(&c, harness_source_path("no/such.yaml"), NULL, 0) != 0 &&
              strstr(err_msg(), "cannot open"),
          "missing file: %s", err_msg());
    const char *path = write_yaml("ok.yaml", BASE "learning_rate: 1\n");
    const char *bad_override[] = {"learning_rte", "1"};
    CHECK(train_config_load(&c, path, bad_override, 1) != 0 &&
              strstr(err_msg(), "--learning_rte") && strstr(err_msg(), "--learning_rate"),
          "unknown override: %s", err_msg());
    const char *bad_value[] = {"max_steps", "lots"};
    CHECK(train_config_load(&c, path, bad_value, 1) != 0 && strstr(err_msg(), "--max_steps") &&
              strstr(err_msg(), "expected an integer"),
          "bad override value: %s", err_msg());
}

/* Every config in examples/ loads without an error or a warning. */
static void test_examples(void) {
    const char *dir = harness_source_path("examples");
    char dir_copy[4096];
    snprintf(dir_copy, sizeof dir_copy, "%s", dir);
    DIR *d = opendir(dir_copy);
    CHECK(d != NULL, "examples/ exists");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".yaml") != 0) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir_copy, e->d_name);
        TrainConfig c;
        CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s: %s", e->d_name, err_msg());
        n++;
        CHECK(c.n_warnings == 0, "%s: %d warnings, the first: %s", e->d_name, c.n_warnings,
              c.n_warnings ? c.warnings[0] : "");
        train_config_free(&c);
    }
    if (d) closedir(d);
    CHECK(n >= 2, "%d example configs", n);
}

/* The preference keys: beta's precedence, DPO loss lists, and their errors. */
static void test_preference_keys(void) {
    const char *path = write_yaml("dpo_keys.yaml", BASE "learning_rate: 1e-6\nrl: dpo\n"
                                                        "rl_beta: 0.2\n"
                                                        "trl:\n  beta: 0.3\n"
                                                        "dpo_loss_type: [sigmoid, bco_pair, sft]\n"
                                                        "dpo_loss_weights: [0.8, 0.2, 1.0]\n");
    TrainConfig c;
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.beta == 0.3, "trl.beta wins over rl_beta: %g", c.beta);
    CHECK(c.n_dpo_loss_type == 3 && strcmp(c.dpo_loss_type[2], "sft") == 0 &&
              c.dpo_loss_weight_values[0] == 0.8 && c.dpo_loss_weight_values[1] == 0.2,
          "loss types and weights");
    train_config_free(&c);
    path = write_yaml("ipo.yaml", BASE "learning_rate: 1e-6\nrl: ipo\ndpo_beta: 0.05\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.beta == 0.05 && c.n_dpo_loss_type == 1 && strcmp(c.dpo_loss_type[0], "ipo") == 0 &&
              c.dpo_loss_weight_values[0] == 1.0,
          "rl: ipo is DPO with the ipo loss; dpo_beta as rl_beta");
    CHECK(has_warning(&c, "dpo_beta is deprecated", NULL), "dpo_beta warns");
    train_config_free(&c);
    path = write_yaml("orpo.yaml", BASE "learning_rate: 1e-6\nrl: orpo\norpo_alpha: 0.25\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.beta == 0.25 && c.simpo_gamma == 0.5 && isnan(c.cpo_alpha),
          "orpo_alpha as beta; defaults");
    train_config_free(&c);
    path = write_yaml("aot.yaml", BASE "learning_rate: 1e-6\nrl: dpo\ndpo_loss_type: [aot_pair]\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(strcmp(c.dpo_loss_type[0], "aot_unpaired") == 0 &&
              has_warning(&c, "old name of aot_unpaired", NULL),
          "aot_pair is read as aot_unpaired, with a warning");
    train_config_free(&c);
    path = write_yaml("cpo.yaml", BASE "learning_rate: 1e-6\nrl: cpo\ncpo_loss_type: hinge\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.rl == RL_CPO && strcmp(c.cpo_loss_type, "hinge") == 0, "rl: cpo with its loss type");
    train_config_free(&c);
    expect_error("cs.yaml", BASE "learning_rate: 1\nrl: simpo\ncpo_loss_type: hinge\n", "cs.yaml",
                 "for rl: cpo only");
    expect_error("both.yaml",
                 BASE "learning_rate: 1\nval_set_size: 0.1\ntest_datasets:\n  - path: t.jsonl\n",
                 "both.yaml", "non-zero val_set_size should not be used with test_datasets");
    path = write_yaml("kto.yaml", BASE "learning_rate: 1e-6\nrl: kto\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.beta == 0.1 && c.kto_desirable_weight == 1 && c.kto_undesirable_weight == 1 &&
              strcmp(c.excess_length_strategy, "drop") == 0,
          "TRL's defaults");
    train_config_free(&c);

    expect_error("w.yaml", BASE "learning_rate: 1\nrl: dpo\ndpo_loss_weights: [1.0]\n", "w.yaml",
                 "requires `dpo_loss_type`");
    expect_error("wl.yaml",
                 BASE "learning_rate: 1\nrl: dpo\ndpo_loss_type: [sigmoid, sft]\n"
                      "dpo_loss_weights: [1.0]\n",
                 "wl.yaml", "2 losses and 1 weights");
    expect_error("kt.yaml", BASE "learning_rate: 1\nrl: kto\ndpo_loss_type: [sigmoid]\n", "kt.yaml",
                 "for DPO only");
    expect_error("rpo.yaml", BASE "learning_rate: 1\nrl: dpo\nrpo_alpha: 1.0\n", "rpo.yaml",
                 "dpo_legacy_compat");
    expect_error("trl.yaml", BASE "learning_rate: 1\nrl: dpo\ntrl: 3\n", "trl.yaml:6: key 'trl'",
                 "mapping");
    expect_error("ex.yaml", BASE "learning_rate: 1\nrl: dpo\nexcess_length_strategy: cut\n",
                 "ex.yaml", "drop, truncate, raise");
    expect_error("simpo.yaml", BASE "learning_rate: 1\nrl: simpo\nwarmup_ratio: 0.1\n",
                 "simpo.yaml", "warmup_ratio is not supported with the simpo trainer");
}

/* A Hub dataset entry as the Axolotl RLHF guide writes it: name, revision, no ds_type. */
static void test_hub_dataset_keys(void) {
    const char *path = write_yaml("hubds.yaml", "base_model: m\nlearning_rate: 1\ndatasets:\n"
                                                "  - path: openai/gsm8k\n    name: main\n"
                                                "    revision: v1.0\n    split: test\n");
    TrainConfig c;
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    const DatasetConfig *d = &c.datasets[0];
    CHECK(strcmp(d->name, "main") == 0 && strcmp(d->revision, "v1.0") == 0 &&
              strcmp(d->split, "test") == 0 && d->ds_type == NULL,
          "a Hub dataset's name, revision and split");
    CHECK(!has_warning(&c, "name", NULL) && !has_warning(&c, "revision", NULL),
          "name and revision are used, not warned about");
    train_config_free(&c);
}

/* The Hub keys: Axolotl's model_revision alias, hub_model_id turning pushing on with a private
 * repository (Axolotl's trainer builder), hub_strategy's values; reading a config never resolves
 * a Hub id (that is train_config_resolve_models', which the commands call). */
static void test_hub_keys(void) {
    const char *path = write_yaml("hub.yaml", "base_model: Qwen/Qwen2.5-0.5B-Instruct\n"
                                              "model_revision: v1\n"
                                              "datasets:\n  - path: d.jsonl\n"
                                              "learning_rate: 1e-6\n"
                                              "hub_model_id: me/run\n"
                                              "hub_strategy: all_checkpoints\n");
    TrainConfig c;
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(strcmp(c.base_model, "Qwen/Qwen2.5-0.5B-Instruct") == 0 && !c.base_model_id &&
              strcmp(c.revision_of_model, "v1") == 0,
          "a Hub id is kept as written until resolved; model_revision is revision_of_model");
    CHECK(c.push_to_hub && c.hub_private_repo && strcmp(c.hub_strategy, "all_checkpoints") == 0,
          "hub_model_id turns push_to_hub on, private unless said otherwise");
    CHECK(c.n_warnings == 0, "no warning for the Hub keys: %s", c.n_warnings ? c.warnings[0] : "");
    train_config_free(&c);
    path = write_yaml("hub2.yaml", BASE "learning_rate: 1e-6\npush_to_hub: true\n"
                                        "hub_private_repo: false\nhub_revision: dev\n");
    CHECK(train_config_load(&c, path, NULL, 0) == 0, "%s", err_msg());
    CHECK(c.push_to_hub && !c.hub_private_repo && !c.hub_model_id &&
              strcmp(c.hub_revision, "dev") == 0,
          "push_to_hub without hub_model_id; hub_private_repo false; hub_revision");
    train_config_free(&c);
    expect_error("hs.yaml", BASE "learning_rate: 1\nhub_strategy: sometimes\n", "hs.yaml",
                 "'hub_strategy': \"sometimes\" is not one of end, every_save");
}

/* tokenizer_legacy: unset/null leaves the tokenizer_config.json's value (-1); true/false are
 * passed on; anything else is an error naming the key. tokenizer_type: a class rlhf.c builds, or
 * an error. */
static void test_tokenizer_legacy(void) {
    static const struct {
        const char *yaml;
        int want;
    } cases[] = {{"", -1},
                 {"tokenizer_legacy: ~\n", -1},
                 {"tokenizer_legacy: true\n", 1},
                 {"tokenizer_legacy: false\n", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, BASE "learning_rate: 1e-5\n%s", cases[i].yaml);
        TrainConfig c;
        CHECK(train_config_load(&c, write_yaml("legacy.yaml", text), NULL, 0) == 0, "%s",
              err_msg());
        CHECK(c.tokenizer_legacy == cases[i].want, "\"%s\": tokenizer_legacy %d", cases[i].yaml,
              c.tokenizer_legacy);
        train_config_free(&c);
    }
    TrainConfig c;
    CHECK(train_config_load(&c,
                            write_yaml("type.yaml", BASE "learning_rate: 1e-5\n"
                                                         "tokenizer_type: LlamaTokenizerFast\n"),
                            NULL, 0) == 0 &&
              c.tokenizer_type && strcmp(c.tokenizer_type, "LlamaTokenizerFast") == 0,
          "tokenizer_type read: %s", err_msg());
    train_config_free(&c);
    expect_error("type-bad.yaml", BASE "learning_rate: 1e-5\ntokenizer_type: GemmaTokenizer\n",
                 "key 'tokenizer_type': \"GemmaTokenizer\" is not built", NULL);
    expect_error("legacy-bad.yaml", BASE "learning_rate: 1e-5\ntokenizer_legacy: \"yes\"\n",
                 "tokenizer_legacy", "expected true or false");
}

int main(void) {
    test_tokenizer_legacy();
    test_hub_dataset_keys();
    test_hub_keys();
    test_preference_keys();
    test_examples();
    test_sft_config();
    test_spec_dpo_config();
    test_lora_keys();
    test_errors();
    return harness_finish("test_train_config");
}
