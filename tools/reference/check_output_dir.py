#!/usr/bin/env python3
"""Checks that a model directory written by `rlhf train` loads in transformers and agrees with
rlhf.c: AutoModelForCausalLM.from_pretrained + AutoTokenizer.from_pretrained on the directory
(for an adapter run, the base named in adapter_config.json with peft's
PeftModel.from_pretrained on the directory, and `rlhf score --adapter`),
then, for a few prompt/completion pairs, the completion log-likelihood from transformers (prompt
tokenised with special tokens, completion without, as `rlhf score` does) against
`build/rlhf score` on the same directory. Prints both and the largest relative difference;
exits 1 above 1e-4.

    tools/reference/.venv/bin/python tools/reference/check_output_dir.py OUTPUT_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAIRS = [("What is 3 plus 4?", " 7"), ("Below is an instruction", " that describes a task."),
         ("café 🤖", " and more text")]


def main():
    out_dir = sys.argv[1]
    tok = AutoTokenizer.from_pretrained(out_dir)
    adapter_config = os.path.join(out_dir, "adapter_config.json")
    model_dir, extra = out_dir, []
    if os.path.exists(adapter_config):
        with open(adapter_config) as f:
            model_dir = json.load(f)["base_model_name_or_path"]
        extra = ["--adapter", out_dir]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    if extra:
        from peft import PeftModel
        model = PeftModel.from_pretrained(model, out_dir)
    model.eval()
    want = []
    for prompt, completion in PAIRS:
        p = tok(prompt)["input_ids"]
        c = tok(completion, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p + c])
        with torch.no_grad():
            lsm = torch.log_softmax(model(input_ids=ids).logits[0, :-1].double(), dim=-1)
        want.append(float(lsm[len(p) - 1:].gather(-1, ids[0, len(p):, None]).sum()))
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for prompt, completion in PAIRS:
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
    out = subprocess.run([os.path.join(ROOT, "build", "rlhf"), "score", "--model", model_dir, "--data", f.name] + extra,
                         check=True, capture_output=True, text=True).stdout
    got = [json.loads(line)["logp"] for line in out.splitlines()]
    worst = max(abs(g - w) / abs(w) for g, w in zip(got, want))
    for (prompt, completion), g, w in zip(PAIRS, got, want):
        print(f"{prompt!r} + {completion!r}: rlhf.c {g:.6f}  transformers {w:.6f}")
    print(f"loaded in transformers {__import__('transformers').__version__}; worst relative difference {worst:.2e}")
    sys.exit(0 if worst <= 1e-4 else 1)


if __name__ == "__main__":
    main()
