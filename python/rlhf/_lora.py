"""peft_config (a peft.LoraConfig, or a dict with the same field names) as rlhf.c's lora keys."""

# LoraConfig fields rlhf.c acts on, and the values of the others it can honour: anything else
# is refused rather than trained differently from what was asked.
_ACCEPTED_AS_DEFAULT = {
    "bias": "none",
    "use_dora": False,
    "modules_to_save": None,
    "layers_to_transform": None,
    "rank_pattern": {},
    "alpha_pattern": {},
    "init_lora_weights": True,
    "fan_in_fan_out": False,
    "target_parameters": None,
    "exclude_modules": None,
    "layer_replication": None,
    "loftq_config": {},
    "megatron_config": None,
    "lora_bias": False,
    "trainable_token_indices": None,
}
# Fields that describe the model or PEFT's bookkeeping, not the training.
_IGNORED = {
    "task_type", "peft_type", "inference_mode", "base_model_name_or_path", "revision",
    "auto_mapping", "layers_pattern", "megatron_core", "use_qalora", "qalora_group_size",
    "runtime_config", "corda_config", "eva_config", "lora_ga_config", "arrow_config",
    "ensure_weight_tying", "alora_invocation_tokens", "peft_version", "use_bdlora",
    "target_modules_pattern",
}


def _fields(peft_config):
    if isinstance(peft_config, dict):
        return dict(peft_config)
    if hasattr(peft_config, "to_dict"):
        return peft_config.to_dict()
    raise TypeError(
        f"peft_config: expected a peft.LoraConfig or a dict of its fields, got "
        f"{type(peft_config).__name__}"
    )


def lora_keys(peft_config):
    """The YAML keys for an adapter: adapter, lora_r, lora_alpha, lora_dropout, targets."""
    f = _fields(peft_config)
    peft_type = str(getattr(f.get("peft_type"), "value", f.get("peft_type")) or "LORA")
    if peft_type.upper() != "LORA":
        raise ValueError(f"peft_config: {peft_type} adapters are not supported (LoRA only)")
    keys = {
        "adapter": "lora",
        "lora_r": int(f.get("r", 8)),
        "lora_alpha": float(f.get("lora_alpha", 8)),
        "lora_dropout": float(f.get("lora_dropout", 0.0)),
        "peft_use_rslora": bool(f.get("use_rslora", False)),
    }
    targets = f.get("target_modules")
    if isinstance(targets, str):
        if targets == "all-linear":
            keys["lora_target_linear"] = True
        else:
            raise ValueError(
                f"peft_config.target_modules={targets!r}: a regular expression is not supported; "
                "give a list of module names or 'all-linear'"
            )
    elif targets:
        keys["lora_target_modules"] = sorted(str(t) for t in targets)
    for name, value in f.items():
        if name in keys or name in _IGNORED or name in (
                "r", "lora_alpha", "lora_dropout", "use_rslora", "target_modules"):
            continue
        if name in _ACCEPTED_AS_DEFAULT:
            default = _ACCEPTED_AS_DEFAULT[name]
            if value in (default, None) or (not value and not default):
                continue
            if name == "init_lora_weights" and value in (True, "default"):
                continue
        elif value in (None, False, {}, [], ""):
            continue
        raise ValueError(f"peft_config.{name}={value!r} is not supported by rlhf.c")
    return keys
