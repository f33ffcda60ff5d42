"""What make_qlora_fixture.py and make_qlora_trained_fixture.py share: a small model saved in
bf16, its 4-bit load as Axolotl's `adapter: qlora` / `load_in_4bit: true` loads it, the exact-fp32
copy holding each dequantised 4-bit matrix, the dump of one matrix's quant state, and the token
log-probs of both with the adapter on and off.

The 4-bit load: BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
bnb_4bit_use_double_quant=True) with bnb_4bit_compute_dtype=float32 and dtype=float32, so that the
arithmetic is fp32 as rlhf.c's (the checkpoint is stored in bf16, so loading it in fp32 rounds
nothing and the quantised values are those of a bf16 load)."""
import os

import bitsandbytes
import peft
import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

import make_model_fixtures as mf


def save_bf16_model(model, model_dir):
    """model in bf16 at model_dir, without the generation_config.json the tests do not read."""
    model.to(torch.bfloat16).save_pretrained(model_dir)
    for fn in ("generation_config.json",):
        if os.path.exists(os.path.join(model_dir, fn)):
            os.remove(os.path.join(model_dir, fn))


def load_4bit_and_exact(model_dir):
    """(base, exact): model_dir loaded in 4 bits by bitsandbytes, and in fp32 with each 4-bit
    matrix replaced by its dequantisation (taken before any forward: on the CPU bitsandbytes
    repacks the weights at the first one), the exact-fp32-arithmetic reference."""
    base = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, device_map="cpu", attn_implementation="eager",
        quantization_config=BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32)).eval()
    exact = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    sd = exact.state_dict()
    with torch.no_grad():
        for n, mod in base.named_modules():
            if isinstance(mod, bitsandbytes.nn.Linear4bit):
                w = bitsandbytes.functional.dequantize_4bit(mod.weight.data, mod.weight.quant_state)
                sd[n + ".weight"].copy_(w.float().reshape(sd[n + ".weight"].shape))
    return base, exact


def save_quant_state(base, path):
    """Layer 0's q_proj as bitsandbytes holds it after loading (packed codes, absmax codes,
    second-level absmax, offset) to the safetensors file path."""
    q = base.model.layers[0].self_attn.q_proj
    assert isinstance(q, bitsandbytes.nn.Linear4bit)
    st = q.weight.quant_state
    save_file({"packed": q.weight.data.reshape(-1).contiguous(),
               "qabsmax": st.absmax.contiguous(),
               "absmax2": st.state2.absmax.contiguous(),
               "offset": st.offset.reshape(1).float().contiguous()}, path)


def logp_on_off(model, ids, mask):
    """Token log-probs of a peft model with its adapter on, then off."""
    with torch.no_grad():
        on = mf.token_logp_from_logits(model(input_ids=ids, attention_mask=mask).logits.float(),
                                       ids, mask)
        with model.disable_adapter():
            off = mf.token_logp_from_logits(
                model(input_ids=ids, attention_mask=mask).logits.float(), ids, mask)
    return on, off


def reference(ids, mask, on, off, exact_on, exact_off, **extra):
    """reference.json's fields: the rows, both pairs of log-probs, bnb_error (bitsandbytes' CPU
    4-bit matmul, its repacked bf16 kernel, against exact fp32 arithmetic), extra, versions."""
    bnb_error = float(max((on - exact_on).abs().max(), (off - exact_off).abs().max()))
    return {"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
            "token_logp_adapter": on.tolist(), "token_logp_base": off.tolist(),
            "token_logp_adapter_dequant": exact_on.tolist(),
            "token_logp_base_dequant": exact_off.tolist(), "bnb_error": bnb_error, **extra,
            "versions": {"bitsandbytes": bitsandbytes.__version__, "peft": peft.__version__,
                         "torch": torch.__version__, "transformers": transformers.__version__}}


def make_readable(out):
    """Every file under out readable by all (0644)."""
    for root, _, files in os.walk(out):
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)
