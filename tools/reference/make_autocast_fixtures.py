#!/usr/bin/env python3
"""bf16 autocast parity fixture: TRL 1.9's DPOTrainer, 3 optimizer steps of the dpo_sigmoid case
of make_pref_train_fixtures.py (tests/fixtures/models/llama_text, the same rows in dataset order,
the same micro-batches), run twice in one process: in fp32 (bf16=False) and as an Axolotl user's
`bf16: true` runs it (bf16=True: HF Trainer / Accelerate wrap the model's forward in torch CPU
autocast, dtype bfloat16). Both log histories (loss, grad_norm, logps/*, rewards/*, logits/*, ...)
go into tests/fixtures/autocast/dpo_sigmoid.json with the micro-batches, for
tests/test_autocast_parity.c: rlhf.c's bf16 run must be as close to torch's fp32 run as torch's
own autocast run is, and not equal to its own fp32 run.

Also records what autocast did, seen from inside the step (`observed`): for the first layer's
q_proj and input_layernorm and for lm_head of policy and reference, the dtype of input and output
and whether autocast was on; and the dtype of the logits the loss reads.

SFT likewise (tests/fixtures/autocast/sft.json): make_train_fixtures.py's 5 steps of SFT (its
model, micro-batches, AdamW, schedule and clipping), once in fp32 and once with each micro-batch's
forward under torch.autocast("cpu", dtype=torch.bfloat16), as HF Trainer's bf16=True runs the
forward (the loss upcasts the logits to fp32, as transformers' ForCausalLMLoss does).

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


def run_sft(bf16):
    """make_train_fixtures.py's loop, its forward under CPU autocast when bf16."""
    import contextlib

    import transformers

    import make_model_fixtures as mf
    import make_train_fixtures as tf

    torch.manual_seed(0)
    model = mf.load_fp32(os.path.join(mf.FIXTURES, tf.MODEL))
    model.train(False)
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    hp = tf.HP
    decay = set(transformers.Trainer.get_decay_parameter_names(None, model))
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in zip(names, params) if n in decay], "weight_decay": hp["weight_decay"]},
         {"params": [p for n, p in zip(names, params) if n not in decay], "weight_decay": 0.0}],
        lr=hp["learning_rate"], betas=(hp["adam_beta1"], hp["adam_beta2"]), eps=hp["adam_epsilon"])
    sched = transformers.get_scheduler(hp["lr_scheduler"], opt, num_warmup_steps=hp["warmup_steps"],
                                       num_training_steps=tf.STEPS)
    mbs = tf.make_micro_batches(model.config.vocab_size)
    losses, norms = [], []
    for step in range(tf.STEPS):
        window = mbs[step * tf.ACCUM:(step + 1) * tf.ACCUM]
        n_window = sum(sum(sum(r) for r in mb["label_mask"]) for mb in window)
        step_loss = 0.0
        for mb in window:
            ids = torch.tensor(mb["input_ids"])
            attn = torch.tensor(mb["attention_mask"])
            lab = torch.tensor(mb["label_mask"]).bool()
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
            with ctx:
                logits = model(input_ids=ids, attention_mask=attn).logits
            logits = logits.float()
            lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            loss = -lp[lab[:, 1:]].sum() / n_window
            loss.backward()
            step_loss += float(loss)
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, hp["max_grad_norm"])))
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(step_loss)
    return dict(model=tf.MODEL, steps=tf.STEPS, accumulation=tf.ACCUM, hyper=hp, micro_batches=mbs), losses, norms


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    sft, loss32, norm32 = run_sft(False)
    _, loss16, norm16 = run_sft(True)
    with open(os.path.join(OUT, "sft.json"), "w") as f:
        json.dump(dict(sft, loss_fp32=loss32, grad_norm_fp32=norm32, loss_bf16=loss16, grad_norm_bf16=norm16,
                       torch_version=torch.__version__), f, separators=(",", ":"))
    print("sft loss", loss32, loss16)
    print("sft grad_norm", norm32, norm16)
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
