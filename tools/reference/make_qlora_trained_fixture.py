#!/usr/bin/env python3
"""QLoRA round trip (issue 33): an adapter that `rlhf train` trained and saved with `adapter:
qlora, load_in_4bit: true` loads in peft over transformers + bitsandbytes' 4-bit base, and the
log-probs peft computes with it are recorded for test_qlora to compare with rlhf.c's.

1. A tiny Qwen2 (hidden 64, 2 layers, 4/2 heads, q/k/v biases, untied lm_head, vocab 3072 for the
   repository's qwen2_bytelevel tokenizer fixture; every linear's input width a multiple of 64,
   as bitsandbytes' CPU dequantisation wants), random weights stored in bf16.
2. `rlhf train` (the binary given, default build/rlhf): rl: dpo, beta 0.1, bf16: true, adapter:
   qlora, load_in_4bit: true, r 4, alpha 8, all-linear, 6 steps of 4 pairs at lr 2e-2 (the loss
   falls from ln 2). The adapter it saves (adapter_model.safetensors, adapter_config.json) is
   copied as it is.
3. transformers loads the base in 4 bits as Axolotl's qlora does (BitsAndBytesConfig
   load_in_4bit, nf4, double quantisation; compute dtype and dtype fp32 so that the arithmetic
   is fp32 as rlhf.c's), peft.PeftModel.from_pretrained loads rlhf.c's adapter over it, and the
   token log-probs of two rows are taken with the adapter on and off; the same over an fp32 copy
   of the model holding each dequantised 4-bit matrix (exact fp32 arithmetic). bnb_error is the
   largest difference between the two: bitsandbytes' own error (its CPU 4-bit kernel multiplies
   in bf16), the tolerance rlhf.c's log-probs are held to against peft-over-bitsandbytes.

Writes tests/fixtures/qlora_trained/: model/, adapter/, reference.json (as
tests/fixtures/qlora's, plus adapter_effect: how far the adapter moves the log-probs, and the
rlhf.c commit that trained it), quant.safetensors (layer 0's q_proj as bitsandbytes holds it).

    /work/venv-ref/bin/python tools/reference/make_qlora_trained_fixture.py [--rlhf build/rlhf]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import peft
import torch
import transformers
from safetensors.torch import load_file
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402
import qlora_common as qc  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "qlora_trained")
TOKENIZER = os.path.join(mf.REPO, "tests", "fixtures", "tokenizers", "qwen2_bytelevel")


def train_adapter(rlhf, model_dir, work):
    """Runs `rlhf train` with adapter: qlora; returns the output directory."""
    pairs = os.path.join(work, "pairs.jsonl")
    with open(pairs, "w") as f:
        for i in range(16):  # harness_write_arith_pairs' rows
            f.write(json.dumps({"prompt": f"Q{i}: {i} plus {i + 2} is", "chosen": f" {2 * i + 2}.",
                                "rejected": f" {5 * i + 1} or so, I guess."}) + "\n")
    out = os.path.join(work, "out")
    config = os.path.join(work, "qlora.yaml")
    with open(config, "w") as f:
        f.write(f"""base_model: {model_dir}
tokenizer_config: {TOKENIZER}
rl: dpo
rl_beta: 0.1
datasets:
  - path: {pairs}
sequence_len: 64
micro_batch_size: 4
max_steps: 6
learning_rate: 2e-2
lr_scheduler: constant
warmup_steps: 0
seed: 3
bf16: true
adapter: qlora
load_in_4bit: true
lora_r: 4
lora_alpha: 8
lora_target_linear: true
output_dir: {out}
""")
    subprocess.run([rlhf, "train", config], check=True, env=dict(os.environ, OMP_NUM_THREADS="2"))
    losses = [json.loads(line)["loss"] for line in open(os.path.join(out, "metrics.jsonl"))]
    print("rlhf.c's DPO losses", losses)
    if not losses[-1] < losses[0] - 0.05:
        sys.exit("the QLoRA run did not learn; no fixture written")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rlhf", default=os.path.join(mf.REPO, "build", "rlhf"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    torch.manual_seed(33)
    cfg = Qwen2Config(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                      num_key_value_heads=2, num_hidden_layers=2, vocab_size=3072,
                      tie_word_embeddings=False, max_position_embeddings=128)
    model_dir = os.path.join(OUT, "model")
    qc.save_bf16_model(Qwen2ForCausalLM(cfg), model_dir)

    adapter_dir = os.path.join(OUT, "adapter")
    os.makedirs(adapter_dir)
    with tempfile.TemporaryDirectory() as work:
        out = train_adapter(a.rlhf, model_dir, work)
        for fn in ("adapter_model.safetensors", "adapter_config.json"):
            shutil.copy(os.path.join(out, fn), os.path.join(adapter_dir, fn))

    base, exact = qc.load_4bit_and_exact(model_dir)
    qc.save_quant_state(base, os.path.join(OUT, "quant.safetensors"))

    # rlhf.c's adapter, as a peft user loads it over the 4-bit base
    model = peft.PeftModel.from_pretrained(base, adapter_dir).eval()
    n_lora = sum(1 for n, _ in model.named_parameters() if "lora_A" in n)
    assert n_lora == 2 * 7, f"peft loaded {n_lora} lora_A matrices, expected 14 (all-linear)"
    # every tensor of the file went into the model, unchanged (peft only warns about a key it
    # could not place)
    saved = load_file(os.path.join(adapter_dir, "adapter_model.safetensors"))
    held = peft.get_peft_model_state_dict(model)
    assert sorted(saved) == sorted(held), (sorted(saved), sorted(held))
    assert all(torch.equal(saved[k].float(), held[k].float()) for k in saved)
    tok = transformers.AutoTokenizer.from_pretrained(TOKENIZER)
    texts = ["Q3: 3 plus 5 is 8.", "Q7: 7 plus 9 is 36 or so, I guess."]
    enc = tok(texts, padding=True, return_tensors="pt")  # right padding
    ids, mask = enc["input_ids"], enc["attention_mask"]
    on, off = qc.logp_on_off(model, ids, mask)
    exact = peft.PeftModel.from_pretrained(exact, adapter_dir).eval()
    exact_on, exact_off = qc.logp_on_off(exact, ids, mask)
    effect = float((on - off).abs().max())
    commit = subprocess.run(["git", "-C", mf.REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    ref = qc.reference(ids, mask, on, off, exact_on, exact_off, adapter_effect=effect,
                       trained_by=f"rlhf.c {commit}")
    bnb_error = ref["bnb_error"]
    if not effect > 10 * bnb_error:
        sys.exit(f"the adapter moves the log-probs by {effect:.3g}, not clearly more than "
                 f"bitsandbytes' error {bnb_error:.3g}: no test in that")
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f)
        f.write("\n")
    qc.make_readable(OUT)
    print(sorted(os.listdir(OUT)), "adapter effect", effect, "bitsandbytes' error", bnb_error)


if __name__ == "__main__":
    main()
