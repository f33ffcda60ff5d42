#!/usr/bin/env python3
"""Parameter gradients from PyTorch autograd for every fixture model (tests/fixtures/models/*).

For the batch in each reference.json (right-padded input_ids + attention_mask), with the model
loaded in fp32 (eager attention), the loss is the SFT-style mean negative log-likelihood over
every real target token:

    logits = model(input_ids, attention_mask).logits                  (fp32)
    lp[b, t] = log_softmax(logits[b, t-1])[input_ids[b, t]]    for real t >= 1
    loss = -sum(lp) / count

Writes, next to reference.json:
    grads.safetensors   d loss / d parameter, fp32, named as in the checkpoint (tied models: the
                        embedding's gradient includes the lm_head's)
    grads.json          {"loss": ..., "count": ..., versions}

    tools/reference/.venv/bin/python tools/reference/make_grad_fixtures.py
"""
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402


def write_grads(path):
    """grads.safetensors and grads.json for the fixture directory `path` (which has reference.json)."""
    name = os.path.basename(path)
    with open(os.path.join(path, "reference.json")) as f:
        ref = json.load(f)
    ids = torch.tensor(ref["input_ids"])
    mask = torch.tensor(ref["attention_mask"])
    model = mf.load_fp32(path)
    model.train(False)
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    lsm = torch.log_softmax(logits[:, :-1], dim=-1)
    lp = lsm.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    real = mask[:, 1:].bool()
    count = int(real.sum())
    loss = -(lp[real]).sum() / count
    loss.backward()
    grads = {n: p.grad.detach().contiguous().float() for n, p in model.named_parameters()}
    save_file(grads, os.path.join(path, "grads.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "grads.json"), "w") as f:
        json.dump({"loss": float(loss), "count": count, "transformers_version": transformers.__version__,
                   "torch_version": torch.__version__}, f, indent=1)
    for fname in ("grads.safetensors", "grads.json"):
        os.chmod(os.path.join(path, fname), 0o644)
    print(f"{name:20s} loss {float(loss):.6f} over {count} tokens, {len(grads)} gradient tensors")


def main():
    for name in sorted(os.listdir(mf.FIXTURES)):
        path = os.path.join(mf.FIXTURES, name)
        if os.path.exists(os.path.join(path, "reference.json")):
            write_grads(path)


if __name__ == "__main__":
    main()
