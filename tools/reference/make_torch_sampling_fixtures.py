#!/usr/bin/env python3
"""Sampled-generation fixtures: transformers' generate(do_sample=True) on fixture models under
torch.manual_seed(seed), as TRL's GRPOTrainer calls it (each prompt repeated n_per_prompt times in
consecutive rows, left-padded, the global generator). rlhf.c's generate() with a TorchGenerator
seeded alike (GenerateOptions.torch_rng) must pick the same tokens: torch.multinomial(probs, 1) on
the CPU is argmax(probs / q) with q = exponential_() over the whole [rows, vocab] batch each step,
rows already finished included, until every row has finished.

The eos id is the token the rows emit most often when generating without one, so that several
rows stop early and the others go on (their draws still depend on the stopped rows' share of each
step). "after" holds the next two float64 uniform_() draws of the generator after generate: equal
only when rlhf.c drew exactly as many numbers (steps x rows x vocab).

Writes tests/fixtures/generate/torch_sampled.json; tests/test_generate.c reads it.

    /work/venv-ref/bin/python tools/reference/make_torch_sampling_fixtures.py   # from the repo root, ~5 s
"""
import collections
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "generate", "torch_sampled.json")
PAD = 0
# model, seed, n_per_prompt, sampling (transformers' names), max_new_tokens
CASES = [("llama_tied", 5, 2, dict(temperature=1.0, top_k=0, top_p=1.0), 16),
         ("qwen2_bias", 17, 3, dict(temperature=0.7, top_k=20, top_p=1.0), 12),
         ("mistral_window", 29, 2, dict(temperature=1.3, top_k=0, top_p=0.9), 14)]
PROMPT_LENS = [3, 7, 1, 5]


def generate(model, prompts, n, sampling, max_new, seed, eos):
    rows = [p for p in prompts for _ in range(n)]
    T = max(len(p) for p in rows)
    ids = torch.full((len(rows), T), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for b, p in enumerate(rows):
        ids[b, T - len(p):] = torch.tensor(p)
        mask[b, T - len(p):] = 1
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=True,
                             eos_token_id=eos, pad_token_id=PAD, **sampling)
    after = torch.empty(2, dtype=torch.float64).uniform_()
    comps = []
    for b in range(len(rows)):
        c = out[b, T:].tolist()
        if eos is not None and eos in c:
            c = c[:c.index(eos) + 1]
        comps.append(c)
    return comps, ["%016x" % struct.unpack("<Q", struct.pack("<d", v))[0] for v in after.tolist()]


def main():
    torch.set_num_threads(2)
    cases = []
    for name, seed, n, sampling, max_new in CASES:
        model = mf.load_fp32(os.path.join(mf.FIXTURES, name))
        g = torch.Generator().manual_seed(seed)
        V = model.config.vocab_size
        prompts = [torch.randint(3, V, (k,), generator=g).tolist() for k in PROMPT_LENS]
        free, _ = generate(model, prompts, n, sampling, max_new, seed, eos=None)
        counts = collections.Counter(t for c in free for t in c[1:])
        eos = counts.most_common(1)[0][0]
        comps, after = generate(model, prompts, n, sampling, max_new, seed, eos)
        lens = [len(c) for c in comps]
        assert min(lens) < max_new, (name, lens)
        cases.append({"model": name, "seed": seed, "n_per_prompt": n, "sampling": sampling,
                      "max_new_tokens": max_new, "prompts": prompts, "eos_token_id": eos,
                      "completions": comps, "after": after})
        print(f"{name}: eos {eos}, completion lengths {lens}")
    with open(OUT, "w") as f:
        json.dump({"torch": torch.__version__, "cases": cases}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
