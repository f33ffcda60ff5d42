#!/usr/bin/env python3
"""Training-parity fixture: 5 optimizer steps of SFT in PyTorch on a fixture model.

The loop reproduces what transformers' Trainer computes for a causal LM that accepts
`num_items_in_batch` (gradient accumulation with HF's loss normalisation):

    for each optimizer step (a window of ACCUM micro-batches):
        N = label tokens in the whole window
        for each micro-batch:  loss_mb = -sum(logp of label tokens) / N ; loss_mb.backward()
        grad_norm = clip_grad_norm_(params, max_grad_norm)      # logged as grad_norm
        optimizer.step(); scheduler.step(); optimizer.zero_grad()
        logged loss = sum of loss_mb                            # mean NLL over the window

with torch.optim.AdamW over Trainer's weight-decay groups and transformers' get_scheduler
(cosine with warm-up). Micro-batches are 2 right-padded sequences of unequal length whose first
tokens are a prompt (no label). Writes tests/fixtures/training/sft_5steps.json (the batches,
hyper-parameters, per-step loss / grad_norm / lr) and sft_5steps.safetensors (final weights).

Why not a model with a k_proj bias (Qwen2): along the head dimensions RoPE hardly rotates over
these short sequences, a k bias shifts all scores of a query row by the same amount, to which
softmax is blind, so its true gradient is ~0 and what remains is rounding noise. AdamW divides by
the root of the noise's square and turns it into steps of size ~lr, so two implementations -- or
PyTorch itself at 1 and 2 threads (measured: 1.7e-3 relative apart on those entries after 5 steps)
-- cannot agree to 1e-4 on those few weights. The comparison would test noise, not the trainer.

    tools/reference/.venv/bin/python tools/reference/make_train_fixtures.py
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "training")
MODEL = "llama_rope_llama3"  # no q/k biases: see the note in the module docstring
STEPS, ACCUM, BATCH = 5, 2, 2
HP = dict(learning_rate=1e-2, weight_decay=0.01, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
          max_grad_norm=1.0, lr_scheduler="cosine", warmup_steps=2)


def make_micro_batches(vocab, seed=7):
    g = torch.Generator().manual_seed(seed)
    mbs = []
    for _ in range(STEPS * ACCUM):
        lens = torch.randint(6, 17, (BATCH,), generator=g).tolist()
        T = max(lens)
        ids, attn, labels = [], [], []
        for n in lens:
            p = int(torch.randint(1, n - 1, (1,), generator=g))
            row = torch.randint(1, vocab, (n,), generator=g).tolist()
            ids.append(row + [0] * (T - n))
            attn.append([1] * n + [0] * (T - n))
            labels.append([0] * p + [1] * (n - p) + [0] * (T - n))
        mbs.append({"input_ids": ids, "attention_mask": attn, "label_mask": labels})
    return mbs


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    model = mf.load_fp32(os.path.join(mf.FIXTURES, MODEL))
    model.train(False)  # no dropout in these models; eval keeps attention eager and deterministic
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    decay = set(transformers.Trainer.get_decay_parameter_names(None, model))
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in zip(names, params) if n in decay], "weight_decay": HP["weight_decay"]},
         {"params": [p for n, p in zip(names, params) if n not in decay], "weight_decay": 0.0}],
        lr=HP["learning_rate"], betas=(HP["adam_beta1"], HP["adam_beta2"]), eps=HP["adam_epsilon"])
    sched = transformers.get_scheduler(HP["lr_scheduler"], opt, num_warmup_steps=HP["warmup_steps"],
                                       num_training_steps=STEPS)
    mbs = make_micro_batches(model.config.vocab_size)
    losses, norms, lrs = [], [], []
    for step in range(STEPS):
        window = mbs[step * ACCUM:(step + 1) * ACCUM]
        n_window = sum(sum(sum(r) for r in mb["label_mask"]) for mb in window)
        step_loss = 0.0
        for mb in window:
            ids = torch.tensor(mb["input_ids"])
            attn = torch.tensor(mb["attention_mask"])
            lab = torch.tensor(mb["label_mask"]).bool()
            logits = model(input_ids=ids, attention_mask=attn).logits.float()
            lp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            loss = -lp[lab[:, 1:]].sum() / n_window
            loss.backward()
            step_loss += float(loss)
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, HP["max_grad_norm"])))
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(step_loss)
        print(f"step {step}: loss {step_loss:.6f} grad_norm {norms[-1]:.4f} lr {lrs[-1]:.4g}")
    assert any(n > HP["max_grad_norm"] for n in norms), "clipping never active"
    save_file({n: p.detach().contiguous() for n, p in zip(names, params)},
              os.path.join(OUT, "sft_5steps.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(OUT, "sft_5steps.json"), "w") as f:
        json.dump(dict(model=MODEL, steps=STEPS, accumulation=ACCUM, hyper=HP, micro_batches=mbs,
                       loss_per_step=losses, grad_norm_per_step=norms, lr_per_step=lrs,
                       torch_version=torch.__version__, transformers_version=transformers.__version__),
                  f, separators=(",", ":"))
    for fname in os.listdir(OUT):
        os.chmod(os.path.join(OUT, fname), 0o644)


if __name__ == "__main__":
    main()
