#!/usr/bin/env python3
"""KTO training parity fixtures: TRL 1.9's own KTOTrainer, 3 optimizer steps on a fixture model,
recorded for tests/test_kto_train.c.

For each case KTOTrainer runs on tests/fixtures/models/llama_text (a tiny Llama with a tokenizer,
fp32, CPU) over tests/fixtures/kto_train/rows.jsonl (prompt / completion / label rows), taking the
rows in dataset order: KTOConfig's default train_sampling_strategy "sequential" (asserted below),
which the KL rows of loss_type "kto" need. Recorded in tests/fixtures/kto_train/<case>/:
reference.json (the configuration; every micro-batch as TRL's DataCollatorForUnpairedPreference
built it: input_ids / attention_mask / completion_mask, the KL_* tensors when the loss uses them,
and the labels; trainer.state.log_history: per-step loss, grad_norm, learning_rate and every TRL
metric) and final.safetensors (the trained weights; for a LoRA case the trained adapter in PEFT's
names, with initial_adapter/ holding the adapter before training, which rlhf.c starts from).

The rows go through Axolotl 0.19's own excess_length_strategy "drop" filter
(axolotl.utils.data.rl._drop_long_sequences for RLType.KTO, sequence_len = max_length) before TRL
sees them, as in an Axolotl run, and then through TRL's own filter of prompts that fill
max_length. Rows are chosen so that:
  - row 2's prompt alone is longer than max_length: Axolotl drops it;
  - row 9's prompt is max_length - 1 tokens without special tokens and its completion one token:
    Axolotl keeps it (max_length in all), TRL drops it (its prompt ids with BOS fill max_length);
  - rows 0 and 5 are exactly max_length tokens without special tokens: TRL's keep_start cut trims
    the EOS they gain, and the KL rows pairing their completions with the next row's longer
    prompt are cut too;
  - the labels make one micro-batch all undesirable and one whole step all desirable (no
    rewards/rejected, logits/rejected or rewards/margins in that log line).
14 rows leave the 12 that 3 steps of 2 x 2 rows take (2 steps of 3 x 2 in kto_batch3_lora).

    tools/reference/.venv/bin/python tools/reference/make_kto_train_fixtures.py [case ...]
"""
import functools
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import save_file
from torch.utils.data import SequentialSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402
import make_pref_dataset_fixtures as axolotl_rl  # noqa: E402  (Axolotl's own length filter)

OUT = os.path.join(mf.REPO, "tests", "fixtures", "kto_train")
MODEL_DIR = os.path.join(mf.FIXTURES, "llama_text")
COMMON = dict(per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=3,
              learning_rate=5e-3, lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0,
              max_grad_norm=1.0, logging_steps=1, max_length=40, seed=5)
LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")

# name -> (extra KTOConfig, adapter: None (full fine-tuning), "fresh" (peft_config: the reference
# is the base with the adapter off) or "loaded" (a PeftModel with a non-zero adapter: TRL copies
# it into a frozen "ref" adapter))
CASES = {
    "kto_full": (dict(beta=0.1), None),
    "kto_lora": (dict(beta=0.2), "fresh"),
    "apo_zero_unpaired_lora": (dict(beta=0.1, loss_type="apo_zero_unpaired"), "fresh"),
    "kto_weights_lora": (dict(beta=0.1, desirable_weight=1.33, undesirable_weight=0.7), "fresh"),
    "kto_precompute_lora": (dict(beta=0.1, precompute_ref_log_probs=True), "fresh"),
    "kto_loaded_adapter": (dict(beta=0.1), "loaded"),
    # 3 rows per micro-batch: the KL rotation's direction shows (with 2 rows it is a swap)
    "kto_batch3_lora": (dict(beta=0.1, per_device_train_batch_size=3, max_steps=2), "fresh"),
}

# by row of rows.jsonl; rows 2 and 9 are dropped (see above), so the micro-batches of 2 get
# [T, T], [T, F] | [T, T], [T, T] | [F, T], [F, F]: the first two steps raise the desirable
# completions, so that the KL rows of the later steps (the same completions after other
# prompts) rise too and the KL estimate is above its clamp at 0.
LABELS = [True, True, True, True, False, True, True, True, True, True, False, True, False, False]


def axolotl_length(tok, *texts):
    """The length Axolotl's filter measures: each text tokenised apart, no special tokens."""
    return sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts)


def fill_to(tok, prompt, completion, limit):
    """Lengthens `completion` until prompt + completion is exactly `limit` tokens (no specials)."""
    words = iter((" Because" + " adding numbers step by step gives it" * 8).split(" ")[1:])
    while axolotl_length(tok, prompt, completion) < limit:
        longer = completion + " " + next(words)
        if axolotl_length(tok, prompt, longer) > limit:
            completion += "!" * (limit - axolotl_length(tok, prompt, completion))
            break
        completion = longer
    assert axolotl_length(tok, prompt, completion) == limit, (prompt, completion)
    return completion


def write_rows(path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    limit = COMMON["max_length"]
    rows = []
    for i, label in enumerate(LABELS):
        prompt = f"Q{i}: what is {i} plus {2 * i}?"
        completion = f" {3 * i}." if label else f" {3 * i + 1}, I think."
        if i in (0, 5):
            completion = fill_to(tok, prompt, completion, limit)
        if i in (1, 6):  # the next row's prompt is longer: its KL row overflows max_length
            prompt = f"Q{i}: tell me, what is {i} plus {2 * i} when added up?"
        if i == 2:
            prompt = "A very long question " * 10 + "?"
        if i == 9:
            prompt = "Q9: count " + " ".join(["one"] * 60)
            completion = "!"
            while axolotl_length(tok, prompt) > limit - 1:
                prompt = prompt[: prompt.rindex(" ")]
            while axolotl_length(tok, prompt) < limit - 1:
                prompt += "?"
            assert axolotl_length(tok, prompt) == limit - 1
            assert axolotl_length(tok, completion) == 1
        rows.append({"prompt": prompt, "completion": completion, "label": label})
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


RECORDED_KEYS = ("input_ids", "attention_mask", "completion_mask", "KL_input_ids", "KL_attention_mask",
                 "KL_completion_mask", "label")


class RecordingMixin:
    def compute_loss(self, model, inputs, *args, **kwargs):
        self.recorded.append({k: inputs[k].tolist() for k in RECORDED_KEYS if k in inputs})
        return super().compute_loss(model, inputs, *args, **kwargs)


def load_rows(tok, rows_path):
    from datasets import load_dataset
    data = load_dataset("json", data_files=rows_path, split="train")
    data = data.filter(functools.partial(axolotl_rl.drop_long_sequences, rl=axolotl_rl.RLType.KTO,
                                         tokenizer=tok, sequence_len=COMMON["max_length"]))
    assert len(data) == len(LABELS) - 1, len(data)
    return data


def loaded_adapter_model(model):
    """A PeftModel whose adapter is not the identity (lora_B drawn at random): training continues
    from it, as with Axolotl's lora_model_dir."""
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(model, LoraConfig(**LORA))
    gen = torch.Generator().manual_seed(77)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return model


def run_case(name, extra, adapter, rows_path):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import KTOConfig, KTOTrainer

    torch.manual_seed(1234)
    out = os.path.join(OUT, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32, attn_implementation="eager")
    data = load_rows(tok, rows_path)
    peft_config = None
    if adapter == "fresh":
        peft_config = LoraConfig(**LORA)
    elif adapter == "loaded":
        model = loaded_adapter_model(model)
    trainer_cls = type("RecordingKTOTrainer", (RecordingMixin, KTOTrainer), {})
    with tempfile.TemporaryDirectory() as tmp:
        args = KTOConfig(output_dir=tmp, report_to=[], save_strategy="no", bf16=False, use_cpu=True,
                         gradient_checkpointing=False, dataloader_num_workers=0, **dict(COMMON, **extra))
        assert args.train_sampling_strategy == "sequential"
        trainer = trainer_cls(model=model, args=args, train_dataset=data, processing_class=tok,
                              peft_config=peft_config)
        assert isinstance(trainer._get_train_sampler(), SequentialSampler)
        assert len(trainer.train_dataset) == len(LABELS) - 2, len(trainer.train_dataset)
        trainer.recorded = []
        if adapter:
            trainer.model.save_pretrained(os.path.join(out, "initial_adapter"), selected_adapters=["default"])
        trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    if adapter:
        trainer.model.save_pretrained(os.path.join(out, "final_adapter"), selected_adapters=["default"])
        shutil.move(os.path.join(out, "final_adapter", "adapter_model.safetensors"),
                    os.path.join(out, "final.safetensors"))
        shutil.rmtree(os.path.join(out, "final_adapter"))
        os.remove(os.path.join(out, "initial_adapter", "README.md"))
    else:
        tied = trainer.model.config.tie_word_embeddings
        state = {k: v.detach().contiguous() for k, v in trainer.model.state_dict().items()
                 if not (tied and k == "lm_head.weight")}
        save_file(state, os.path.join(out, "final.safetensors"), metadata={"format": "pt"})
    config = dict(COMMON, **extra, adapter=adapter)
    config.setdefault("loss_type", "kto")
    import trl
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"config": config, "trl_version": trl.__version__, "micro_batches": trainer.recorded,
                   "log_history": history}, f)
    print(f"{name}: {len(trainer.recorded)} micro-batches; losses {[round(h['loss'], 5) for h in history]}")


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    rows = os.path.join(OUT, "rows.jsonl")
    write_rows(rows)
    for name in sys.argv[1:] or list(CASES):
        extra, adapter = CASES[name]
        run_case(name, extra, adapter, rows)


if __name__ == "__main__":
    main()
