#!/usr/bin/env python3
"""Preference-training parity fixtures: TRL 1.9's own trainers, 3 optimizer steps on a fixture
model, recorded for tests/test_pref_train.c.

For each case TRL's trainer runs on tests/fixtures/models/llama_text (a tiny Llama with a
tokenizer, fp32, CPU) over tests/fixtures/pref_train/pairs.jsonl (prompt / chosen / rejected
rows), with the examples taken in dataset order (a SequentialSampler in
place of the shuffling one, so that rlhf.c can take the same micro-batches). Recorded in
tests/fixtures/pref_train/<case>/: reference.json (the configuration, the input_ids /
attention_mask / completion_mask of every micro-batch as TRL's collator built them, and
trainer.state.log_history: per-step loss, grad_norm, learning_rate and every TRL metric) and
final.safetensors (the trained weights; for a LoRA case the trained adapter in PEFT's names,
with initial_adapter/ holding the adapter before training, which rlhf.c starts from).

The rows go through Axolotl 0.19's own excess_length_strategy "drop" filter
(axolotl.utils.data.rl._drop_long_sequences, sequence_len = max_length) before TRL sees them, as
they do in an Axolotl run: row 5's long prompt is dropped there. Rows 3 and 7 are padded to exactly
max_length tokens without special tokens, so they pass the filter and TRL's keep_start cut still
trims the BOS/EOS they gain.

    tools/reference/.venv/bin/python tools/reference/make_pref_train_fixtures.py [case ...]
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

OUT = os.path.join(mf.REPO, "tests", "fixtures", "pref_train")
MODEL_DIR = os.path.join(mf.FIXTURES, "llama_text")
COMMON = dict(per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=3,
              learning_rate=5e-3, lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0,
              max_grad_norm=1.0, logging_steps=1, max_length=48, seed=5)

# name -> (trainer kind, extra config, LoRA or not)
CASES = {
    "dpo_sigmoid": ("dpo", dict(beta=0.1, loss_type=["sigmoid"]), False),
    "dpo_sigmoid_lora": ("dpo", dict(beta=0.2, loss_type=["sigmoid"]), True),
    "ipo": ("dpo", dict(beta=0.1, loss_type=["ipo"]), False),
    "mpo_lora": ("dpo", dict(beta=0.1, loss_type=["sigmoid", "bco_pair", "sft"], loss_weights=[0.8, 0.2, 1.0]),
                 True),
}
# every other DPO loss type, on a LoRA adapter (small fixtures), through the same 3 steps
# ORPO and CPO/SimPO: TRL's experimental trainers (kind "orpo", "cpo"; Axolotl's rl: simpo is
# CPOTrainer with loss_type "simpo" and cpo_alpha left at TRL's 1.0 unless set)
CASES.update({
    "orpo": ("orpo", dict(beta=0.1), False),
    "orpo_lora": ("orpo", dict(beta=0.5), True),
    "simpo": ("simpo", dict(beta=2.0, loss_type="simpo", simpo_gamma=0.5), False),
    "simpo_pure_lora": ("simpo", dict(beta=2.0, loss_type="simpo", simpo_gamma=1.0, cpo_alpha=0.0), True),
    "cpo_sigmoid": ("cpo", dict(beta=0.1, loss_type="sigmoid"), False),
    "cpo_sigmoid_lora": ("cpo", dict(beta=0.1, loss_type="sigmoid"), True),
    "cpo_hinge_lora": ("cpo", dict(beta=0.1, loss_type="hinge"), True),
    "cpo_ipo_lora": ("cpo", dict(beta=0.1, loss_type="ipo"), True),
})
for _t, _extra in [("hinge", {}), ("exo_pair", dict(label_smoothing=1e-3)), ("nca_pair", {}),
                   ("robust", dict(label_smoothing=0.1)), ("bco_pair", {}), ("sppo_hard", {}),
                   ("aot", dict(label_smoothing=0.05)), ("aot_unpaired", {}), ("apo_zero", {}),
                   ("apo_down", {}), ("discopop", {}), ("sft", {}), ("sigmoid_norm", {})]:
    CASES["dpo_" + _t] = ("dpo", dict(beta=0.1, loss_type=[_t], **_extra), True)
# other model families (a 4th entry: the fixture model, with llama_text's tokenizer): Phi-3, a
# LoRA adapter on its fused qkv_proj / gate_up_proj (all-linear)
CASES["dpo_sigmoid_lora_phi3"] = ("dpo", dict(beta=0.2, loss_type=["sigmoid"]), True, "phi3_text")
CASES["dpo_sigmoid_lora_smollm3"] = ("dpo", dict(beta=0.2, loss_type=["sigmoid"]), True, "smollm3_text")


def axolotl_length(tok, prompt, response):
    """The length Axolotl's filter measures: prompt and response tokenised apart, no specials."""
    return sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in (prompt, response))


def write_pairs(path, limit):
    """Prompt / chosen / rejected rows; rows 3 and 7 are exactly `limit` tokens without special
    tokens, row 5's prompt alone is longer than max_length (Axolotl drops that row), so 13 rows
    leave the 12 that 3 steps of 2 x 2 pairs take. For DPO the limit is max_length: Axolotl keeps
    those rows and TRL's keep_start cut trims the BOS/EOS they gain. For ORPO/CPO it is
    max_length - 2, so that with BOS and EOS they just fit: TRL 1.9's ORPO/CPO routine cuts a long
    response to max_length - len(longest response) (not - len(prompt)), where rlhf.c follows the
    spec (axolotl-config.md §6.3, §15.10) and tests/test_pref_dataset.c checks the difference."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    rows = []
    for i in range(13):
        prompt = f"Q{i}: what is {i} plus {2 * i}?"
        chosen, rejected = f" {3 * i}.", f" {3 * i + 1}, I think."
        if i in (3, 7):
            words = iter((" Because" + " adding numbers step by step gives it" * 8).split(" ")[1:])
            while axolotl_length(tok, prompt, chosen) < limit:
                longer = chosen + " " + next(words)
                if axolotl_length(tok, prompt, longer) > limit:
                    chosen += "!" * (limit - axolotl_length(tok, prompt, chosen))
                    break
                chosen = longer
            assert axolotl_length(tok, prompt, chosen) == limit, (i, chosen)
        if i == 5:
            prompt = "A very long question " * 12 + "?"
        rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


class SequentialMixin:
    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)

    def compute_loss(self, model, inputs, *args, **kwargs):
        self.recorded.append({k: inputs[k].tolist() for k in ("input_ids", "attention_mask", "completion_mask")})
        return super().compute_loss(model, inputs, *args, **kwargs)


class ConcatenatedRecordingMixin:
    """ORPO/CPO: records each micro-batch as the trainer concatenates it (chosen rows, then
    rejected, padded to one length), the completion mask being the labels that are not -100.
    Also adds `completion_logits/chosen|rejected`: the mean logit over the positions that predict
    a completion token, from the same logits (what DPOTrainer 1.9 reports as logits/*, and what
    rlhf.c reports for every method; these trainers' own logits/* average every position of the
    padded batch, padding included)."""

    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)

    def concatenated_forward(self, model, batch):
        out = super().concatenated_forward(model, batch)
        cat = self.concatenated_inputs(batch, padding_value=self.recording_pad_id)
        mask = cat["concatenated_labels"][:, 1:] != -100
        n = batch["chosen_labels"].shape[0]
        for half, logits in (("chosen", out[2]), ("rejected", out[3])):
            sel = mask[:n] if half == "chosen" else mask[n:]
            per_position = logits[:, : sel.shape[1], :].detach().mean(-1)
            self.completion_logits[half] = (per_position[sel].sum() / sel.sum()).item()
        return out

    def get_batch_loss_metrics(self, model, batch, train_eval="train"):
        loss, metrics = super().get_batch_loss_metrics(model, batch, train_eval)
        for half in ("chosen", "rejected"):
            metrics[f"completion_logits/{half}"] = self.completion_logits[half]
        return loss, metrics

    def compute_loss(self, model, inputs, *args, **kwargs):
        cat = self.concatenated_inputs(inputs, padding_value=self.recording_pad_id)
        self.recorded.append({"input_ids": cat["concatenated_input_ids"].tolist(),
                              "attention_mask": cat["concatenated_attention_mask"].tolist(),
                              "completion_mask": (cat["concatenated_labels"] != -100).long().tolist()})
        return super().compute_loss(model, inputs, *args, **kwargs)


def make_trainer(kind, tok, model, data, tmp, extra, peft_config):
    """TRL's trainer for the method, recording, over `data` in order."""
    from trl import DPOConfig, DPOTrainer
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    config_cls, trainer_cls, mixin = {
        "dpo": (DPOConfig, DPOTrainer, SequentialMixin),
        "orpo": (ORPOConfig, ORPOTrainer, ConcatenatedRecordingMixin),
        "simpo": (CPOConfig, CPOTrainer, ConcatenatedRecordingMixin),
        "cpo": (CPOConfig, CPOTrainer, ConcatenatedRecordingMixin),
    }[kind]
    args = config_cls(output_dir=tmp, report_to=[], save_strategy="no", bf16=False, use_cpu=True,
                      gradient_checkpointing=False, dataloader_num_workers=0, **COMMON, **extra)
    if kind != "dpo":
        args.remove_unused_columns = False  # as Axolotl sets it
    cls = type("Recording" + trainer_cls.__name__, (mixin, trainer_cls), {})
    trainer = cls(model=model, args=args, train_dataset=data, processing_class=tok, peft_config=peft_config)
    trainer.recorded = []
    trainer.completion_logits = {}
    trainer.recording_pad_id = getattr(trainer, "padding_value", None)
    if trainer.recording_pad_id is None:
        trainer.recording_pad_id = getattr(trainer, "pad_token_id", None)
    return trainer


AXOLOTL_RL = {"dpo": "DPO", "orpo": "ORPO", "simpo": "SIMPO", "cpo": "SIMPO"}


def run_case(name, kind, extra, lora, pairs_path, model_name="llama_text"):
    from datasets import load_dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(1234)
    out = os.path.join(OUT, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    model_dir = os.path.join(mf.FIXTURES, model_name)
    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token  # Axolotl's load_tokenizer fallback
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    data = load_dataset("json", data_files=pairs_path, split="train")
    rl_type = getattr(axolotl_rl.RLType, AXOLOTL_RL[kind])
    data = data.filter(functools.partial(axolotl_rl.drop_long_sequences, rl=rl_type,
                                         tokenizer=tok, sequence_len=COMMON["max_length"]))
    assert len(data) == 12, len(data)
    with tempfile.TemporaryDirectory() as tmp:
        peft_config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules="all-linear",
                                 task_type="CAUSAL_LM") if lora else None
        trainer = make_trainer(kind, tok, model, data, tmp, extra, peft_config)
        if lora:
            trainer.model.save_pretrained(os.path.join(out, "initial_adapter"))
        trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    if lora:
        trainer.model.save_pretrained(os.path.join(out, "final_adapter"))
        shutil.move(os.path.join(out, "final_adapter", "adapter_model.safetensors"),
                    os.path.join(out, "final.safetensors"))
        shutil.rmtree(os.path.join(out, "final_adapter"))
        os.remove(os.path.join(out, "initial_adapter", "README.md"))
    else:
        tied = trainer.model.config.tie_word_embeddings
        state = {k: v.detach().contiguous() for k, v in trainer.model.state_dict().items()
                 if not (tied and k == "lm_head.weight")}
        save_file(state, os.path.join(out, "final.safetensors"), metadata={"format": "pt"})
    config = dict(COMMON, **extra, kind=kind, lora=lora)
    if model_name != "llama_text":
        config["model"] = model_name
    import trl
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"config": config, "trl_version": trl.__version__, "micro_batches": trainer.recorded,
                   "log_history": history}, f)
    print(f"{name}: {len(trainer.recorded)} micro-batches; losses {[round(h['loss'], 5) for h in history]}")


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    pairs = {"dpo": os.path.join(OUT, "pairs.jsonl"), "orpo": os.path.join(OUT, "pairs_orpo.jsonl")}
    write_pairs(pairs["dpo"], COMMON["max_length"])
    write_pairs(pairs["orpo"], COMMON["max_length"] - 2)
    for name in sys.argv[1:] or list(CASES):
        kind, extra, lora, *model = CASES[name]
        run_case(name, kind, extra, lora, pairs["dpo" if kind == "dpo" else "orpo"], *model)


if __name__ == "__main__":
    main()
