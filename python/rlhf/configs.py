"""Config classes with TRL 1.9's names, fields and defaults, and their translation into the keys
of rlhf.c's YAML config (README.md).

Each class accepts every field TRL's class of the same name accepts, with TRL's default (the
table in _trl_fields.py is read from TRL itself by tools/reference/dump_trl_config_fields.py).
A field rlhf.c acts on becomes its YAML key; a field that only concerns PyTorch, devices,
logging services or the Hub is accepted and has no effect; any other field set to something
other than its default gets a warning saying that rlhf.c ignores it, as the YAML config warns
about keys it does not act on. Unknown field names are a TypeError, as in TRL.
"""

import copy
import dataclasses
import math
import os
import typing
import warnings

from ._trl_fields import CONFIGS, TRAINING_ARGUMENTS

# Fields that do not change what a single-process CPU run computes (devices, distributed
# setups, data loader workers, logging integrations, the Hub, PyTorch switches): accepted
# without a word. push_to_hub and hub_* are passed on by _common_keys when push_to_hub is set.
_NO_EFFECT = {
    "accelerator_config", "activation_checkpointing", "activation_checkpointing_kwargs",
    "activation_offloading", "auto_find_batch_size", "average_tokens_across_devices",
    "batch_eval_metrics", "bf16", "bf16_full_eval", "cast_lm_head_to_fp32",
    "dataloader_drop_last", "dataloader_in_order", "dataloader_multiprocessing_context",
    "dataloader_num_workers", "dataloader_persistent_workers", "dataloader_pin_memory",
    "dataloader_prefetch_factor", "dataset_num_proc", "ddp_backend", "ddp_broadcast_buffers",
    "ddp_bucket_cap_mb", "ddp_find_unused_parameters", "ddp_static_graph", "ddp_timeout",
    "debug", "deepspeed", "disable_dropout", "disable_tqdm", "do_eval", "do_predict",
    "do_train", "ds3_gather_for_generation", "enable_jit_checkpoint", "eval_accumulation_steps",
    "eval_do_concat_batches", "eval_use_gather_object", "fp16_full_eval", "fsdp",
    "fsdp_config", "full_determinism", "gradient_checkpointing_kwargs", "hub_always_push",
    "hub_model_id", "hub_private_repo", "hub_revision", "hub_strategy", "hub_token",
    "ignore_data_skip", "include_for_metrics", "include_num_input_tokens_seen",
    "label_names", "length_column_name", "liger_kernel_config", "local_rank",
    "log_level", "log_level_replica", "log_on_each_node", "logging_nan_inf_filter",
    "model_init_kwargs", "pad_to_multiple_of", "padding_free", "parallelism_config",
    "per_device_eval_batch_size", "prediction_loss_only", "project", "push_to_hub",
    "remove_unused_columns", "restore_callback_states_from_checkpoint",
    "router_aux_loss_coef", "run_name", "save_on_each_node", "save_only_model",
    "skip_memory_metrics", "tf32", "torch_compile", "torch_compile_backend",
    "torch_compile_mode", "torch_empty_cache_steps", "trackio_bucket_id", "trackio_space_id",
    "trackio_static_space_id", "trust_remote_code", "use_cache", "use_cpu",
    "use_liger_kernel", "precompute_ref_batch_size", "generate_during_eval",
    "is_encoder_decoder", "padding_value", "log_multimodal",
    "log_unique_prompts", "log_completions_hub_repo", "cache_implementation",
    "eval_on_start", "eval_delay", "train_sampling_strategy",
    "logging_strategy", "resume_from_checkpoint", "data_seed",
}


class _Config:
    """What every config class shares: defaults HF fills in, and the YAML translation."""

    _method = None  # rlhf.c's `rl` (None: supervised fine-tuning)

    def __post_init__(self):
        if self.output_dir is None:
            self.output_dir = "trainer_output"  # transformers' default

    # ---- the translation ----

    def _yaml(self):
        """The YAML keys for these args: (keys, warnings). Keys that need the trainer (model,
        datasets, adapter, reward functions) are added by the trainer."""
        keys, used, notes = {}, set(), []
        self._common_keys(keys, used)
        self._method_keys(keys, used)
        defaults = _DEFAULTS[type(self).__name__]
        for f in dataclasses.fields(self):
            name = f.name
            if name in used or name in _NO_EFFECT:
                continue
            value = getattr(self, name)
            if not _same(value, defaults[name]):
                notes.append(
                    f"{type(self).__name__}.{name}={value!r} is not supported by rlhf.c and is "
                    "ignored"
                )
        return keys, notes

    def _common_keys(self, keys, used):
        """TrainingArguments' fields that rlhf.c acts on."""
        def take(field, key=None, value=None):
            used.add(field)
            keys[key or field] = getattr(self, field) if value is None else value

        take("output_dir")
        take("per_device_train_batch_size", "micro_batch_size")
        take("gradient_accumulation_steps")
        take("num_train_epochs", "num_epochs")
        used.add("max_steps")
        if self.max_steps is not None and self.max_steps > 0:
            keys["max_steps"] = self.max_steps
        take("learning_rate")
        take("lr_scheduler_type", "lr_scheduler", _enum_value(self.lr_scheduler_type))
        used.add("lr_scheduler_kwargs")
        if self.lr_scheduler_kwargs:
            raise ValueError(
                "lr_scheduler_kwargs: rlhf.c's schedules (constant, constant_with_warmup, "
                "linear, cosine) take no arguments"
            )
        # transformers 5: warmup_steps below 1 is a ratio of the total steps
        used.add("warmup_steps")
        if self.warmup_steps and 0 < self.warmup_steps < 1:
            keys["warmup_ratio"] = float(self.warmup_steps)
        else:
            keys["warmup_steps"] = int(self.warmup_steps or 0)
        for f in ("weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm"):
            take(f)
        take("optim", "optimizer", _enum_value(self.optim))
        used.update(("optim_args", "optim_target_modules"))
        if self.optim_args or self.optim_target_modules:
            raise ValueError("optim_args / optim_target_modules: rlhf.c's AdamW takes none")
        used.add("logging_steps")
        if not (isinstance(self.logging_steps, int) or float(self.logging_steps).is_integer()):
            raise ValueError(
                f"logging_steps={self.logging_steps!r}: rlhf.c takes a whole number of steps"
            )
        keys["logging_steps"] = int(self.logging_steps)
        used.update(("save_strategy", "save_steps"))
        strategy = _enum_value(self.save_strategy)
        if strategy == "no":
            keys["save_steps"] = 0
        elif strategy == "steps":
            if not float(self.save_steps).is_integer():
                raise ValueError(
                    f"save_steps={self.save_steps!r}: rlhf.c takes a whole number of steps"
                )
            keys["save_steps"] = int(self.save_steps)
        else:
            raise ValueError(
                f"save_strategy={strategy!r}: rlhf.c saves every save_steps steps ('steps') or "
                "only when interrupted ('no')"
            )
        take("save_total_limit", value=self.save_total_limit or 0)
        used.update(("eval_strategy", "eval_steps"))
        strategy = _enum_value(self.eval_strategy)
        if strategy == "steps":
            keys["eval_steps"] = int(self.eval_steps or self.logging_steps)
        elif strategy not in ("no", None):
            raise ValueError(
                f"eval_strategy={strategy!r}: rlhf.c evaluates every eval_steps steps ('steps'), "
                "or once at the end ('no' with an eval_dataset)"
            )
        take("seed")
        # report_to as TrainingArguments reads it ("none", "all", a name or a list): rlhf.c
        # writes TensorBoard itself and runs wandb in this interpreter; run_name names the run
        used.add("report_to")
        report_to = self.report_to
        if isinstance(report_to, str):
            report_to = [report_to]
        report_to = [_enum_value(r) for r in report_to or []]
        if report_to and report_to != ["none"]:
            keys["report_to"] = report_to
            if self.run_name and ("wandb" in report_to or "all" in report_to):
                keys["wandb_name"] = self.run_name
        # push_to_hub: the library creates the repository when the trainer is made and pushes
        # each checkpoint as hub_strategy says (Trainer's init_hf_repo, _push_from_checkpoint);
        # save_model and push_to_hub push the output directory. hub_private_repo None (the
        # account's default) is passed as False: the config key is a boolean.
        if self.push_to_hub:
            keys["push_to_hub"] = True
            keys["hub_model_id"] = self.hub_model_id or os.path.basename(
                os.path.abspath(self.output_dir))
            keys["hub_strategy"] = _enum_value(self.hub_strategy)
            keys["hub_private_repo"] = bool(self.hub_private_repo)
            if self.hub_revision:
                keys["hub_revision"] = self.hub_revision
            if self.hub_token:
                keys["hub_token"] = self.hub_token
        used.add("gradient_checkpointing")
        keys["gradient_checkpointing"] = bool(self.gradient_checkpointing)
        used.update(("fp16",))
        if self.fp16:
            warnings.warn("fp16=True: rlhf.c computes in fp32 on the CPU", stacklevel=4)

    def _method_keys(self, keys, used):
        """The method's own fields; each config class adds its own."""


def _enum_value(v):
    return getattr(v, "value", v)


def _same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return _enum_value(a) == _enum_value(b)


def _take(self, keys, used, field, key, value=None):
    used.add(field)
    keys[key] = getattr(self, field) if value is None else value


def _max_length(self, keys, used):
    used.add("max_length")
    if self.max_length is not None:
        keys["sequence_len"] = int(self.max_length)
    else:  # TRL: no truncation
        keys["sequence_len"] = 1 << 20


# ---------------------------------------------------------------- per method


def _sft_keys(self, keys, used):
    _max_length(self, keys, used)
    # read by SFTTrainer when it writes the dataset (data.py)
    used.update(("dataset_text_field", "assistant_only_loss", "completion_only_loss",
                 "shuffle_dataset", "chat_template_path", "dataset_kwargs"))
    if self.chat_template_path:
        keys["chat_template"] = "jinja"
        keys["chat_template_jinja"] = self.chat_template_path
    used.add("packing")
    if self.packing:
        raise ValueError("packing=True is not supported by rlhf.c yet")
    used.add("loss_type")
    if self.loss_type not in (None, "nll"):
        raise ValueError(f"loss_type={self.loss_type!r}: rlhf.c's SFT loss is nll")


def _dpo_keys(self, keys, used):
    _max_length(self, keys, used)
    _take(self, keys, used, "beta", "rl_beta")
    loss_type = self.loss_type if isinstance(self.loss_type, (list, tuple)) else [self.loss_type]
    _take(self, keys, used, "loss_type", "dpo_loss_type", [_enum_value(t) for t in loss_type])
    used.add("loss_weights")
    if self.loss_weights is not None:
        keys["dpo_loss_weights"] = [float(w) for w in self.loss_weights]
    _take(self, keys, used, "label_smoothing", "dpo_label_smoothing")
    _take(self, keys, used, "precompute_ref_log_probs", "precompute_ref_log_probs")
    _truncation(self, keys, used)


def _truncation(self, keys, used):
    """TRL truncates a too long prompt + completion (keep_start); Axolotl's `truncate` cuts the
    response to fit, which is the same cut."""
    used.add("truncation_mode")
    mode = getattr(self, "truncation_mode", "keep_start")
    if mode != "keep_start":
        raise ValueError(f"truncation_mode={mode!r}: rlhf.c keeps the start (keep_start)")
    keys["excess_length_strategy"] = "truncate"


def _kto_keys(self, keys, used):
    _max_length(self, keys, used)
    _take(self, keys, used, "beta", "rl_beta")
    _take(self, keys, used, "desirable_weight", "kto_desirable_weight")
    _take(self, keys, used, "undesirable_weight", "kto_undesirable_weight")
    _take(self, keys, used, "precompute_ref_log_probs", "precompute_ref_log_probs")
    used.add("loss_type")
    keys.setdefault("trl", {})["loss_type"] = self.loss_type
    keys["excess_length_strategy"] = "truncate"


def _orpo_keys(self, keys, used):
    _max_length(self, keys, used)
    _take(self, keys, used, "beta", "rl_beta")
    keys["excess_length_strategy"] = "truncate"


def _cpo_keys(self, keys, used):
    _max_length(self, keys, used)
    _take(self, keys, used, "beta", "rl_beta")
    _take(self, keys, used, "loss_type", "cpo_loss_type")
    _take(self, keys, used, "cpo_alpha", "cpo_alpha")
    _take(self, keys, used, "simpo_gamma", "simpo_gamma")
    keys["excess_length_strategy"] = "truncate"


# GRPOConfig fields that go into the trl: block under their own names (None: left out, so the
# C side derives or defaults it exactly as TRL does).
_GRPO_TRL_FIELDS = (
    "num_generations", "num_generations_eval", "max_completion_length", "shuffle_dataset",
    "generation_batch_size", "steps_per_generation", "temperature", "top_p", "top_k", "min_p",
    "repetition_penalty", "chat_template_kwargs", "beta", "num_iterations", "epsilon", "delta",
    "epsilon_high", "importance_sampling_level", "reward_weights", "multi_objective_aggregation",
    "scale_rewards", "loss_type", "mask_truncated_completions", "top_entropy_quantile",
    "use_bias_correction_kl", "log_completions", "num_completions_to_print", "replay_buffer_size",
    "sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps", "generation_kwargs",
    # generation on `rlhf serve` (use_vllm=True, vllm_mode="server"; docs/grpo.md)
    "use_vllm", "vllm_mode", "vllm_server_host", "vllm_server_port", "vllm_server_base_url",
    "vllm_server_timeout",
)


def _grpo_keys(self, keys, used):
    trl = keys.setdefault("trl", {})
    for f in _GRPO_TRL_FIELDS:
        if hasattr(self, f):
            used.add(f)
            value = _enum_value(getattr(self, f))
            if value is not None:
                trl[f] = list(value) if isinstance(value, tuple) else value
    if trl.get("multi_objective_aggregation") == "normalize_then_sum":
        keys["rl"] = "gdpo"  # GDPO: rlhf.c's name for TRL's per-reward normalisation
    used.add("vllm_importance_sampling_correction")  # only meaningful with vLLM


_METHODS = {
    "SFTConfig": (None, _sft_keys),
    "DPOConfig": ("dpo", _dpo_keys),
    "KTOConfig": ("kto", _kto_keys),
    "ORPOConfig": ("orpo", _orpo_keys),
    "CPOConfig": ("cpo", _cpo_keys),
    "GRPOConfig": ("grpo", _grpo_keys),
    "GRPOWithReplayBufferConfig": ("grpo", _grpo_keys),
}

_DOCS = {
    "SFTConfig": "TRL's SFTConfig: supervised fine-tuning (rlhf.c: no `rl`).",
    "DPOConfig": "TRL's DPOConfig (rlhf.c: rl: dpo; loss_type -> dpo_loss_type).",
    "KTOConfig": "TRL's KTOConfig (rlhf.c: rl: kto).",
    "ORPOConfig": "TRL's ORPOConfig (trl.experimental.orpo; rlhf.c: rl: orpo).",
    "CPOConfig": "TRL's CPOConfig (trl.experimental.cpo; rlhf.c: rl: cpo, loss_type -> "
                 "cpo_loss_type).",
    "GRPOConfig": "TRL's GRPOConfig (rlhf.c: rl: grpo, the fields in the trl: block).",
    "GRPOWithReplayBufferConfig": "TRL's GRPOWithReplayBufferConfig "
                                  "(trl.experimental.grpo_with_replay_buffer): GRPOConfig plus "
                                  "replay_buffer_size (default 64, as TRL 1.9's code has it).",
}

_DEFAULTS = {}


def _make(name, base=_Config):
    spec = CONFIGS[name]
    table = [(n, spec["changed"].get(n, d)) for n, d in TRAINING_ARGUMENTS] + spec["own"]
    _DEFAULTS[name] = dict(table)
    fields = []
    for field_name, default in table:
        if isinstance(default, (list, dict)):
            f = dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d))
        else:
            f = dataclasses.field(default=default)
        fields.append((field_name, typing.Any, f))
    method, keys_fn = _METHODS[name]

    def method_keys(self, keys, used):
        if method:
            keys["rl"] = method
        keys_fn(self, keys, used)

    return dataclasses.make_dataclass(
        name,
        fields,
        bases=(base,),
        namespace={"__doc__": _DOCS[name], "_method": method, "_method_keys": method_keys,
                   "__module__": __name__},
    )


SFTConfig = _make("SFTConfig")
DPOConfig = _make("DPOConfig")
KTOConfig = _make("KTOConfig")
ORPOConfig = _make("ORPOConfig")
CPOConfig = _make("CPOConfig")
GRPOConfig = _make("GRPOConfig")
GRPOWithReplayBufferConfig = _make("GRPOWithReplayBufferConfig", base=GRPOConfig)
