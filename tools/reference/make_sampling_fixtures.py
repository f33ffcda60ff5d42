#!/usr/bin/env python3
"""Sampling fixtures: transformers' own logits processors (RepetitionPenalty, then Temperature,
TopK, TopP, MinP warpers, in generate()'s order) applied to one row of real logits, and the
softmax of the result -- the distribution sampling must draw from.

Logits: the llama_tied fixture model's next-token logits after a short prompt; the history for
the repetition penalty is that prompt. Writes tests/fixtures/generate/sampling.json.

    tools/reference/.venv/bin/python tools/reference/make_sampling_fixtures.py
"""
import json
import os
import sys

import torch
from transformers.generation.logits_process import (LogitsProcessorList, MinPLogitsWarper,
                                                    RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                                                    TopKLogitsWarper, TopPLogitsWarper)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

SETTINGS = [
    {"temperature": 1.0},
    {"temperature": 0.7},
    {"temperature": 1.0, "top_k": 5},
    {"temperature": 1.0, "top_p": 0.8},
    {"temperature": 1.0, "min_p": 0.3},
    {"temperature": 1.0, "repetition_penalty": 1.5},
    {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "min_p": 0.05, "repetition_penalty": 1.2},
]


def processors(s):
    p = LogitsProcessorList()
    if s.get("repetition_penalty", 1.0) != 1.0:
        p.append(RepetitionPenaltyLogitsProcessor(penalty=s["repetition_penalty"]))
    if s.get("temperature", 1.0) != 1.0:
        p.append(TemperatureLogitsWarper(s["temperature"]))
    if s.get("top_k"):
        p.append(TopKLogitsWarper(top_k=s["top_k"]))
    if s.get("top_p", 1.0) < 1.0:
        p.append(TopPLogitsWarper(top_p=s["top_p"]))
    if s.get("min_p") is not None:
        p.append(MinPLogitsWarper(min_p=s["min_p"]))
    return p


def main():
    model = mf.load_fp32(os.path.join(mf.FIXTURES, "llama_tied"))
    history = [5, 17, 42, 17, 99, 3]
    ids = torch.tensor([history])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, -1, :].float()
    cases = []
    for s in SETTINGS:
        scores = processors(s)(ids, logits.clone())
        probs = torch.softmax(scores, dim=-1)[0]
        cases.append({"settings": s, "probs": probs.tolist()})
        print(s, "support", int((probs > 0).sum()))
    out = os.path.join(mf.REPO, "tests", "fixtures", "generate", "sampling.json")
    with open(out, "w") as f:
        json.dump({"history": history, "logits": logits[0].tolist(), "cases": cases}, f)
    os.chmod(out, 0o644)


if __name__ == "__main__":
    main()
