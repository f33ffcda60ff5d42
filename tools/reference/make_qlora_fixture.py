#!/usr/bin/env python3
"""QLoRA fixture: a PEFT LoRA adapter over a base loaded in 4 bits by transformers + bitsandbytes on
the CPU, as Axolotl's `adapter: qlora` / `load_in_4bit: true` loads it: BitsAndBytesConfig(
load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True), here with
bnb_4bit_compute_dtype=float32 and dtype=float32 so that the arithmetic is fp32 as rlhf.c's
(the checkpoint is stored in bf16, so loading it in fp32 rounds nothing and the quantised values
are those of a bf16 load).

The model is a small Llama whose every linear layer has an input width that is a multiple of
64 (bitsandbytes' CPU dequantisation assumes whole blocks per row); its weights are random,
stored in bf16. The adapter (all-linear, r 4) has seeded random lora_A and lora_B so that it
changes the output.

Writes tests/fixtures/qlora/: model/ (config.json, model.safetensors in bf16), adapter/
(peft's save_pretrained), reference.json (input_ids, attention_mask, token_logp with the adapter
and with it disabled: over the 4-bit base as bitsandbytes computes it, and over an fp32 copy with
each matrix dequantised, so fp32 arithmetic throughout; bnb_error, the largest difference between
the two: bitsandbytes' own error, its CPU kernel multiplying in bf16), quant.safetensors (layer 0's q_proj as bitsandbytes
holds it after loading: packed codes, absmax codes, second-level absmax, offset).

    tools/reference/.venv/bin/python tools/reference/make_qlora_fixture.py   # ~10 s
"""
import json
import os
import shutil
import sys

import peft
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402
import qlora_common as qc  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "qlora")


def main():
    torch.set_num_threads(2)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    torch.manual_seed(33)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=256,
                      tie_word_embeddings=False, max_position_embeddings=64)
    model_dir = os.path.join(OUT, "model")
    qc.save_bf16_model(LlamaForCausalLM(cfg), model_dir)
    base, exact = qc.load_4bit_and_exact(model_dir)
    qc.save_quant_state(base, os.path.join(OUT, "quant.safetensors"))

    torch.manual_seed(34)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                            target_modules="all-linear", task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(35)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_A" in n or "lora_B" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    model.eval()
    model.save_pretrained(os.path.join(OUT, "adapter"))
    os.remove(os.path.join(OUT, "adapter", "README.md"))  # peft's model card: not needed

    g = torch.Generator().manual_seed(36)
    ids = torch.randint(0, 256, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    on, off = qc.logp_on_off(model, ids, mask)
    exact = peft.PeftModel.from_pretrained(exact, os.path.join(OUT, "adapter")).eval()
    exact_on, exact_off = qc.logp_on_off(exact, ids, mask)
    ref = qc.reference(ids, mask, on, off, exact_on, exact_off)
    bnb_error = ref["bnb_error"]
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f)
        f.write("\n")
    qc.make_readable(OUT)
    print(sorted(os.listdir(OUT)), "adapter effect", float((on - off).abs().max()),
          "bitsandbytes' error", bnb_error)


if __name__ == "__main__":
    main()
