#!/usr/bin/env python3
"""Optimizer fixtures: torch.optim.AdamW with Trainer's weight-decay groups, clip_grad_norm_ and
transformers' get_scheduler, run for 5 steps on a fixture model's parameters.

Gradients are synthetic so that C can make the same ones without storing them: at step k,
parameter number j (named_parameters order), element i (flattened):

    g = float32(sin(0.37 * (i + 1) + 1.3 * k + 0.11 * j)) * SCALES[k]

SCALES mix steps where clipping is active and steps where it is not. Writes
tests/fixtures/optimizer/<case>.json (config, decay names, per-step lr and pre-clip grad_norm)
and <case>.safetensors (the parameters after the last step), plus schedules.json (the lr
multiplier of each schedule type at every step, from get_scheduler).

    tools/reference/.venv/bin/python tools/reference/make_optimizer_fixtures.py
"""
import json
import math
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "optimizer")
SCALES = [0.001, 0.05, 0.002, 0.1, 0.0005]

CASES = [
    dict(name="adamw_cosine_clip", model="llama_tied", lr=1e-2, weight_decay=0.1, schedule="cosine",
         warmup_steps=2, max_grad_norm=1.0, betas=(0.9, 0.999), eps=1e-8),
    dict(name="adamw_linear_qknorm", model="qwen3_qknorm", lr=5e-3, weight_decay=0.01, schedule="linear",
         warmup_steps=0.25, max_grad_norm=0.5, betas=(0.8, 0.99), eps=1e-6),
]


def synthetic_grad(shape, k, j):
    n = math.prod(shape)
    i = torch.arange(n, dtype=torch.float64)
    return (torch.sin(0.37 * (i + 1) + 1.3 * k + 0.11 * j).float() * SCALES[k]).reshape(shape)


def train_synthetic(params, opt, sched, total, max_grad_norm):
    """`total` steps of synthetic gradients with clip_grad_norm_; the lr and pre-clip norm of each."""
    lrs, norms = [], []
    for k in range(total):
        for j, p in enumerate(params):
            p.grad = synthetic_grad(p.shape, k, j)
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm)))
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return lrs, norms


def run_case(case, total=5):
    model = mf.load_fp32(os.path.join(mf.FIXTURES, case["model"]))
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    decay = set(transformers.Trainer.get_decay_parameter_names(None, model))
    groups = [{"params": [p for n, p in zip(names, params) if n in decay], "weight_decay": case["weight_decay"]},
              {"params": [p for n, p in zip(names, params) if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=case["lr"], betas=case["betas"], eps=case["eps"])
    ws = case["warmup_steps"]
    warmup = int(ws) if ws >= 1 else math.ceil(total * ws)
    sched = transformers.get_scheduler(case["schedule"], opt, num_warmup_steps=warmup, num_training_steps=total)
    lrs, norms = train_synthetic(params, opt, sched, total, case["max_grad_norm"])
    save_file({n: p.detach().contiguous() for n, p in zip(names, params)},
              os.path.join(OUT, case["name"] + ".safetensors"), metadata={"format": "pt"})
    meta = dict(case, betas=list(case["betas"]), steps=total, warmup=warmup, scales=SCALES,
                param_names=names, decay_names=sorted(decay), lr_per_step=lrs, grad_norm_per_step=norms,
                torch_version=torch.__version__, transformers_version=transformers.__version__)
    with open(os.path.join(OUT, case["name"] + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{case['name']}: lr {['%.3g' % x for x in lrs]}, grad_norm {['%.3g' % x for x in norms]}")


def schedules(total=10, warmup=3):
    table = {}
    for name in ("constant", "constant_with_warmup", "linear", "cosine"):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched = transformers.get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=total)
        factors = []
        for _ in range(total + 2):
            factors.append(sched.get_last_lr()[0])
            opt.step()
            sched.step()
        table[name] = factors
    with open(os.path.join(OUT, "schedules.json"), "w") as f:
        json.dump({"total": total, "warmup": warmup, "factors": table,
                   "transformers_version": transformers.__version__}, f, indent=1)


def main():
    os.makedirs(OUT, exist_ok=True)
    for case in CASES:
        run_case(case)
    schedules()
    for f in os.listdir(OUT):
        os.chmod(os.path.join(OUT, f), 0o644)


if __name__ == "__main__":
    main()
