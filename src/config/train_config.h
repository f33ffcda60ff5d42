/* The training configuration: an Axolotl-style YAML file (axolotl-config.md §9) plus
 * command-line overrides, read into typed fields with defaults, validated with messages that
 * name the file, the line and the key.
 *
 * Unknown keys are not errors (Axolotl ignores them) but each gets a warning naming the nearest
 * known key; keys Axolotl documents that rlhf.c does not act on yet get a warning saying so, so
 * that nothing a user sets is dropped without a word. */
#ifndef RLHF_CONFIG_TRAIN_CONFIG_H
#define RLHF_CONFIG_TRAIN_CONFIG_H

#include "config/grpo_config.h"
#include "config/tracking_config.h"

#include <stdbool.h>
#include <jansson.h>
#include <stdint.h>

/* RL_CPO (rl: cpo) is rlhf.c's name for TRL's CPOTrainer with any of its loss types; Axolotl
 * reaches that trainer only through rl: simpo (loss type simpo). */
typedef enum {
    RL_NONE,
    RL_DPO,
    RL_IPO,
    RL_KTO,
    RL_ORPO,
    RL_SIMPO,
    RL_CPO,
    RL_GRPO,
    RL_GDPO
} RlMethod;

typedef struct {
    char *path;        /* local file or directory, else a Hub dataset id (data/dataset_source.h) */
    char *ds_type;     /* json, parquet, csv, arrow, text; NULL: by the files' extension */
    char **data_files; /* optional files or globs: inside path when it is a directory, else
                          from the working directory; a Hub dataset's files */
    int n_data_files;
    char *name;      /* the Hub dataset's configuration (load_dataset's name); may be NULL */
    char *revision;  /* the Hub dataset's branch, tag or commit; NULL: main */
    char *split;     /* train (default) */
    char *type;      /* prompt strategy, e.g. chat_template, alpaca, completion */
    json_t *options; /* the whole entry as JSON: each strategy reads its own keys */
    int line;        /* where the entry starts, for messages */
    char *where;     /* "config.yaml:3: datasets[0]", for messages */
} DatasetConfig;

typedef struct {
    char *source;            /* the YAML file, for messages */
    char *base_model;        /* required: a local directory or a Hub id (io/hub_resolve.h);
                                after train_config_resolve_models, the local directory */
    char *base_model_config; /* NULL, or the same model as base_model */
    char *tokenizer_config;  /* default: base_model_config, else base_model */
    char *tokenizer_type;    /* NULL (AutoTokenizer) or a class of tokenizer_load_classes */
    int tokenizer_legacy;    /* -1: unset (tokenizer_config.json's "legacy"); 0 or 1: passed to
                                the tokenizer as AutoTokenizer.from_pretrained(legacy=) */
    char *revision_of_model; /* the Hub revision of a base_model given by id (model_revision) */
    char *base_model_id;     /* set by train_config_resolve_models: the Hub id base_model
                                came from; NULL when it was a local directory */
    RlMethod rl;             /* RL_NONE: supervised fine-tuning */
    DatasetConfig *datasets; /* at least one */
    int n_datasets;
    DatasetConfig *test_datasets; /* evaluation data (Axolotl's test_datasets); may be none */
    int n_test_datasets;
    double val_set_size; /* fraction (< 1) or count */
    /* Axolotl's merge_datasets (train/data_order.h): the merged rows shuffled once with NumPy's
     * generator from seed before the split (true), each dataset's rows first (false) */
    bool shuffle_merged_datasets;
    bool shuffle_before_merging_datasets;
    int64_t sequence_len;     /* 512 */
    int64_t micro_batch_size; /* 1 */
    /* Axolotl's sample packing (SFT only, data/sample_packing.h): several examples per row of
     * micro_batch_size x sequence_len tokens */
    bool sample_packing;
    int64_t sample_packing_bin_size;     /* 200: most examples per row */
    int64_t sample_packing_group_size;   /* 100000: examples packed at a time */
    bool sample_packing_sequentially;    /* next-fit in the shuffled order */
    bool multipack_real_batches;         /* micro_batch_size rows of sequence_len, not one row */
    bool eval_sample_packing;            /* true: with sample_packing, evaluate packed rows too */
    int64_t gradient_accumulation_steps; /* 1 */
    double num_epochs;                   /* 1 */
    int64_t max_steps;                   /* -1: from num_epochs */
    double learning_rate;                /* required */
    char *optimizer; /* adamw_torch (the fused variant is the same arithmetic) */
    /* Where training computes (train/train_device.h): "cpu", "cuda", "cuda-emu" or "auto" (the
     * default: cuda when this build has it and a device answers, else cpu) */
    char *device;
    /* Not a key: the backend train_session_open resolved `device` to (train/train_device.h),
     * set on the copy of the config a session's run hands down; NULL: the CPU */
    const struct TrainDevice *train_device;
    double adam_beta1, adam_beta2, adam_epsilon, weight_decay;
    double max_grad_norm; /* 1.0; 0 disables clipping */
    /* 5: stop after this many skipped (non-finite) steps in a row; 0: never */
    int64_t max_consecutive_bad_steps;
    char *lr_scheduler;           /* cosine */
    int64_t warmup_steps;         /* -1 when unset */
    double warmup_ratio;          /* -1 when unset */
    char *output_dir;             /* ./outputs */
    bool overwrite_output_dir;    /* a run of another config in output_dir is removed first */
    int64_t save_steps;           /* 0: at the end only */
    int64_t save_total_limit;     /* 0: keep all */
    int64_t logging_steps;        /* 1 */
    int64_t eval_steps;           /* 0: no evaluation */
    char *resume_from_checkpoint; /* NULL, "true" (latest in output_dir) or a path */
    int64_t seed;                 /* 42 */
    /* bf16: true (or auto where this build has AVX512_BF16 dot products, packed_bf16_available):
     * mixed-precision training as torch's CPU autocast under HF Trainer's bf16=True: the
     * products of linear layers, attention and lm_head take bf16 inputs and sum in fp32
     * (backend_cpu_autocast); weights, gradients, optimizer state, norms, softmax, log-probs and
     * losses stay fp32. A frozen reference model is also kept in bf16. */
    bool bf16;
    bool bf16_auto; /* bf16 was resolved from `auto` (for the start-up log) */
    bool gradient_checkpointing;
    bool gradient_checkpointing_set; /* the key was given: the memory plan leaves it alone */
    /* QLoRA (adapter: qlora): the frozen base's layer matrices quantised to NF4 at load */
    bool load_in_4bit;
    /* Over several processes (mpirun): 1 shards the AdamW moments over the ranks (DeepSpeed's
     * ZeRO stage 1: zero_optimization.stage); 0 (default) keeps them whole on every rank */
    int64_t zero_stage;
    char *chat_template;       /* NULL: the tokenizer's own (tokenizer_default) */
    char *chat_template_jinja; /* chat_template: jinja -> this template text or file */
    char *dataset_prepared_path;
    /* adapter: lora (axolotl-config.md §9.6); NULL: full fine-tuning */
    char *adapter;
    int64_t lora_r;             /* required with adapter: lora (unless lora_model_dir); -1: unset */
    double lora_alpha;          /* 8, PEFT's LoraConfig default, when unset */
    double lora_dropout;        /* 0 */
    char **lora_target_modules; /* module-name suffixes; q_proj, v_proj (PEFT's) when unset */
    int n_lora_target_modules;
    bool lora_target_linear; /* every linear layer but lm_head ("all-linear") */
    bool peft_use_rslora;    /* scaling alpha / sqrt(r); also read as use_rslora */
    char *lora_model_dir;    /* an adapter to continue from (or to merge) */
    /* preference and RL methods (axolotl-config.md §8.1; trl-methods.md) */
    double rl_beta; /* NAN: unset (see beta) */
    double beta;    /* resolved: trl.beta > rl_beta > dpo_beta > orpo_alpha > 0.1 */
    json_t *trl;    /* the trl: block as written (NULL: none) */
    int trl_line;
    json_t *trl_lines;    /* {key: line} of the trl: block's keys in the file */
    char **dpo_loss_type; /* DPO loss types; sigmoid (or ipo for rl: ipo) when unset */
    int n_dpo_loss_type;
    char **dpo_loss_weights; /* as written; parsed into dpo_loss_weight_values */
    int n_dpo_loss_weights;
    double *dpo_loss_weight_values; /* n_dpo_loss_type of them (1.0 each when unset) */
    double dpo_label_smoothing;     /* 0 */
    bool dpo_legacy_compat;         /* TRL <= 0.28 meanings: cDPO sigmoid, rpo_alpha */
    double rpo_alpha;               /* NAN: unset; only with dpo_legacy_compat */
    bool precompute_ref_log_probs;
    bool rl_adapter_ref_model; /* a separate frozen reference even with an adapter */
    double kto_desirable_weight, kto_undesirable_weight; /* 1.0 each */
    double orpo_alpha;                                   /* NAN: unset */
    double simpo_gamma; /* 0.5 (TRL's default; Axolotl would pass null) */
    double cpo_alpha;   /* NAN: unset -> TRL's 1.0 */
    /* rl: grpo, rlhf.c's own: where the sampling and the row shuffle draw from. "torch" (default
     * with one process): torch's global generator as TRL's GRPOTrainer leaves it after
     * set_seed(seed), so the same seed samples TRL's completions; "streams" (the only choice
     * over several ranks): a stream per completion, the same run on any number of ranks */
    char *grpo_rng;
    char *cpo_loss_type;          /* rl: cpo only: sigmoid (default), hinge, ipo, simpo, alphapo */
    int64_t max_prompt_len;       /* 0: unset (upstream ignores it; we keep the prompt's end) */
    char *excess_length_strategy; /* drop (default), truncate or raise */
    GrpoConfig grpo;              /* rl: grpo / gdpo: the trl: block read (config/grpo_config.h) */
    TrackingConfig tracking; /* use_tensorboard, report_to, wandb_* (config/tracking_config.h) */
    /* uploads (transformers' TrainingArguments; Axolotl: hub_model_id alone turns pushing on) */
    bool push_to_hub;
    char *hub_model_id;    /* default: output_dir's name */
    char *hub_strategy;    /* every_save (default), end, checkpoint, all_checkpoints */
    bool hub_private_repo; /* true unless set false (Axolotl creates private repositories) */
    char *hub_revision;    /* the branch pushed to; NULL: main */
    char *hub_token;       /* NULL: huggingface_hub's own (HF_TOKEN, `hf auth login`) */
    json_t *raw;     /* the whole file as JSON: what Python dataset transforms receive as cfg */
    char **warnings; /* messages for the user, in file order */
    int n_warnings;
} TrainConfig;

/* Reads `path`, applies the overrides (n_overrides pairs of key, value as given on the command
 * line: `--learning_rate 2e-5` -> "learning_rate", "2e-5"), fills defaults and validates.
 * Returns 0, or -1 with an error "path:line: key 'k': what was expected" (or the override's
 * name). */
int train_config_load(TrainConfig *cfg, const char *path, const char *const *overrides,
                      int n_overrides);

/* Makes every model path of a loaded config local (io/hub_resolve.h): base_model,
 * base_model_config, tokenizer_config (as HUB_TOKENIZER) and lora_model_dir (as HUB_ADAPTER), each
 * a local directory or a Hub id found in the HF cache or downloaded, at revision_of_model for
 * the base model's. Records the base's Hub id in base_model_id. Returns 0, or -1 with an error
 * naming the file and the key. Nothing is written but the HF cache. */
int train_config_resolve_models(TrainConfig *cfg);

/* The same from a document in memory: YAML text, or JSON (YAML's flow syntax), with the same
 * keys as the file. `name` stands for the file in messages and in `source`; relative paths in
 * the config are taken from the working directory, as for a file. */
int train_config_load_text(TrainConfig *cfg, const char *text, const char *name);
void train_config_free(TrainConfig *cfg);

const char *rl_method_name(RlMethod rl);

/* The name of the i-th top-level key rlhf.c reads into a TrainConfig (0 <= i), or NULL past
 * the last (a static string): the `used` rows of config/key_status.c's top-level table. */
const char *train_config_read_key_name(size_t i);

/* bitsandbytes' 8-bit AdamW under one of Trainer's names for it ("adamw_bnb_8bit", its alias
 * "adamw_8bit", and "paged_adamw_8bit": paging only matters to CUDA memory). */
bool optimizer_is_8bit(const char *name);

#endif
