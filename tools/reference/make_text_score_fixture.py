#!/usr/bin/env python3
"""Fixture for `rlhf score` on text: tests/fixtures/models/llama_text/.

A tiny random Llama (tied embeddings) whose vocabulary is exactly that of the Llama-3-style
fixture tokenizer tests/fixtures/tokenizers/llama3_bytelevel (which adds <|begin_of_text|>),
with that tokenizer's files copied in, so the directory is a complete Hugging Face model.

Besides the usual reference.json / score.jsonl (see make_model_fixtures.py), it writes
score_text.jsonl ({"prompt": ..., "completion": ...} per line) and, in reference.json,
"score_text": what transformers gives for each line when prompt and completion are tokenised
separately and concatenated -- prompt with the tokenizer's special tokens (BOS), completion
without -- each sequence scored alone:

    prompt_ids = tok(prompt)["input_ids"]
    completion_ids = tok(completion, add_special_tokens=False)["input_ids"]

    tools/reference/.venv/bin/python tools/reference/make_text_score_fixture.py
"""
import json
import os
import shutil
import sys

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402  (shared helpers and weight init)

NAME = "llama_text"
TOKENIZER = os.path.join(mf.REPO, "tests", "fixtures", "tokenizers", "llama3_bytelevel")

TEXTS = [
    ("The quick brown fox", " jumps over the lazy dog."),
    ("Question: what is 12 + 30?\nAnswer:", " 42"),
    ("café, naïve, 日本語 and emoji 🤖", " are all fine here!"),
    ("  leading spaces and\ttabs", "\n\nand a new paragraph"),
]


def main():
    tok = AutoTokenizer.from_pretrained(TOKENIZER)
    vocab = len(tok)
    config = LlamaConfig(**dict(mf.BASE, vocab_size=vocab), rms_norm_eps=1e-5, tie_word_embeddings=True,
                         **mf.rope_kwargs(LlamaConfig, 10000.0, None))
    mf.build_fixture(50, NAME, LlamaForCausalLM, config, {})
    path = os.path.join(mf.FIXTURES, NAME)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, f), os.path.join(path, f))
        os.chmod(os.path.join(path, f), 0o644)

    tok = AutoTokenizer.from_pretrained(path)
    assert tok.bos_token_id is not None and tok("x")["input_ids"][0] == tok.bos_token_id
    score_text = []
    for prompt, completion in TEXTS:
        p = tok(prompt)["input_ids"]
        c = tok(completion, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p + c])
        ones = torch.ones_like(ids)
        lp = mf.token_logp_from_logits(mf.forward_logits(mf.load_fp32(path), ids, ones), ids, ones)
        logp = float(lp[0, len(p):].sum())
        score_text.append({"prompt": prompt, "completion": completion, "prompt_ids": p,
                           "completion_ids": c, "logp": logp, "tokens": len(c),
                           "mean_logp": logp / len(c)})
        print(f"  {prompt!r} + {completion!r}: {len(p)}+{len(c)} tokens, logp {logp:.5f}")

    ref_path = os.path.join(path, "reference.json")
    with open(ref_path) as f:
        ref = json.load(f)
    ref["score_text"] = score_text
    with open(ref_path, "w") as f:
        f.write(json.dumps(ref, separators=(",", ":")) + "\n")
    with open(os.path.join(path, "score_text.jsonl"), "w") as f:
        for s in score_text:
            f.write(json.dumps({"prompt": s["prompt"], "completion": s["completion"]},
                               ensure_ascii=False) + "\n")
    print(f"{NAME}: {mf.dir_size(path)} bytes")


if __name__ == "__main__":
    main()
