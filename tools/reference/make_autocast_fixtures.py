#!/usr/bin/env python3
"""bf16 autocast parity fixture: TRL 1.9's DPOTrainer, 3 optimizer steps of the dpo_sigmoid case
of make_pref_train_fixtures.py (tests/fixtures/models/llama_text, the same rows in dataset order,
the same micro-batches), run twice in one process: in fp32 (bf16=False) and as an Axolotl user's
`bf16: true` runs it (bf16=True: HF Trainer / Accelerate wrap the model's forward in torch CPU
autocast, dtype bfloat16). Both log histories (loss, grad_norm, logps/*, rewards/*, logits/*, ...)
go into tests/fixtures/autocast/dpo_sigmoid.json with the micro-batches, for
tests/test_autocast_parity.c: rlhf.c's bf16 run must be as close to torch's fp32 run as torch's
own autocast run is, and not equal to its own fp32 run.

Also records what autocast did, seen from inside the step: the dtype of the logits the trainer
received and of the log-probs it computed (`observed`).

    /work/venv-ref/bin/python tools/reference/make_autocast_fixtures.py
"""
import json
import os
import sys
import tempfile

import torch

from torch.utils.data import SequentialSampler

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(REPO, "tests", "fixtures", "autocast")
PREF = os.path.join(REPO, "tests", "fixtures", "pref_train")
MODEL_DIR = os.path.join(REPO, "tests", "fixtures", "models", "llama_text")
CASE = "dpo_sigmoid"
# make_pref_train_fixtures.py's COMMON and its dpo_sigmoid case (that script needs Axolotl for
# its length filter; here the rows Axolotl drops are dropped by the same rule below, and the
# micro-batches are checked against that fixture's)
COMMON = dict(per_device_train_batch_size=2, gradient_accumulation_steps=2, max_steps=3,
              learning_rate=5e-3, lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0,
              max_grad_norm=1.0, logging_steps=1, max_length=48, seed=5)
EXTRA = dict(beta=0.1, loss_type=["sigmoid"])


def fits(tok, row):
    """Axolotl's excess_length_strategy "drop" for DPO: prompt and each response tokenised apart,
    no special tokens, within max_length."""
    n = lambda t: len(tok(t, add_special_tokens=False)["input_ids"])  # noqa: E731
    return max(n(row["prompt"]) + n(row["chosen"]), n(row["prompt"]) + n(row["rejected"])) <= COMMON["max_length"]


class SequentialMixin:
    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)

    def compute_loss(self, model, inputs, *args, **kwargs):
        self.recorded.append({k: inputs[k].tolist() for k in ("input_ids", "attention_mask", "completion_mask")})
        return super().compute_loss(model, inputs, *args, **kwargs)


def run(bf16):
    from datasets import load_dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    torch.manual_seed(1234)
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32, attn_implementation="eager")
    data = load_dataset("json", data_files=os.path.join(PREF, "pairs.jsonl"), split="train")
    data = data.filter(lambda row: fits(tok, row))
    assert len(data) == 12, len(data)
    observed = {}

    class Recording(SequentialMixin, DPOTrainer):
        pass

    def watch(name, module):
        """What autocast did to a module, seen from inside the step: its output's dtype and whether
        autocast was on while it ran (first call only)."""
        def hook(mod, args, output):
            observed.setdefault(name, {"input_dtype": str(args[0].dtype), "output_dtype": str(output.dtype),
                                       "autocast": torch.is_autocast_enabled("cpu")})
        module.register_forward_hook(hook)

    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, report_to=[], save_strategy="no", bf16=bf16, use_cpu=True,
                         gradient_checkpointing=False, dataloader_num_workers=0, **COMMON, **EXTRA)
        trainer = Recording(model=model, args=args, train_dataset=data, processing_class=tok)
        trainer.recorded = []
        for who, m in (("policy", trainer.model), ("reference", trainer.ref_model)):
            if m is None:
                continue
            watch(who + " q_proj", m.model.layers[0].self_attn.q_proj)
            watch(who + " input_layernorm", m.model.layers[0].input_layernorm)
            watch(who + " lm_head", m.lm_head)
        real_forward = trainer.model.forward

        def forward(*a, **k):
            out = real_forward(*a, **k)
            observed.setdefault("policy logits as the loss reads them", str(out.logits.dtype))
            return out
        trainer.model.forward = forward
        trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    return trainer.recorded, history, observed, dict(COMMON, **EXTRA, kind="dpo")


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    mbs32, hist32, obs32, config = run(False)
    mbs16, hist16, obs16, _ = run(True)
    assert mbs32 == mbs16, "the two runs collated different micro-batches"
    with open(os.path.join(PREF, CASE, "reference.json")) as f:
        assert json.load(f)["micro_batches"] == mbs32, "micro-batches differ from pref_train/" + CASE
    import transformers
    import trl
    with open(os.path.join(OUT, CASE + ".json"), "w") as f:
        json.dump({"config": config, "trl_version": trl.__version__, "torch_version": torch.__version__,
                   "transformers_version": transformers.__version__, "micro_batches": mbs32,
                   "log_history_fp32": hist32, "log_history_bf16": hist16,
                   "observed_fp32": obs32, "observed_bf16": obs16}, f)
    for k in ("loss", "grad_norm", "logps/chosen", "logps/rejected"):
        print(k, [round(h[k], 6) for h in hist32], [round(h[k], 6) for h in hist16])
    print("observed", obs32, obs16)


if __name__ == "__main__":
    main()
