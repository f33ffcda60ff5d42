#!/usr/bin/env python3
"""Fresh PEFT LoRA adapters as a seeded script makes them: transformers.set_seed(seed), the
fixture model from_pretrained, get_peft_model(LoraConfig(...)), save_pretrained. rlhf.c's
lora_create for the same seed must give the same A bit for bit and B = 0
(tests/test_lora_init.c).

Also checks, and records in cases.json, that from_pretrained drew nothing from torch's generator
(every weight is loaded), so PEFT's draws start at the seed.

    /work/venv-ref/bin/python tools/reference/make_lora_init_fixtures.py   # from the repo root, ~10 s
"""
import json
import os
import shutil

import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "lora_init")
ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CASES = [
    {"name": "llama_r4_all7_s42", "model": "llama_text", "seed": 42, "r": 4, "alpha": 8, "targets": ALL7},
    {"name": "llama_r2_qv_s7", "model": "llama_text", "seed": 7, "r": 2, "alpha": 4,
     "targets": ["q_proj", "v_proj"]},
    {"name": "llama_r3_alllinear_smax", "model": "llama_text", "seed": 2**32 - 1, "r": 3, "alpha": 6,
     "targets": "all-linear"},
    {"name": "qwen2_r4_all7_s0", "model": "qwen2_bias", "seed": 0, "r": 4, "alpha": 16, "targets": ALL7},
]


def main():
    torch.set_num_threads(2)
    shutil.rmtree(OUT, ignore_errors=True)
    for c in CASES:
        transformers.set_seed(c["seed"])
        model = AutoModelForCausalLM.from_pretrained(os.path.join(ROOT, "tests", "fixtures", "models", c["model"]),
                                                     dtype=torch.float32)
        fresh = torch.Generator().manual_seed(c["seed"])
        c["from_pretrained_drew"] = not torch.equal(torch.get_rng_state(), fresh.get_state())
        assert not c["from_pretrained_drew"], "from_pretrained drew from the generator"
        pm = get_peft_model(model, LoraConfig(r=c["r"], lora_alpha=c["alpha"], target_modules=c["targets"],
                                              lora_dropout=0.0, task_type="CAUSAL_LM"))
        out = os.path.join(OUT, c["name"])
        pm.save_pretrained(out)
        os.remove(os.path.join(out, "README.md"))  # PEFT's model card: nothing the test reads
        os.chmod(os.path.join(out, "adapter_model.safetensors"), 0o644)
        with open(os.path.join(out, "adapter_config.json")) as f:
            ac = json.load(f)
        ac["base_model_name_or_path"] = "tests/fixtures/models/" + c["model"]  # not this checkout's path
        with open(os.path.join(out, "adapter_config.json"), "w") as f:
            json.dump(ac, f, indent=2, sort_keys=True)
            f.write("\n")
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "peft": peft.__version__,
                   "torch": torch.__version__, "cases": CASES}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
