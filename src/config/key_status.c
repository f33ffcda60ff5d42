/* The key status table (key_status.h): every key Axolotl documents, scope by scope, with what
 * rlhf.c does with it and why. Reasons shared by many keys are named once below. */
#include "config/key_status.h"

#include "common/error.h"
#include "config/train_config.h"

#include <stdlib.h>
#include <string.h>

#define USED(n, why)                                                                               \
    { n, KEY_USED, NULL, why, 0 }
#define USED_BY(n, methods, why)                                                                   \
    { n, KEY_USED, NULL, why, methods }
#define NOOP(n, neutral, why)                                                                      \
    { n, KEY_NOOP, neutral, why, 0 }
#define REFUSE(n, neutral, why)                                                                    \
    { n, KEY_REFUSED, neutral, why, 0 }

#define M_GRPO ((1u << RL_GRPO) | (1u << RL_GDPO))
#define M_KTO  (1u << RL_KTO)

/* ---- reasons shared by several keys ---- */
static const char R_READ[] = "read into the training configuration";
static const char R_CPU_KERNEL[] =
    "a GPU kernel, attention or compiler choice: rlhf.c computes the same arithmetic with its "
    "own CPU kernels";
static const char R_GPU_MEMORY[] =
    "GPU memory housekeeping: rlhf.c runs on the CPU and sizes everything up front";
static const char R_DIST_NOOP[] =
    "a setting of torch.distributed/accelerate: rlhf.c runs data-parallel over MPI (--nproc N)";
static const char R_SHARDING[] =
    "model/optimizer sharding changes the memory each process holds: rlhf.c shards only the "
    "AdamW moments (zero_stage: 1 with --nproc N)";
static const char R_QUANT[] =
    "quantised base weights change the arithmetic and the memory: rlhf.c keeps fp32 weights "
    "(bf16: true keeps frozen copies in bf16 and trains in mixed precision) and has 4-bit "
    "weights only as QLoRA's NF4 (adapter: qlora with load_in_4bit: true)";
static const char R_PRECISION[] =
    "rlhf.c computes in fp32 on the CPU, or with bf16: true in bf16 mixed precision as torch's "
    "CPU autocast; this precision switch does not apply";
static const char R_PACKING[] =
    "this packing variant changes the batches trained on and is not implemented (rlhf.c drops "
    "padding from every batch itself; sample_packing: true packs SFT examples as Axolotl's "
    "multipack does)";
static const char R_TRACKING[] =
    "experiment tracking: not built into rlhf.c on this branch; metrics go to "
    "output_dir/metrics.jsonl";
static const char R_HUB[] = "the Hugging Face Hub: rlhf.c reads and writes local directories only";
static const char R_PEFT[] = "this PEFT option changes the adapter trained; rlhf.c trains "
                             "plain LoRA (r, alpha, dropout, target modules, rsLoRA)";
static const char R_OPTIM[] = "this changes the optimizer or the schedule; rlhf.c has AdamW "
                              "(fp32 or 8-bit moments) with constant/linear/cosine schedules";
static const char R_OTHER_OPTIM[] =
    "read only by an optimizer rlhf.c does not have (the optimizer key refuses it)";
static const char R_DATA[] = "this changes which examples are trained on, and rlhf.c does not "
                             "implement it";
static const char R_MODEL[] = "this changes the model (architecture, vocabulary or weights) "
                              "before training, and rlhf.c does not implement it";
static const char R_TRAINER[] = "this changes the training algorithm, and rlhf.c does not "
                                "implement it";
static const char R_PERF[] =
    "a throughput knob of the Python data pipeline: rlhf.c prepares the data in-process";
static const char R_INTERNAL[] = "set by Axolotl itself while it runs, not by users";
static const char R_EVAL_EXTRA[] =
    "extra evaluation/sampling during training: rlhf.c logs the method's eval metrics only "
    "(rlhf generate samples a model)";
static const char R_REMOVED[] =
    "removed upstream (Axolotl refuses any value): see the migration note in Axolotl's docs";
static const char R_MULTIMODAL[] = "multimodal models: rlhf.c trains text-only causal LMs";
static const char R_VLLM[] = "a vLLM engine setting: rlhf.c generates with its own engine (in "
                             "process, or `rlhf serve` with vllm_mode: server)";
static const char R_ASYNC_ONLY[] =
    "only Axolotl's async GRPO trainer reads it (Axolotl drops it for the standard trainer, "
    "which is what rlhf.c implements)";
static const char R_VLLM_SERVE[] = "the vllm: block configures `rlhf vllm-serve` (Axolotl's "
                                   "`axolotl vllm-serve`); rlhf train does not read it";

static const KeyStatusRow top_rows[] = {
    /* model and tokenizer */
    USED("base_model", R_READ),
    USED("base_model_config", "a Hub id or directory; must name base_model's own config (another "
                              "config would change the model)"),
    REFUSE("cls_model_config", "", R_MODEL),
    USED("tokenizer_config", R_READ),
    NOOP("tokenizer_use_fast", "true",
         "rlhf.c implements the fast tokenizer (tokenizer.json) only"),
    USED("tokenizer_legacy", R_READ),
    REFUSE("tokenizer_use_mistral_common", "false",
           "mistral-common tokenizers are not "
           "implemented (tokenizer.json only)"),
    USED("tokenizer_type", R_READ),
    REFUSE("processor_type", "", R_MULTIMODAL),
    REFUSE("processor_kwargs", "{}", R_MULTIMODAL),
    NOOP("tokenizer_save_jinja_files", "true",
         "a chat_template.jinja of the model is copied to the output as it is"),
    NOOP("trust_remote_code", "false", "rlhf.c runs no model code from a model directory"),
    NOOP("experimental_skip_move_to_device", "*", R_GPU_MEMORY),
    NOOP("use_kernels", "false", R_CPU_KERNEL),
    REFUSE("model_quantization_config", "", R_QUANT),
    REFUSE("model_quantization_config_kwargs", "{}", R_QUANT),
    REFUSE("use_onebitllms", "false", R_QUANT),
    USED("output_dir", R_READ),
    USED("hub_model_id", "the repository pushed to; turns push_to_hub on (train/hub_push.c)"),
    USED("hub_strategy", "end, every_save, checkpoint, all_checkpoints (train/hub_push.c)"),
    USED("hub_revision", "the branch pushed to (train/hub_push.c)"),
    USED("hub_private_repo", "the repository's visibility when created (train/hub_push.c)"),
    USED("hub_token", "the token huggingface_hub uploads with (train/hub_push.c)"),
    USED("revision_of_model", "the Hub revision of base_model (io/hub_resolve.c)"),
    USED("base_model_revision", "the Hub revision of base_model (io/hub_resolve.c)"),
    NOOP("save_safetensors", "true", "rlhf.c always writes safetensors"),
    REFUSE("load_in_8bit", "false", R_QUANT),
    USED("load_in_4bit",
         "with adapter: qlora, the frozen base's layer matrices quantised to NF4 with double "
         "quantisation at load, as bitsandbytes does for Axolotl's QLoRA (model/model_nf4.c)"),
    USED("adapter", R_READ),
    USED("lora_model_dir", R_READ),
    USED("lora_r", R_READ),
    USED("lora_alpha", R_READ),
    REFUSE("lora_fan_in_fan_out", "false", R_PEFT),
    USED("lora_target_modules", R_READ),
    REFUSE("lora_target_parameters", "[]", R_PEFT),
    USED("lora_target_linear", R_READ),
    REFUSE("lora_modules_to_save", "[]", R_PEFT),
    REFUSE("lora_rank_pattern", "{}", R_PEFT),
    REFUSE("lora_alpha_pattern", "{}", R_PEFT),
    USED("lora_dropout", R_READ),
    REFUSE("peft_layers_to_transform", "", R_PEFT),
    REFUSE("peft_layers_pattern", "", R_PEFT),
    REFUSE("peft", "{}", R_PEFT),
    REFUSE("peft_use_dora", "false", R_PEFT),
    USED("peft_use_rslora", R_READ),
    REFUSE("peft_layer_replication", "", R_PEFT),
    NOOP("peft_init_lora_weights", "true",
         "rlhf.c initialises LoRA as PEFT's default (true) does "
         "(Kaiming-uniform A, zero B); other schemes are not "
         "implemented"),
    REFUSE("peft_trainable_token_indices", "", R_PEFT),
    NOOP("peft_ensure_weight_tying", "*",
         "rlhf.c trains no embedding or lm_head copies whose "
         "tying could break"),
    NOOP("peft_autocast_adapter_dtype", "*", R_PRECISION),
    REFUSE("qlora_sharded_model_loading", "false", R_QUANT),
    NOOP("lora_on_cpu", "*", "everything is on the CPU already"),
    REFUSE("gptq", "false", R_QUANT),
    REFUSE("bnb_config_kwargs", "{}", R_QUANT),
    REFUSE("loraplus_lr_ratio", "", R_OPTIM),
    NOOP("loraplus_lr_embedding", "*", "only read with loraplus_lr_ratio"),
    NOOP("merge_lora", "false", "training does not merge; run `rlhf merge-lora CONFIG` after it"),
    NOOP("merge_method", "*", "`rlhf merge-lora` merges in fp32 (W + scale * B A) either way"),
    REFUSE("relora", "false", R_TRAINER),
    REFUSE("relora_prune_ratio", "", R_TRAINER),
    REFUSE("relora_prune_method", "", R_TRAINER),
    REFUSE("relora_cpu_offload", "false", R_TRAINER),
    REFUSE("jagged_restart_steps", "", R_OPTIM),
    REFUSE("jagged_restart_warmup_steps", "", R_OPTIM),
    REFUSE("jagged_restart_anneal_steps", "", R_OPTIM),
    /* batch, schedule, optimizer */
    USED("gradient_accumulation_steps", R_READ),
    USED("micro_batch_size", R_READ),
    REFUSE("batch_size", "",
           "rlhf.c does not derive gradient_accumulation_steps from "
           "batch_size: set micro_batch_size and gradient_accumulation_steps"),
    NOOP("eval_batch_size", "=micro_batch_size",
         "rlhf.c evaluates in batches of micro_batch_size; SFT's eval_loss (HF's "
         "row-weighted mean of each eval batch's mean) can differ with another size"),
    REFUSE("auto_find_batch_size", "false",
           "the batch size must be set: rlhf.c does not search "
           "for one that fits"),
    REFUSE("train_on_inputs", "false",
           "rlhf.c trains on the outputs only (the prompt is masked), "
           "as train_on_inputs: false does"),
    REFUSE("group_by_length", "false", R_DATA),
    USED("learning_rate", R_READ),
    REFUSE("embedding_lr", "", R_OPTIM),
    REFUSE("embedding_lr_scale", "", R_OPTIM),
    USED("weight_decay", R_READ),
    USED("optimizer", R_READ),
    REFUSE("optim_args", "{}|\"\"", R_OPTIM),
    REFUSE("optim_target_modules", "[]", R_OPTIM),
    NOOP("torchdistx_path", "", R_OTHER_OPTIM),
    USED("lr_scheduler", R_READ),
    REFUSE("lr_scheduler_kwargs", "{}", R_OPTIM),
    REFUSE("lr_quadratic_warmup", "false", R_OPTIM),
    REFUSE("cosine_min_lr_ratio", "", R_OPTIM),
    REFUSE("cosine_constant_lr_ratio", "", R_OPTIM),
    NOOP("lr_div_factor", "*", "only read by the one_cycle schedule, which rlhf.c does not have"),
    REFUSE("lr_groups", "[]", R_OPTIM),
    USED("adam_epsilon", R_READ),
    NOOP("adam_epsilon2", "", R_OTHER_OPTIM),
    USED("adam_beta1", R_READ),
    USED("adam_beta2", R_READ),
    NOOP("adam_beta3", "", R_OTHER_OPTIM),
    NOOP("dion_lr", "", R_OTHER_OPTIM),
    NOOP("dion_momentum", "", R_OTHER_OPTIM),
    NOOP("dion_rank_fraction", "", R_OTHER_OPTIM),
    NOOP("dion_rank_multiple_of", "", R_OTHER_OPTIM),
    NOOP("qgalore_rank", "", R_OTHER_OPTIM),
    NOOP("qgalore_update_proj_gap", "", R_OTHER_OPTIM),
    NOOP("qgalore_scale", "", R_OTHER_OPTIM),
    NOOP("qgalore_proj_type", "", R_OTHER_OPTIM),
    NOOP("qgalore_proj_quant", "", R_OTHER_OPTIM),
    NOOP("qgalore_proj_bits", "", R_OTHER_OPTIM),
    NOOP("qgalore_proj_group_size", "", R_OTHER_OPTIM),
    NOOP("qgalore_cos_threshold", "", R_OTHER_OPTIM),
    NOOP("qgalore_gamma_proj", "", R_OTHER_OPTIM),
    NOOP("qgalore_queue_size", "", R_OTHER_OPTIM),
    USED("max_grad_norm", R_READ),
    USED("num_epochs", R_READ),
    /* tracking and reporting */
    USED("use_wandb", "Weights & Biases through the wandb package (report/)"),
    USED("wandb_name", "the W&B run (report/wandb_reporter.c)"),
    USED("wandb_run_id", "the W&B run id, resumed (report/wandb_reporter.c)"),
    USED("wandb_mode", "online, offline or disabled (report/wandb_reporter.c)"),
    USED("wandb_project", "the W&B run (report/wandb_reporter.c)"),
    USED("wandb_entity", "the W&B run (report/wandb_reporter.c)"),
    USED("wandb_watch",
         "false only: no torch model to watch (other values refused by tracking_config.c)"),
    USED("wandb_log_model",
         "false only: no artifact upload (other values refused by tracking_config.c)"),
    NOOP("use_mlflow", "false", R_TRACKING),
    NOOP("mlflow_tracking_uri", "", R_TRACKING),
    NOOP("mlflow_experiment_name", "", R_TRACKING),
    NOOP("mlflow_run_name", "", R_TRACKING),
    NOOP("hf_mlflow_log_artifacts", "false", R_TRACKING),
    NOOP("use_comet", "false", R_TRACKING),
    NOOP("comet_api_key", "", R_TRACKING),
    NOOP("comet_workspace", "", R_TRACKING),
    NOOP("comet_project_name", "", R_TRACKING),
    NOOP("comet_experiment_key", "", R_TRACKING),
    NOOP("comet_mode", "", R_TRACKING),
    NOOP("comet_online", "", R_TRACKING),
    NOOP("comet_experiment_config", "{}", R_TRACKING),
    NOOP("use_trackio", "false", R_TRACKING),
    NOOP("trackio_project_name", "", R_TRACKING),
    NOOP("trackio_run_name", "", R_TRACKING),
    NOOP("trackio_space_id", "", R_TRACKING),
    NOOP("use_otel_metrics", "false", R_TRACKING),
    NOOP("otel_metrics_host", "", R_TRACKING),
    NOOP("otel_metrics_port", "", R_TRACKING),
    USED("report_to", "as HF TrainingArguments reads it (report/)"),
    USED("push_to_hub", "uploads through huggingface_hub (train/hub_push.c)"),
    REFUSE("lisa_n_layers", "", R_TRAINER),
    REFUSE("lisa_step_interval", "", R_TRAINER),
    REFUSE("lisa_layers_attribute", "", R_TRAINER),
    NOOP("gradio_title", "", "Axolotl's Gradio inference UI is not part of rlhf.c"),
    NOOP("gradio_share", "", "Axolotl's Gradio inference UI is not part of rlhf.c"),
    NOOP("gradio_server_name", "", "Axolotl's Gradio inference UI is not part of rlhf.c"),
    NOOP("gradio_server_port", "", "Axolotl's Gradio inference UI is not part of rlhf.c"),
    NOOP("gradio_max_new_tokens", "", "Axolotl's Gradio inference UI is not part of rlhf.c"),
    NOOP("gradio_temperature", "", "Axolotl's Gradio inference UI is not part of rlhf.c"),
    NOOP("use_ray", "false", "Ray launching: rlhf.c starts its ranks with MPI (--nproc N)"),
    NOOP("ray_run_name", "", "Ray launching: rlhf.c starts its ranks with MPI (--nproc N)"),
    NOOP("ray_num_workers", "", "Ray launching: rlhf.c starts its ranks with MPI (--nproc N)"),
    NOOP("resources_per_worker", "", "Ray launching: rlhf.c starts its ranks with MPI"),
    REFUSE("image_size", "", R_MULTIMODAL),
    REFUSE("image_resize_algorithm", "", R_MULTIMODAL),
    REFUSE("role_boundaries", "[]", R_MULTIMODAL),
    /* remapped and deprecated names */
    REFUSE("model_config", "{}", R_MODEL),
    REFUSE("model_kwargs", "{}", R_MODEL),
    NOOP("model_type", "\"AutoModelForCausalLM\"",
         "the architecture is read from the model's config.json"),
    NOOP("type_of_model", "\"AutoModelForCausalLM\"",
         "the architecture is read from the model's config.json"),
    USED("model_revision", "the Hub revision of base_model (io/hub_resolve.c)"),
    REFUSE("max_packed_sequence_len", "", R_PACKING),
    REFUSE("rope_scaling", "{}",
           "RoPE scaling is read from the model's config.json; an "
           "override would change the model"),
    REFUSE("noisy_embedding_alpha", "0", R_TRAINER),
    USED("dpo_beta", R_READ),
    NOOP("evaluation_strategy", "\"steps\"|\"no\"",
         "deprecated name of eval_strategy: rlhf.c evaluates every eval_steps"),
    NOOP("eval_table_size", "0", R_EVAL_EXTRA),
    NOOP("eval_max_new_tokens", "", R_EVAL_EXTRA),
    REFUSE("dpo_use_logits_to_keep", "", R_REMOVED),
    REFUSE("dpo_generate_during_eval", "", R_REMOVED),
    REFUSE("dpo_norm_loss", "", R_REMOVED),
    USED("rpo_alpha", R_READ),
    REFUSE("s2_attention", "false", R_TRAINER),
    NOOP("flash_attn_rms_norm", "false", R_CPU_KERNEL),
    NOOP("strict", "false",
         "rlhf.c applies every command-line override (strict: true would drop those of keys "
         "absent from the file); `rlhf train --strict` is rlhf.c's own, unrelated, flag"),
    USED("resume_from_checkpoint", R_READ),
    REFUSE("auto_resume_from_checkpoints", "false",
           "rlhf.c resumes only when asked: set resume_from_checkpoint: true"),
    REFUSE("resize_token_embeddings_to_32x", "false", R_MODEL),
    NOOP("mean_resizing_embeddings", "*", "only read when the embeddings are resized"),
    REFUSE("shrink_embeddings", "false", R_MODEL),
    NOOP("embeddings_skip_upcast", "*", R_PRECISION),
    REFUSE("reinit_weights", "false", R_MODEL),
    REFUSE("trainer_cls", "", R_TRAINER),
    USED("rl", R_READ),
    USED("trl", "the trl: block (see its own rows)"),
    NOOP("vllm", "*", R_VLLM_SERVE),
    REFUSE("ebft", "{}", R_TRAINER),
    REFUSE("qat", "{}", R_QUANT),
    REFUSE("quantization", "{}", R_QUANT),
    REFUSE("reward_model", "false",
           "reward-model (sequence classification) training is not "
           "implemented"),
    REFUSE("dynamic_checkpoint", "{}",
           "a different activation checkpointing scheme changes the "
           "memory: rlhf.c has gradient_checkpointing: true"),
    REFUSE("process_reward_model", "false", "process reward-model training is not implemented"),
    REFUSE("center_rewards_coefficient", "", "reward-model training is not implemented"),
    REFUSE("num_labels", "", "sequence classification heads are not implemented"),
    REFUSE("dpo_use_weighting", "false", R_TRAINER),
    USED("dpo_label_smoothing", R_READ),
    USED("precompute_ref_log_probs", R_READ),
    NOOP("dpo_use_liger_kernel", "*", R_CPU_KERNEL),
    NOOP("dpo_padding_free", "*",
         "rlhf.c always trains on the real tokens only (padding is "
         "dropped), which is what padding_free does"),
    USED("dpo_loss_type", R_READ),
    USED("dpo_loss_weights", R_READ),
    /* data */
    USED("datasets", "the datasets: entries (see their own rows)"),
    USED("test_datasets", "the test_datasets: entries (see the datasets rows)"),
    USED("shuffle_merged_datasets", R_READ),
    USED("shuffle_before_merging_datasets", R_READ),
    USED("dataset_prepared_path", R_READ),
    REFUSE("dataset_shard_num", "", R_DATA),
    REFUSE("dataset_shard_idx", "", R_DATA),
    NOOP("skip_prepare_dataset", "false", "rlhf.c always prepares (and caches) the dataset"),
    NOOP("num_dataset_shards_to_save", "", R_PERF),
    REFUSE("pretraining_dataset", "[]",
           "pretraining (streamed raw text) datasets are not "
           "implemented"),
    NOOP("dataset_processes", "", R_PERF),
    NOOP("dataset_num_proc", "", R_PERF),
    REFUSE("dataset_exact_deduplication", "false", R_DATA),
    NOOP("dataset_keep_in_memory", "*", R_PERF),
    NOOP("dataloader_pin_memory", "*", R_PERF),
    NOOP("dataloader_num_workers", "*", R_PERF),
    NOOP("dataloader_prefetch_factor", "*", R_PERF),
    REFUSE("dataloader_drop_last", "false",
           "dropping the last partial batch changes the "
           "examples trained on; rlhf.c plans steps from the "
           "whole dataset, as HF's Trainer does by default"),
    NOOP("accelerator_config", "{}", R_DIST_NOOP),
    NOOP("remove_unused_columns", "*",
         "rlhf.c hands each method only the columns its prompt strategy reads, which is what "
         "both values come to here (Axolotl needs false for KTO; rlhf.c needs nothing)"),
    NOOP("push_dataset_to_hub", "", R_HUB),
    NOOP("hf_use_auth_token", "false", R_HUB),
    USED("device", "where training computes: cpu, cuda (the CUDA backend: weights, gradients "
                   "and AdamW moments in GPU memory), auto (cuda when this build has it and a "
                   "device answers, else cpu; the default), cuda-emu (the CUDA backend emulated "
                   "on the CPU, for tests)"),
    NOOP("device_map", "\"cpu\"|\"auto\"", "rlhf.c runs on the CPU"),
    NOOP("world_size", "*", "the world size is the number of MPI ranks (--nproc N)"),
    NOOP("local_rank", "*", "the rank is MPI's"),
    NOOP("ddp", "*", R_DIST_NOOP),
    USED("seed", R_READ),
    NOOP("ddp_timeout", "*", R_DIST_NOOP),
    NOOP("ddp_bucket_cap_mb", "*", R_DIST_NOOP),
    NOOP("ddp_broadcast_buffers", "*", R_DIST_NOOP),
    NOOP("ddp_find_unused_parameters", "*", R_DIST_NOOP),
    NOOP("do_causal_lm_eval", "false", R_EVAL_EXTRA),
    NOOP("eval_causal_lm_metrics", "[]", R_EVAL_EXTRA),
    NOOP("do_bench_eval", "false", R_EVAL_EXTRA),
    NOOP("bench_dataset", "", R_EVAL_EXTRA),
    NOOP("bench_split", "", R_EVAL_EXTRA),
    NOOP("metric_for_best_model", "", "rlhf.c does not track a best checkpoint"),
    NOOP("greater_is_better", "*", "rlhf.c does not track a best checkpoint"),
    NOOP("loss_watchdog_threshold", "",
         "not implemented; rlhf.c stops after "
         "max_consecutive_bad_steps non-finite steps instead"),
    NOOP("loss_watchdog_patience", "", "not implemented (see loss_watchdog_threshold)"),
    NOOP("gc_steps", "", R_GPU_MEMORY),
    NOOP("torch_empty_cache_steps", "", R_GPU_MEMORY),
    NOOP("gc_collect_steps", "", R_GPU_MEMORY),
    /* precision and memory */
    USED("bf16", R_READ),
    NOOP("fp16", "false", R_PRECISION),
    REFUSE("fp8", "false", R_QUANT),
    REFUSE("fp8_enable_fsdp_float8_all_gather", "false", R_QUANT),
    NOOP("bfloat16", "false", R_PRECISION),
    NOOP("float16", "false", R_PRECISION),
    NOOP("tf32", "false|\"auto\"", R_PRECISION),
    NOOP("float32", "*", "rlhf.c computes in fp32"),
    USED("gradient_checkpointing",
         "recompute each layer's activations in the backward; unset, it is turned on when the "
         "memory plan fits only with it (train/session.c)"),
    NOOP("gradient_checkpointing_kwargs", "*",
         "PyTorch checkpointing details (use_reentrant): "
         "rlhf.c recomputes activations its own way"),
    REFUSE("selective_checkpointing", "{}",
           "a different activation checkpointing scheme "
           "changes the memory: rlhf.c has "
           "gradient_checkpointing: true"),
    REFUSE("activation_offloading", "false",
           "activation offloading changes the memory: not "
           "implemented"),
    REFUSE("layer_offloading", "false", "layer offloading changes the memory: not implemented"),
    NOOP("freeze_mm_modules", "*", R_MULTIMODAL),
    REFUSE("unfrozen_parameters", "[]",
           "training a subset of the weights is not implemented "
           "(full fine-tuning or adapter: lora)"),
    USED("sequence_len", R_READ),
    USED("excess_length_strategy", R_READ),
    NOOP("eval_sequence_len", "", "rlhf.c evaluates with sequence_len"),
    REFUSE("min_sample_len", "", R_DATA),
    USED("max_prompt_len", R_READ),
    USED("sample_packing",
         "SFT only: Axolotl's multipack, several examples per row, attention and positions "
         "reset at each example (data/sample_packing.h); a micro-batch is one row of "
         "micro_batch_size x sequence_len tokens (as Axolotl with flash_attention), or "
         "micro_batch_size rows of sequence_len with multipack_real_batches; refused with rl set"),
    USED("sample_packing_group_size", "examples first-fit packed at a time (sample_packing)"),
    USED("sample_packing_bin_size", "most examples per packed row (sample_packing)"),
    USED("sample_packing_sequentially", "next-fit packing in the shuffled order (sample_packing)"),
    NOOP("sample_packing_mp_start_method", "*",
         "packing worker processes: rlhf.c packs in-process"),
    USED("eval_sample_packing",
         "with sample_packing (unset: true, as Axolotl sets it): held-out examples packed in "
         "dataset order, eval_loss the mean of the rows' mean losses; false: unpacked"),
    NOOP("pad_to_sequence_len", "*",
         "padding does not change the arithmetic: rlhf.c drops it (packed rows too)"),
    NOOP("pad_to_multiple_of", "*", "padding does not change the arithmetic: rlhf.c drops it"),
    REFUSE("curriculum_sampling", "false", R_DATA),
    USED("multipack_real_batches",
         "with sample_packing: micro_batch_size rows of sequence_len tokens per micro-batch "
         "(Axolotl's layout with sdpa/eager attention) instead of one row of micro_batch_size x "
         "sequence_len (its layout with flash_attention, rlhf.c's default)"),
    REFUSE("batch_flattening", "false", R_PACKING),
    REFUSE("use_pose", "false", R_TRAINER),
    REFUSE("pose_split_on_token_ids", "", R_TRAINER),
    REFUSE("pose_max_context_len", "", R_TRAINER),
    REFUSE("pose_num_chunks", "", R_TRAINER),
    NOOP("pretrain_multipack_buffer_size", "*", "only read with pretraining_dataset"),
    NOOP("pretrain_multipack_attn", "*", "only read with pretraining_dataset"),
    NOOP("pretraining_sample_concatenation", "*", "only read with pretraining_dataset"),
    REFUSE("streaming", "false", "streamed datasets are not implemented"),
    NOOP("streaming_multipack_buffer_size", "*", "only read with streaming: true"),
    NOOP("xformers_attention", "false", R_CPU_KERNEL),
    NOOP("sdp_attention", "false", R_CPU_KERNEL),
    NOOP("flex_attention", "false", R_CPU_KERNEL),
    NOOP("flex_attn_compile_kwargs", "{}", R_CPU_KERNEL),
    NOOP("flash_attention", "false", R_CPU_KERNEL),
    NOOP("flash_attn_cross_entropy", "false", R_CPU_KERNEL),
    NOOP("flash_attn_fuse_mlp", "false", R_CPU_KERNEL),
    NOOP("flash_optimum", "false", R_CPU_KERNEL),
    NOOP("sage_attention", "false", R_CPU_KERNEL),
    NOOP("eager_attention", "*", R_CPU_KERNEL),
    NOOP("attn_implementation", "\"eager\"|\"sdpa\"", R_CPU_KERNEL),
    NOOP("gemma4_hybrid_attn_impl", "", R_CPU_KERNEL),
    NOOP("large_head_attention", "false", R_CPU_KERNEL),
    NOOP("flash_attn_d512", "false", R_CPU_KERNEL),
    NOOP("sdpa_varlen", "false", R_CPU_KERNEL),
    NOOP("fused_attn_kernel", "false", R_CPU_KERNEL),
    NOOP("experts_implementation", "", R_CPU_KERNEL),
    REFUSE("quantize_moe_experts", "false", R_QUANT),
    REFUSE("scaling_softmax", "false", R_TRAINER),
    REFUSE("scaling_softmax_factor", "", R_TRAINER),
    REFUSE("scaling_softmax_bias", "", R_TRAINER),
    NOOP("lora_mlp_kernel", "false", R_CPU_KERNEL),
    NOOP("lora_qkv_kernel", "false", R_CPU_KERNEL),
    NOOP("lora_o_kernel", "false", R_CPU_KERNEL),
    NOOP("lora_embedding_kernel", "false", R_CPU_KERNEL),
    NOOP("chunked_cross_entropy", "*",
         "rlhf.c always computes the lm_head, log-softmax and "
         "gather fused and chunked"),
    NOOP("chunked_cross_entropy_num_chunks", "*", "rlhf.c picks its own chunk size"),
    REFUSE("use_eaft", "false", R_TRAINER),
    REFUSE("eaft_alpha", "", R_TRAINER),
    REFUSE("eaft_k", "", R_TRAINER),
    NOOP("tiled_mlp", "false", R_CPU_KERNEL),
    NOOP("tiled_mlp_num_shards", "*", R_CPU_KERNEL),
    NOOP("tiled_mlp_use_original_mlp", "*", R_CPU_KERNEL),
    NOOP("llama4_linearized_experts", "*", "Llama 4 MoE models are not supported"),
    REFUSE("deepspeed", "", R_SHARDING),
    REFUSE("deepcompile", "false", R_SHARDING),
    REFUSE("fsdp", "[]", R_SHARDING),
    REFUSE("fsdp_config", "{}", R_SHARDING),
    REFUSE("fsdp_version", "", R_SHARDING),
    NOOP("fp32_norms", "*", "rlhf.c computes every norm in fp32"),
    NOOP("fp32_norm_classes", "*", "rlhf.c computes every norm in fp32"),
    NOOP("fsdp_final_state_dict_type", "*", R_DIST_NOOP),
    USED("val_set_size", R_READ),
    REFUSE("dp_shard_size", "1", R_SHARDING),
    NOOP("dp_replicate_size", "*", "data-parallel replicas are the MPI ranks (--nproc N)"),
    REFUSE("sequence_parallel_degree", "1", R_SHARDING),
    REFUSE("context_parallel_size", "1", R_SHARDING),
    NOOP("heads_k_stride", "*", "only read with context_parallel_size > 1"),
    NOOP("ring_attn_func", "*", "only read with context_parallel_size > 1"),
    REFUSE("tensor_parallel_size", "1", R_SHARDING),
    REFUSE("special_tokens", "{}", R_MODEL),
    REFUSE("tokens", "[]", R_MODEL),
    REFUSE("added_tokens_overrides", "{}", R_MODEL),
    NOOP("torch_compile", "false|\"auto\"", R_CPU_KERNEL),
    NOOP("torch_compile_backend", "*", R_CPU_KERNEL),
    NOOP("torch_compile_mode", "*", R_CPU_KERNEL),
    NOOP("torch_compile_options", "*", R_CPU_KERNEL),
    /* steps, saving, evaluation, logging */
    USED("max_steps", R_READ),
    USED("warmup_steps", R_READ),
    USED("warmup_ratio", R_READ),
    USED("eval_steps", R_READ),
    NOOP("evals_per_epoch", "", "not implemented: set eval_steps"),
    NOOP("eval_strategy", "\"steps\"|\"no\"", "rlhf.c evaluates every eval_steps (none when 0)"),
    USED("save_steps", R_READ),
    NOOP("saves_per_epoch", "",
         "not implemented: set save_steps (the end of training always "
         "saves)"),
    NOOP("save_strategy", "\"steps\"", "rlhf.c saves every save_steps and at the end"),
    USED("save_total_limit", R_READ),
    NOOP("save_first_step", "false", "not implemented: checkpoints come every save_steps"),
    USED("logging_steps", R_READ),
    REFUSE("early_stopping_patience", "",
           "early stopping changes how long the run trains: not "
           "implemented"),
    REFUSE("load_best_model_at_end", "false",
           "the final model is the last step's: rlhf.c does "
           "not track a best checkpoint"),
    NOOP("save_only_model", "false",
         "rlhf.c's checkpoints always hold the optimizer state, so "
         "they can resume"),
    USED("use_tensorboard", "TensorBoard event files under output_dir/runs (report/)"),
    NOOP("profiler_steps", "", "the PyTorch profiler is not part of rlhf.c"),
    NOOP("profiler_steps_start", "", "the PyTorch profiler is not part of rlhf.c"),
    NOOP("include_tokens_per_second", "*", "the progress line shows tokens per second anyway"),
    NOOP("include_tkps", "*", "the progress line shows tokens per second anyway"),
    REFUSE("neftune_noise_alpha", "0", R_TRAINER),
    /* preference and RL methods */
    USED("orpo_alpha", R_READ),
    USED("simpo_gamma", R_READ),
    USED("cpo_alpha", R_READ),
    USED("kto_desirable_weight", R_READ),
    USED("kto_undesirable_weight", R_READ),
    USED("rl_beta", R_READ),
    NOOP("max_memory", "", R_GPU_MEMORY),
    NOOP("gpu_memory_limit", "", R_GPU_MEMORY),
    NOOP("low_cpu_mem_usage", "*", "weights are memory-mapped and loaded once anyway"),
    USED("chat_template", R_READ),
    USED("chat_template_jinja", R_READ),
    REFUSE("chat_template_kwargs", "{}",
           "extra chat-template variables change the rendered "
           "training text; not implemented at the top level "
           "(trl.chat_template_kwargs is, for GRPO prompts)"),
    REFUSE("eot_tokens", "[]",
           "custom end-of-turn tokens change the trained labels: not "
           "implemented"),
    NOOP("default_system_message", "",
         "Axolotl replaces a text its own templates do not "
         "contain, so it changes nothing there either"),
    REFUSE("fix_untrained_tokens", "", R_MODEL),
    NOOP("is_preprocess", "*", R_INTERNAL),
    NOOP("preprocess_iterable", "*", R_PERF),
    NOOP("total_num_tokens", "*", R_INTERNAL),
    NOOP("total_supervised_tokens", "*", R_INTERNAL),
    NOOP("sample_packing_eff_est", "",
         "Axolotl's estimate of how full packed rows are, which plans its steps before packing "
         "when set; rlhf.c packs first and plans on the rows it made (the start-up log gives "
         "their efficiency)"),
    NOOP("axolotl_config_path", "*", R_INTERNAL),
    NOOP("is_falcon_derived_model", "*", R_INTERNAL),
    NOOP("is_llama_derived_model", "*", R_INTERNAL),
    NOOP("is_mistral_derived_model", "*", R_INTERNAL),
    NOOP("is_qwen_derived_model", "*", R_INTERNAL),
    NOOP("plugins", "[]",
         "Axolotl plugins are Python packages rlhf.c does not load; keys they "
         "add are reported as unknown"),
    NOOP("generate_samples", "false", R_EVAL_EXTRA),
    NOOP("num_generation_samples", "", R_EVAL_EXTRA),
    NOOP("generation_max_new_tokens", "", R_EVAL_EXTRA),
    NOOP("generation_temperature", "", R_EVAL_EXTRA),
    NOOP("generation_top_p", "", R_EVAL_EXTRA),
    NOOP("generation_top_k", "", R_EVAL_EXTRA),
    NOOP("generation_prompt_ratio", "", R_EVAL_EXTRA),
    NOOP("generation_do_sample", "", R_EVAL_EXTRA),
    /* rlhf.c's own and TRL's keys */
    USED("max_consecutive_bad_steps", "rlhf.c: stop after this many non-finite steps in a row"),
    USED("zero_stage", "rlhf.c: 1 shards the AdamW moments over the MPI ranks"),
    USED("use_rslora", "alias of peft_use_rslora"),
    USED("dpo_legacy_compat", "rlhf.c: TRL <= 0.28 meanings of the DPO keys"),
    USED("rl_adapter_ref_model", R_READ),
    USED("cpo_loss_type", "rlhf.c: CPOTrainer's loss_type for rl: cpo"),
    USED("grpo_rng", "rlhf.c: torch (TRL's draws for the seed, one process) or streams (any "
                     "number of ranks) for GRPO's sampling and row shuffle"),
    USED("overwrite_output_dir", "TrainingArguments: replace the run already in output_dir"),
};

static const KeyStatusRow trl_rows[] = {
    USED("beta", "the method's beta (every method)"),
    USED_BY("max_completion_length", M_GRPO, "GRPOConfig"),
    USED_BY("use_vllm", M_GRPO,
            "GRPOConfig: with vllm_mode: server, generation on `rlhf serve` (grpo/vllm_server.c); "
            "colocate is the in-process engine"),
    USED_BY("vllm_mode", M_GRPO, "GRPOConfig: server (rlhf serve) or colocate (in-process)"),
    USED_BY("vllm_server_host", M_GRPO, "GRPOConfig: the generation server's host"),
    USED_BY("vllm_server_port", M_GRPO, "GRPOConfig: the generation server's port"),
    USED_BY("vllm_server_base_url", M_GRPO,
            "GRPOConfig: the generation server's URL (over host and port)"),
    USED_BY("vllm_server_timeout", M_GRPO,
            "GRPOConfig: how long to wait for the server's /health/"),
    REFUSE("vllm_guided_decoding_regex", "",
           "guided (constrained) decoding changes the "
           "completions sampled: not implemented"),
    USED_BY("reward_funcs", M_GRPO, "GRPOConfig"),
    USED_BY("reward_weights", M_GRPO, "GRPOConfig"),
    USED_BY("generation_batch_size", M_GRPO, "GRPOConfig"),
    USED_BY("num_generations", M_GRPO, "GRPOConfig"),
    USED_BY("log_completions", M_GRPO, "GRPOConfig"),
    USED_BY("num_completions_to_print", M_GRPO, "GRPOConfig: rows of the printed sample table"),
    USED_BY("importance_sampling_level", M_GRPO, "GRPOConfig"),
    USED_BY("sync_ref_model", M_GRPO, "GRPOConfig (TR-DPO reference syncing; GRPO only here)"),
    USED_BY("ref_model_mixup_alpha", M_GRPO, "GRPOConfig, with sync_ref_model"),
    USED_BY("ref_model_sync_steps", M_GRPO, "GRPOConfig, with sync_ref_model"),
    USED_BY("scale_rewards", M_GRPO, "GRPOConfig"),
    USED_BY("temperature", M_GRPO, "GRPOConfig"),
    USED_BY("top_p", M_GRPO, "GRPOConfig"),
    USED_BY("top_k", M_GRPO, "GRPOConfig"),
    USED_BY("min_p", M_GRPO, "GRPOConfig"),
    USED_BY("repetition_penalty", M_GRPO, "GRPOConfig"),
    USED_BY("generation_kwargs", M_GRPO,
            "GRPOConfig: sampling keys and stop strings (others refused)"),
    USED_BY("chat_template_kwargs", M_GRPO, "GRPOConfig"),
    USED_BY("num_iterations", M_GRPO, "GRPOConfig"),
    USED_BY("epsilon", M_GRPO, "GRPOConfig"),
    USED_BY("epsilon_high", M_GRPO, "GRPOConfig"),
    NOOP("use_liger_loss", "false", R_CPU_KERNEL),
    USED_BY("loss_type", M_GRPO | M_KTO, "GRPOConfig / KTOConfig"),
    USED_BY("mask_truncated_completions", M_GRPO, "GRPOConfig"),
    NOOP("vllm_enable_sleep_mode", "*", R_VLLM),
    USED_BY("rollout_func", M_GRPO,
            "GRPOConfig: the user's rollout function (grpo/python_rollout.c)"),
    USED_BY("multi_objective_aggregation", M_GRPO, "GRPOConfig"),
    USED_BY("max_prompt_length", M_GRPO, "GRPO prompts cut to their last tokens (TRL <= 0.27)"),
    REFUSE("use_data_producer", "false",
           "asynchronous generation trains on completions of "
           "older weights: not implemented"),
    REFUSE("async_prefetch", "false",
           "asynchronous generation trains on completions of older "
           "weights: not implemented"),
    NOOP("prefetch_depth", "*", R_ASYNC_ONLY),
    NOOP("vllm_sync_interval", "*", R_ASYNC_ONLY),
    NOOP("streaming_partial_batch", "*", R_ASYNC_ONLY),
    NOOP("streaming_min_groups", "*", R_ASYNC_ONLY),
    NOOP("vllm_importance_sampling_correction", "*",
         "generation and training share the weights and kernels here (rlhf serve is given the "
         "trainer's exact weights before each generation), so there is no vLLM/trainer mismatch "
         "to correct"),
    NOOP("vllm_importance_sampling_mode", "*", "only read with vLLM generation"),
    NOOP("vllm_importance_sampling_cap", "*", "only read with vLLM generation"),
    REFUSE("off_policy_mask_threshold", "",
           "off-policy sequence masking changes the loss: not "
           "implemented"),
    USED_BY("use_bias_correction_kl", M_GRPO, "GRPOConfig"),
    NOOP("reward_num_workers", "*", R_ASYNC_ONLY),
    USED_BY("replay_buffer_size", M_GRPO, "rlhf.c's replay buffer (grpo/replay_buffer.h)"),
    NOOP("replay_recompute_logps", "*", R_ASYNC_ONLY),
    NOOP("reroll_start_fraction", "*", R_ASYNC_ONLY),
    NOOP("reroll_max_groups", "*", R_ASYNC_ONLY),
    NOOP("skip_zero_advantage_batches", "*", R_ASYNC_ONLY),
    NOOP("vllm_lora_sync", "*", R_ASYNC_ONLY),
    /* TRL GRPOConfig fields Axolotl's schema does not list */
    USED_BY("num_generations_eval", M_GRPO, "GRPOConfig"),
    USED_BY("steps_per_generation", M_GRPO, "GRPOConfig"),
    USED_BY("delta", M_GRPO, "GRPOConfig"),
    USED_BY("top_entropy_quantile", M_GRPO, "GRPOConfig"),
    USED_BY("shuffle_dataset", M_GRPO, "GRPOConfig"),
};

/* What `rlhf vllm-serve` (cli/vllm_serve.c) does with each key; rlhf train reads none of them. */
static const KeyStatusRow vllm_rows[] = {
    NOOP("device", "*", "vLLM's device: rlhf serve runs on the CPU"),
    USED("tensor_parallel_size",
         "rlhf vllm-serve: 1 only; a value above 1 is refused (rlhf serve runs one engine in one "
         "process on the CPU)"),
    USED("data_parallel_size",
         "rlhf vllm-serve: 1 only; a value above 1 is refused (one engine, no replicas)"),
    NOOP("gpu_memory_utilization", "*",
         "vLLM's share of GPU memory for weights and KV cache: rlhf serve runs on the CPU and "
         "sizes each request's KV cache for that request"),
    USED("dtype",
         "rlhf vllm-serve: auto, float32: fp32 weights (what rlhf train pushes); bfloat16: bf16 "
         "weights (rlhf serve --bf16, which takes no weight updates); float16/half refused"),
    USED("max_model_len",
         "rlhf vllm-serve: caps prompt + completion tokens (rlhf serve --max-model-len; at most "
         "max_position_embeddings)"),
    NOOP("enable_prefix_caching", "*",
         "vLLM reuses the KV cache of a prompt prefix across requests, a speed-up with the same "
         "outputs: rlhf serve computes each request's prompt"),
    USED("host", "rlhf vllm-serve: the address it listens on (default 0.0.0.0, as Axolotl's)"),
    USED("port", "rlhf vllm-serve: the port it listens on (default 8000; 0 picks a free one)"),
    NOOP("enable_reasoning", "*",
         "vLLM's reasoning parser for chat responses: rlhf serve answers the whole text as "
         "content (the trainer's /generate/ never parses)"),
    NOOP("reasoning_parser", "*",
         "vLLM's reasoning parser for chat responses: rlhf serve answers the whole text as "
         "content (the trainer's /generate/ never parses)"),
    NOOP("enforce_eager", "*", "CUDA graphs on or off, the same outputs: rlhf serve has none"),
    NOOP("serve_module", "*",
         "Axolotl's server script: rlhf vllm-serve always runs rlhf serve, which takes the "
         "trainer's (LoRA-merged) weights over POST /update_safetensors/"),
    NOOP("worker_extension_cls", "*",
         "vLLM's NCCL weight-sync worker: rlhf serve takes weights over HTTP "
         "(POST /update_safetensors/)"),
};

static const char R_STRATEGY[] = "read by the prompt strategies (src/data/)";
static const KeyStatusRow dataset_rows[] = {
    USED("path", R_READ),
    USED("split", R_READ),
    USED("type", R_READ),
    REFUSE("input_transform", "", R_DATA),
    REFUSE("shards", "", R_DATA),
    REFUSE("shards_idx", "", R_DATA),
    NOOP("preprocess_shards", "*", R_PERF),
    REFUSE("conversation", "",
           "the sharegpt conversation formats are deprecated upstream: use "
           "type: chat_template"),
    USED("chat_template", R_STRATEGY),
    USED("chat_template_jinja", R_STRATEGY),
    USED("data_files", R_READ),
    REFUSE("input_format", "", R_DATA),
    USED("name", "a Hub dataset's configuration, passed to datasets.load_dataset"),
    USED("ds_type", R_READ),
    REFUSE("field", "",
           "the completion strategy's text field is not configurable in rlhf.c "
           "(it reads `text`)"),
    REFUSE("field_human", "",
           "the sharegpt formats are deprecated upstream: use type: "
           "chat_template"),
    REFUSE("field_model", "",
           "the sharegpt formats are deprecated upstream: use type: "
           "chat_template"),
    USED("field_messages", R_STRATEGY),
    USED("field_tools", R_STRATEGY),
    REFUSE("field_thinking", "", "reasoning-trace fields are not implemented"),
    REFUSE("template_thinking_key", "", "reasoning-trace fields are not implemented"),
    USED("message_field_role", R_STRATEGY),
    USED("message_field_content", R_STRATEGY),
    USED("message_property_mappings", R_STRATEGY),
    REFUSE("message_field_training", "",
           "per-message training flags are not implemented "
           "(roles_to_train is)"),
    REFUSE("message_field_training_detail", "",
           "per-message training spans are not "
           "implemented"),
    REFUSE("split_thinking", "false", "reasoning-trace splitting is not implemented"),
    REFUSE("logprobs_field", "", "knowledge distillation is not implemented"),
    REFUSE("temperature", "", "knowledge distillation is not implemented"),
    USED("roles_to_train", R_STRATEGY),
    USED("train_on_eos", R_STRATEGY),
    USED("train_on_eot", R_STRATEGY),
    USED("roles", R_STRATEGY),
    USED("drop_system_message", R_STRATEGY),
    NOOP("trust_remote_code", "false", "local JSON/JSONL files run no code"),
    USED("revision", "a Hub dataset's branch, tag or commit, passed to datasets.load_dataset"),
    USED("field_chosen", R_STRATEGY),
    USED("field_rejected", R_STRATEGY),
    USED("field_system", R_STRATEGY),
};

static const char R_SFT_FORMAT[] =
    "user-defined SFT prompt formats are not implemented (type: chat_template, alpaca or "
    "completion); the preference and KTO formats are";
static const KeyStatusRow dataset_type_rows[] = {
    USED("field_system", "the DPO/KTO user_defined.default strategy (data/pref_user_defined.c)"),
    USED("field_prompt", "the DPO/KTO user_defined.default strategy"),
    USED("field_chosen", "the DPO user_defined.default strategy"),
    USED("field_rejected", "the DPO user_defined.default strategy"),
    USED("prompt_format", "the DPO/KTO user_defined.default strategy"),
    USED("chosen_format", "the DPO user_defined.default strategy"),
    USED("rejected_format", "the DPO user_defined.default strategy"),
    USED("field_completion", "the KTO user_defined.default strategy"),
    USED("field_label", "the KTO user_defined.default strategy"),
    USED("completion_format", "the KTO user_defined.default strategy"),
    REFUSE("system_prompt", "", R_SFT_FORMAT),
    REFUSE("system_format", "", R_SFT_FORMAT),
    REFUSE("field_instruction", "", R_SFT_FORMAT),
    REFUSE("field_input", "", R_SFT_FORMAT),
    REFUSE("field_output", "", R_SFT_FORMAT),
    REFUSE("format", "", R_SFT_FORMAT),
    REFUSE("no_input_format", "", R_SFT_FORMAT),
};

#undef USED
#undef USED_BY
#undef NOOP
#undef REFUSE

static const struct {
    const KeyStatusRow *rows;
    size_t n;
    const char *prefix;
} scopes[KEY_SCOPE_COUNT] = {
    [KEY_SCOPE_TOP] = {top_rows, sizeof top_rows / sizeof *top_rows, ""},
    [KEY_SCOPE_TRL] = {trl_rows, sizeof trl_rows / sizeof *trl_rows, "trl."},
    [KEY_SCOPE_VLLM] = {vllm_rows, sizeof vllm_rows / sizeof *vllm_rows, "vllm."},
    [KEY_SCOPE_DATASET] = {dataset_rows, sizeof dataset_rows / sizeof *dataset_rows, "datasets[]."},
    [KEY_SCOPE_DATASET_TYPE] = {dataset_type_rows,
                                sizeof dataset_type_rows / sizeof *dataset_type_rows,
                                "datasets[].type."},
};

const char *key_scope_prefix(KeyScope scope) {
    return scopes[scope].prefix;
}

const KeyStatusRow *key_status_rows(KeyScope scope, size_t *n) {
    *n = scopes[scope].n;
    return scopes[scope].rows;
}

const KeyStatusRow *key_status_find(KeyScope scope, const char *name) {
    for (size_t i = 0; i < scopes[scope].n; i++)
        if (strcmp(scopes[scope].rows[i].name, name) == 0) return &scopes[scope].rows[i];
    return NULL;
}

/* Levenshtein distance with adjacent transpositions counted as one edit (the "optimal string
 * alignment" distance): `feild` is one edit from `field`. */
static size_t typo_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), w = lb + 1;
    size_t *d = xmalloc((la + 1) * w * sizeof *d);
    for (size_t i = 0; i <= la; i++)
        d[i * w] = i;
    for (size_t j = 0; j <= lb; j++)
        d[j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t best = d[(i - 1) * w + j - 1] + (a[i - 1] != b[j - 1]);
            if (d[(i - 1) * w + j] + 1 < best) best = d[(i - 1) * w + j] + 1;
            if (d[i * w + j - 1] + 1 < best) best = d[i * w + j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[(i - 2) * w + j - 2] + 1 < best)
                best = d[(i - 2) * w + j - 2] + 1;
            d[i * w + j] = best;
        }
    size_t r = d[la * w + lb];
    free(d);
    return r;
}

const char *key_status_nearest(KeyScope scope, const char *name) {
    size_t len = strlen(name);
    size_t cutoff = len >= 6 ? (len / 4 > 2 ? len / 4 : 2) : 1;
    const char *best = NULL;
    size_t best_d = cutoff + 1;
    for (size_t i = 0; i < scopes[scope].n; i++) {
        size_t d = typo_distance(name, scopes[scope].rows[i].name);
        if (d < best_d) best_d = d, best = scopes[scope].rows[i].name;
    }
    return best;
}

static bool same_value(const json_t *a, const json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal(a, b);
}

bool key_status_is_neutral(const KeyStatusRow *row, const json_t *value, const json_t *doc) {
    if (!value || json_is_null(value) || row->status == KEY_USED) return true;
    const char *p = row->neutral;
    if (!p || !*p) return false;
    if (strcmp(p, "*") == 0) return true;
    if (*p == '=') {
        const json_t *other = doc ? json_object_get(doc, p + 1) : NULL;
        return other && same_value(other, value);
    }
    while (*p) {
        size_t len = strcspn(p, "|");
        json_t *v = json_loadb(p, len, JSON_DECODE_ANY, NULL);
        bool same = v && same_value(v, value);
        json_decref(v);
        if (same) return true;
        p += len;
        if (*p == '|') p++;
    }
    return false;
}

void key_status_print_markdown(FILE *out) {
    static const char *const status[] = {"used", "no-op", "refused"};
    fprintf(out, "| key | status | accepted silently | why |\n|---|---|---|---|\n");
    for (int s = 0; s < KEY_SCOPE_COUNT; s++)
        for (size_t i = 0; i < scopes[s].n; i++) {
            const KeyStatusRow *r = &scopes[s].rows[i];
            char neutral[256] = "";
            if (r->status != KEY_USED) {
                const char *n = r->neutral ? r->neutral : "";
                if (strcmp(n, "*") == 0)
                    snprintf(neutral, sizeof neutral, "any value");
                else if (*n == '=')
                    snprintf(neutral, sizeof neutral, "null, the value of `%s`", n + 1);
                else {
                    /* the '|' between values would end a Markdown cell */
                    size_t k = 0;
                    for (; *n && k + 3 < sizeof neutral; n++)
                        k += (size_t)snprintf(neutral + k, sizeof neutral - k, "%s",
                                              *n == '|' ? ", " : (char[]){*n, 0});
                    snprintf(neutral + k, sizeof neutral - k, "%snull", k ? ", " : "");
                }
            }
            fprintf(out, "| `%s%s` | %s | %s | %s |\n", scopes[s].prefix, r->name,
                    status[r->status], neutral, r->reason);
        }
}
