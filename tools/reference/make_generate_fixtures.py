#!/usr/bin/env python3
"""Greedy-decoding fixtures: transformers' generate() on fixture models, batched, left-padded
prompts of unequal length (what generate expects), do_sample=False.

For each model the eos id is chosen from the model's own greedy output (a token that one row
produces in the middle of its continuation), and generate runs again with it, so one sequence
stops early while the others go on to max_new_tokens. Writes tests/fixtures/generate/<model>.json:
{"prompts": [[ids]], "eos_token_id": id, "max_new_tokens": n, "completions": [[ids]]}, each
completion without the padding generate adds after a finished sequence (eos included).

    tools/reference/.venv/bin/python tools/reference/make_generate_fixtures.py
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "generate")
MODELS = ["llama_rope_llama3", "llama_tied", "qwen2_bias", "qwen3_qknorm", "mistral_window", "llama_bf16"]
PROMPT_LENS = [3, 7, 12, 5]
MAX_NEW = 12
PAD = 0


def batch(prompts):
    T = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), T), PAD, dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, T - len(p):] = torch.tensor(p)
        mask[b, T - len(p):] = 1
    return ids, mask


def generate(model, prompts, eos):
    ids, mask = batch(prompts)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=MAX_NEW, do_sample=False,
                             eos_token_id=eos, pad_token_id=PAD, top_k=None, top_p=None, temperature=None)
    comps = []
    for b in range(len(prompts)):
        c = out[b, ids.shape[1]:].tolist()
        if eos is not None and eos in c:
            c = c[:c.index(eos) + 1]
        comps.append(c)
    return comps


def main():
    os.makedirs(OUT, exist_ok=True)
    for i, name in enumerate(MODELS):
        model = mf.load_fp32(os.path.join(mf.FIXTURES, name))
        g = torch.Generator().manual_seed(3000 + i)
        V = model.config.vocab_size
        prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in PROMPT_LENS]
        free = generate(model, prompts, eos=None)
        # an id that row 1 emits at step 4 and that no row emits before its own step 2
        eos = free[1][4]
        comps = generate(model, prompts, eos=eos)
        lens = [len(c) for c in comps]
        assert min(lens) < MAX_NEW and max(lens) == MAX_NEW, (name, lens)
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump({"model": name, "prompts": prompts, "eos_token_id": eos, "max_new_tokens": MAX_NEW,
                       "completions": comps}, f)
        os.chmod(os.path.join(OUT, f"{name}.json"), 0o644)
        print(f"{name}: eos {eos}, completion lengths {lens}")


if __name__ == "__main__":
    main()
