#!/usr/bin/env python3
"""LoRA fixtures with peft: an adapter on a fixture model, its forward log-probs, the gradients of
lora_A / lora_B for the SFT loss, and merge_and_unload's weights.

For each case (base model, LoraConfig) the adapter is initialised as peft does, then lora_B (zero at
init) and lora_A are set to seeded random values so the adapter changes the output. Writes
tests/fixtures/lora/<case>/: adapter_config.json + adapter_model.safetensors (peft's
save_pretrained), reference.json (token_logp for the base fixture's batch with the adapter on, and
with it disabled; loss), grads.safetensors (the gradients of every lora_A / lora_B, named as in the
adapter file), merged.safetensors (merge_and_unload's weights).

    tools/reference/.venv/bin/python tools/reference/make_lora_fixtures.py [CASE...]
"""
import json
import os
import shutil
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "lora")
CASES = [
    ("qwen2_qv", "qwen2_bias", dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])),
    ("llama_all_linear", "llama_rope_llama3", dict(r=4, lora_alpha=16, target_modules="all-linear")),
    ("qwen3_rslora", "qwen3_qknorm", dict(r=8, lora_alpha=8, use_rslora=True,
                                          target_modules=["q_proj", "k_proj", "o_proj", "down_proj"])),
    # Phi-3's fused modules: one A and one stacked B for qkv_proj and for gate_up_proj
    ("phi3_all_linear", "phi3_window", dict(r=4, lora_alpha=16, target_modules="all-linear")),
    ("phi3_qkv_gate_up", "phi3_longrope", dict(r=2, lora_alpha=4, target_modules=["qkv_proj", "gate_up_proj"])),
    # SmolLM3: NoPE layers 1 and 3, sliding window on them, biases (make_smollm3_fixtures.py)
    ("smollm3_all_linear", "smollm3_window", dict(r=4, lora_alpha=4, target_modules="all-linear")),
    # Gemma 2: the adapted products feed (1 + w) norms after o_proj and down_proj, soft caps
    ("gemma2_all_linear", "gemma2_tiny", dict(r=4, lora_alpha=16, target_modules="all-linear")),
    # Gemma 3: q/k products feed (1 + w) q/k norms, then the local or the global RoPE
    ("gemma3_all_linear", "gemma3_tiny", dict(r=4, lora_alpha=16, target_modules="all-linear")),
]


def token_logp(model, ids, mask):
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    return mf.token_logp_from_logits(logits.detach(), ids, mask), logits


def main():
    only = set(sys.argv[1:])  # case names to (re)make; none: every case
    for idx, (name, base, kw) in enumerate(CASES):
        if only and name not in only:
            continue
        path = os.path.join(OUT, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        model = mf.load_fp32(os.path.join(mf.FIXTURES, base))
        torch.manual_seed(100 + idx)
        peft_model = get_peft_model(model, LoraConfig(lora_dropout=0.0, task_type="CAUSAL_LM", **kw))
        g = torch.Generator().manual_seed(200 + idx)
        with torch.no_grad():
            for n, p in peft_model.named_parameters():
                if "lora_A" in n or "lora_B" in n:
                    p.copy_(0.3 * torch.randn(p.shape, generator=g))
        peft_model.eval()
        peft_model.save_pretrained(path)
        if os.path.exists(os.path.join(path, "README.md")):  # peft's model card: not a fixture
            os.remove(os.path.join(path, "README.md"))
        write_references(peft_model, base, path, name)


def write_references(peft_model, base, path, name):
    """reference.json, grads.safetensors and merged.safetensors for an adapter on `base`."""
    with open(os.path.join(mf.FIXTURES, base, "reference.json")) as f:
        ref = json.load(f)
    ids, mask = torch.tensor(ref["input_ids"]), torch.tensor(ref["attention_mask"])
    lp_on, logits = token_logp(peft_model, ids, mask)
    with peft_model.disable_adapter():
        lp_off, _ = token_logp(peft_model, ids, mask)
    # SFT loss gradients of the adapter
    lsm = torch.log_softmax(logits[:, :-1], dim=-1)
    lp = lsm.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    real = mask[:, 1:].bool()
    loss = -lp[real].sum() / int(real.sum())
    loss.backward()
    grads = {}
    for n, p in peft_model.named_parameters():
        if p.grad is not None:
            grads[n.replace(".default", "")] = p.grad.detach().contiguous()
    save_file(grads, os.path.join(path, "grads.safetensors"), metadata={"format": "pt"})
    merged = peft_model.merge_and_unload()
    save_file({n: p.detach().contiguous() for n, p in merged.state_dict().items()
               if not (merged.config.tie_word_embeddings and n == "lm_head.weight")},
              os.path.join(path, "merged.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump({"base": base, "peft_version": __import__("peft").__version__,
                   "token_logp_adapter": lp_on.tolist(), "token_logp_base": lp_off.tolist(),
                   "loss": float(loss)}, f)
    for fn in os.listdir(path):
        os.chmod(os.path.join(path, fn), 0o644)
    print(f"{name}: {sorted(os.listdir(path))}, {len(grads)} gradients, loss {float(loss):.5f}")


if __name__ == "__main__":
    main()
