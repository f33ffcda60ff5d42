#!/usr/bin/env python3
"""The other direction of the LoRA fixtures: adapters trained and saved by rlhf.c, loaded by peft.

For each case, `build/rlhf train` trains a LoRA adapter on tests/fixtures/models/llama_text for a
few steps (a seeded synthetic dataset, a large learning rate so that lora_B moves far from zero)
and saves it; its adapter_config.json and adapter_model.safetensors are copied to
tests/fixtures/lora/<case>/. peft then loads that directory with PeftModel.from_pretrained and
writes the same references as make_lora_fixtures.py (reference.json with the log-probs with the
adapter on and off, grads.safetensors, merged.safetensors), so test_lora checks that peft reads
what rlhf.c writes exactly as rlhf.c does.

    cmake --build build && tools/reference/.venv/bin/python tools/reference/make_rlhf_adapter_fixtures.py [CASE...]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from peft import PeftModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_lora_fixtures as lf  # noqa: E402
import make_model_fixtures as mf  # noqa: E402

BASE = "llama_text"
CASES = [
    ("rlhf_all_linear_rslora",
     "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_dropout: 0.1\npeft_use_rslora: true\n"
     "lora_target_linear: true\n"),
    ("rlhf_qvo",
     "adapter: lora\nlora_r: 2\nlora_alpha: 6\nlora_target_modules:\n  - q_proj\n  - v_proj\n"
     "  - self_attn.o_proj\n"),
    # Phi-3's fused modules. Extra entries: the model trained (phi3_text has a tokenizer) and the one
    # peft loads the adapter onto for the references (phi3_window: the same layer shapes, and the
    # reference.json batch test_lora reads)
    ("rlhf_phi3_qkv_gate_up",
     "adapter: lora\nlora_r: 2\nlora_alpha: 4\nlora_target_modules:\n  - qkv_proj\n  - gate_up_proj\n"
     "  - o_proj\n", "phi3_text", "phi3_window"),
    # SmolLM3 (NoPE layers 1 and 3): trained on smollm3_text, loaded onto smollm3_nope (the same
    # layer shapes and NoPE layers)
    ("rlhf_smollm3_all_linear", "adapter: lora\nlora_r: 4\nlora_alpha: 4\nlora_target_linear: true\n",
     "smollm3_text", "smollm3_nope"),
    # Gemma 2: trained on models/tiny-arith-gemma2 (a tokenizer, gemma2_tiny's layer shapes), loaded
    # onto gemma2_tiny
    ("rlhf_gemma2_all_linear", "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n",
     "models/tiny-arith-gemma2", "gemma2_tiny"),
    # Gemma 3: trained on models/tiny-arith-gemma3 (gemma3_tiny's layer shapes), loaded onto
    # gemma3_tiny
    ("rlhf_gemma3_all_linear", "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_target_linear: true\n",
     "models/tiny-arith-gemma3", "gemma3_tiny"),
]


def train(tmp, name, adapter_keys, base=BASE):
    data = os.path.join(tmp, "data.jsonl")
    with open(data, "w") as f:
        for i in range(24):
            f.write(json.dumps({"instruction": f"Add {i} and {i + 3}.", "input": "",
                                "output": f"{2 * i + 3}"}) + "\n")
    config = os.path.join(tmp, f"{name}.yaml")
    out = os.path.join(tmp, name)
    with open(config, "w") as f:
        # a fixture's name, or a path from the repository root
        base_path = base if "/" in base else f"tests/fixtures/models/{base}"
        f.write(f"base_model: {base_path}\n"
                f"datasets:\n  - path: {data}\n    type: alpaca\n"
                "sequence_len: 512\nmicro_batch_size: 4\nmax_steps: 6\nlearning_rate: 0.05\n"
                f"lr_scheduler: constant\nwarmup_steps: 0\nseed: 3\noutput_dir: {out}\n"
                f"dataset_prepared_path: {tmp}/prepared\n" + adapter_keys)
    subprocess.run([os.path.join(mf.REPO, "build", "rlhf"), "train", config], check=True,
                   cwd=mf.REPO)
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        only = set(sys.argv[1:])  # case names to (re)make; none: every case
        for name, keys, *bases in CASES:
            if only and name not in only:
                continue
            trained_on, base = bases if bases else (BASE, BASE)
            trained = train(tmp, name, keys, trained_on)
            path = os.path.join(lf.OUT, name)
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path)
            for fn in ("adapter_config.json", "adapter_model.safetensors"):
                shutil.copy(os.path.join(trained, fn), os.path.join(path, fn))
            model = mf.load_fp32(os.path.join(mf.FIXTURES, base))
            peft_model = PeftModel.from_pretrained(model, path, is_trainable=True)
            peft_model.eval()  # dropout off, as in rlhf.c's inference
            lf.write_references(peft_model, base, path, name)


if __name__ == "__main__":
    torch.set_num_threads(2)
    main()
