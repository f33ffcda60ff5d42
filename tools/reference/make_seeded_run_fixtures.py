#!/usr/bin/env python3
"""TRL DPO and GRPO runs reproduced from their seed alone: no sampler override, no adapter handed
over, no completion replaced.

DPO:
transformers.set_seed(seed), the llama_text fixture from_pretrained, DPOTrainer with a LoRA
peft_config (its get_peft_model draws the adapter from torch's generator) and TRL's default
RandomSampler (accelerate's SeedableRandomSampler, seeded by Trainer's set_seed(seed)), 3 steps
over tests/fixtures/pref_train/pairs.jsonl after Axolotl's length filter. Records
trainer.state.log_history in tests/fixtures/seeded_run/dpo_lora.json; tests/test_seeded_run.c
runs `rlhf train` on the same YAML and seed and compares every step's metrics.

GRPO: transformers.set_seed(seed), the llama_text fixture from_pretrained, GRPOTrainer with a
LoRA peft_config, the reward tests/fixtures/seeded_run/grpo_reward.py and the prompts
tests/fixtures/seeded_run/grpo_prompts.jsonl (written here), 3 steps. Everything random is
TRL's own: RepeatSampler's prompt order, the DataLoader's base-seed draw, transformers'
generate() sampling (torch.multinomial on the global generator GRPOTrainer seeds with
set_seed(seed)), the per-batch row shuffle (shuffle_sequence_dict's torch.randperm). Records
log_history and, to diagnose a mismatch, the completions each generation batch sampled, in
tests/fixtures/seeded_run/grpo_lora.json; tests/test_seeded_grpo_run.c runs `rlhf train` on the
same YAML and seed.

DPO in Axolotl's order (dpo_axolotl): the same run with the filtered rows first shuffled as
Axolotl's merge_datasets shuffles them (Dataset.shuffle(seed=seed), shuffle_merged_datasets'
default), in tests/fixtures/seeded_run/dpo_lora_axolotl_order.json: the YAML without
shuffle_merged_datasets: false must log it.

    /work/venv-ref/bin/python tools/reference/make_seeded_run_fixtures.py [dpo] [dpo_axolotl] [grpo]   # ~20 s each
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


def dpo(axolotl_order=False):
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
    if axolotl_order:
        # Axolotl's merge_datasets (utils/data/shared.py, shuffle_merged_datasets: true by
        # default), after the length filter, as its rl: path calls it
        data = data.shuffle(seed=SEED)
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, report_to=[], save_strategy="no", bf16=False, use_cpu=True,
                         gradient_checkpointing=False, dataloader_num_workers=0, **CONFIG)
        trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tok,
                             peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA))
        trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    os.makedirs(OUT, exist_ok=True)
    name = "dpo_lora_axolotl_order.json" if axolotl_order else "dpo_lora.json"
    with open(os.path.join(OUT, name), "w") as f:
        json.dump({"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                   "config": CONFIG, "lora": LORA, "n_rows": len(data), "axolotl_order": axolotl_order,
                   "log_history": history}, f, indent=1)
        f.write("\n")
    print([round(h["loss"], 6) for h in history])


GRPO = dict(num_generations=4, max_completion_length=8, per_device_train_batch_size=8,
            gradient_accumulation_steps=1, learning_rate=2e-2, lr_scheduler_type="linear", warmup_steps=0,
            weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0,
            logging_steps=1, max_steps=3, seed=SEED, beta=0.04, loss_type="dapo", scale_rewards="group",
            temperature=1.0)
# 4 prompts, 2 per step: step 3 begins the second epoch (a new RepeatSampler order, a new
# DataLoader draw)
GRPO_PROMPTS = [{"prompt": "Q%d: what is %d plus %d?" % (i, i, (3 * i) % 7)} for i in range(4)]


def grpo():
    import importlib.util

    import make_grpo_train_fixtures as gt
    gt.stub_http_modules()  # TRL's grpo_trainer imports its vLLM client's HTTP modules
    import transformers
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(2)
    spec = importlib.util.spec_from_file_location("grpo_reward", os.path.join(OUT, "grpo_reward.py"))
    reward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reward)
    with open(os.path.join(OUT, "grpo_prompts.jsonl"), "w") as f:
        for row in GRPO_PROMPTS:
            f.write(json.dumps(row) + "\n")
    transformers.set_seed(SEED)  # the script's own seeding, before the model and its adapter
    tok = AutoTokenizer.from_pretrained(pt.MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(pt.MODEL_DIR, dtype=torch.float32, attn_implementation="eager")
    sampled = []  # what generate() returned, per call: a diagnosis aid, never an input
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, report_to="none", use_cpu=True, bf16=False, save_strategy="no",
                          dataloader_num_workers=0, **GRPO)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[reward.reward], args=args,
                              train_dataset=Dataset.from_list(GRPO_PROMPTS),
                              peft_config=LoraConfig(task_type="CAUSAL_LM", **LORA))
        policy = trainer.model.get_base_model()
        generate = policy.generate

        def recording_generate(*a, **k):
            out = generate(*a, **k)
            width = k["input_ids"].shape[1]
            sampled.append({"prompt_ids": [[t for t, m in zip(r, am) if m] for r, am in
                                           zip(k["input_ids"].tolist(), k["attention_mask"].tolist())],
                            "completion_ids": [r[width:] for r in out.tolist()]})
            return out

        policy.generate = recording_generate  # wraps, calls the real one: nothing replaced
        trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    with open(os.path.join(OUT, "grpo_lora.json"), "w") as f:
        json.dump({"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                   "config": GRPO, "lora": LORA, "log_history": history, "generations": sampled}, f, indent=1)
        f.write("\n")
    print([(round(h["loss"], 6), round(h["reward"], 6)) for h in history])


if __name__ == "__main__":
    for name in sys.argv[1:] or ["dpo", "dpo_axolotl", "grpo"]:
        {"dpo": dpo, "dpo_axolotl": functools.partial(dpo, axolotl_order=True), "grpo": grpo}[name]()
