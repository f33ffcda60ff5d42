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

import bitsandbytes
import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

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
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(model_dir)
    for fn in ("generation_config.json",):
        if os.path.exists(os.path.join(model_dir, fn)):
            os.remove(os.path.join(model_dir, fn))

    base = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, device_map="cpu", attn_implementation="eager",
        quantization_config=BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32)).eval()
    # the same model in fp32 with each 4-bit matrix dequantised (before any forward: on the CPU
    # bitsandbytes repacks the weights at the first one): the exact-arithmetic reference
    exact = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    sd = exact.state_dict()
    with torch.no_grad():
        for n, mod in base.named_modules():
            if isinstance(mod, bitsandbytes.nn.Linear4bit):
                w = bitsandbytes.functional.dequantize_4bit(mod.weight.data, mod.weight.quant_state)
                sd[n + ".weight"].copy_(w.float().reshape(sd[n + ".weight"].shape))
    q = base.model.layers[0].self_attn.q_proj
    assert isinstance(q, bitsandbytes.nn.Linear4bit)
    st = q.weight.quant_state
    save_file({"packed": q.weight.data.reshape(-1).contiguous(),
               "qabsmax": st.absmax.contiguous(),
               "absmax2": st.state2.absmax.contiguous(),
               "offset": st.offset.reshape(1).float().contiguous()},
              os.path.join(OUT, "quant.safetensors"))

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
    with torch.no_grad():
        on = mf.token_logp_from_logits(model(input_ids=ids, attention_mask=mask).logits.float(),
                                       ids, mask)
        with model.disable_adapter():
            off = mf.token_logp_from_logits(
                model(input_ids=ids, attention_mask=mask).logits.float(), ids, mask)
    exact = peft.PeftModel.from_pretrained(exact, os.path.join(OUT, "adapter")).eval()
    with torch.no_grad():
        exact_on = mf.token_logp_from_logits(
            exact(input_ids=ids, attention_mask=mask).logits.float(), ids, mask)
        with exact.disable_adapter():
            exact_off = mf.token_logp_from_logits(
                exact(input_ids=ids, attention_mask=mask).logits.float(), ids, mask)
    # bitsandbytes' CPU 4-bit matmul (its repacked bf16 kernel) against exact fp32 arithmetic
    bnb_error = float(max((on - exact_on).abs().max(), (off - exact_off).abs().max()))
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
                   "token_logp_adapter": on.tolist(), "token_logp_base": off.tolist(),
                   "token_logp_adapter_dequant": exact_on.tolist(),
                   "token_logp_base_dequant": exact_off.tolist(), "bnb_error": bnb_error,
                   "versions": {"bitsandbytes": bitsandbytes.__version__,
                                "peft": peft.__version__, "torch": torch.__version__,
                                "transformers": transformers.__version__}}, f)
        f.write("\n")
    for root, _, files in os.walk(OUT):
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)
    print(sorted(os.listdir(OUT)), "adapter effect", float((on - off).abs().max()),
          "bitsandbytes' error", bnb_error)


if __name__ == "__main__":
    main()
