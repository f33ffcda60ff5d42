#!/usr/bin/env python3
"""A TRL DPO run reproduced from its seed alone: no sampler override, no adapter handed over.
transformers.set_seed(seed), the llama_text fixture from_pretrained, DPOTrainer with a LoRA
peft_config (its get_peft_model draws the adapter from torch's generator) and TRL's default
RandomSampler (accelerate's SeedableRandomSampler, seeded by Trainer's set_seed(seed)), 3 steps
over tests/fixtures/pref_train/pairs.jsonl after Axolotl's length filter. Records
trainer.state.log_history in tests/fixtures/seeded_run/dpo_lora.json; tests/test_seeded_run.c
runs `rlhf train` on the same YAML and seed and compares every step's metrics.

    /work/venv-ref/bin/python tools/reference/make_seeded_run_fixtures.py   # from the repo root, ~20 s
"""
import functools
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402
import make_pref_dataset_fixtures as axolotl_rl  # noqa: E402
import make_pref_train_fixtures as pt  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "seeded_run")
SEED = 11
CONFIG = dict(per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=3,
              learning_rate=5e-3, lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0,
              max_grad_norm=1.0, logging_steps=1, max_length=48, seed=SEED, beta=0.1,
              loss_type=["sigmoid"])
LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear")


def main():
    import transformers
    import trl
    from datasets import load_dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    torch.set_num_threads(2)
    transformers.set_seed(SEED)  # the script's own seeding, before the model and its adapter
    tok = AutoTokenizer.from_pretrained(pt.MODEL_DIR)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token  # Axolotl's load_tokenizer fallback
    model = AutoModelForCausalLM.from_pretrained(pt.MODEL_DIR, dtype=torch.float32, attn_implementation="eager")
    data = load_dataset("json", data_files=os.path.join(pt.OUT, "pairs.jsonl"), split="train")
    data = data.filter(functools.partial(axolotl_rl.drop_long_sequences, rl=axolotl_rl.RLType.DPO,
                                         tokenizer=tok, sequence_len=CONFIG["max_length"]))
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, report_to=[], save_strategy="no", bf16=False, use_cpu=True,
                         gradient_checkpointing=False, dataloader_num_workers=0, **CONFIG)
        trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tok,
                             peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA))
        trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "dpo_lora.json"), "w") as f:
        json.dump({"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                   "config": CONFIG, "lora": LORA, "n_rows": len(data), "log_history": history}, f, indent=1)
        f.write("\n")
    print([round(h["loss"], 6) for h in history])


if __name__ == "__main__":
    main()
