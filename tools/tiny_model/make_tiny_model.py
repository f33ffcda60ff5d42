#!/usr/bin/env python3
"""Builds the embedded default model, models/tiny-arith, and the quickstart data.

1. Synthetic task: "What is A + B?" / "What is A - B?" with A, B in 0..50, as Alpaca rows
   (instruction, input "", output) -> examples/data/arithmetic_train.jsonl (pre-training set) and
   examples/data/arithmetic_quickstart.jsonl (the quickstart's small set, disjoint seeds).
2. Tokenizer: byte-level BPE (digits split one by one, then GPT-2 byte-level), 512 entries,
   trained with the `tokenizers` library on the formatted prompts; special tokens
   <|endoftext|> (eos and pad), <|im_start|>, <|im_end|>; a ChatML chat template.
3. Model: a random LlamaForCausalLM (hidden 192, 6 layers, 6 heads / 2 kv heads, intermediate
   512, tied embeddings, ~2.5M parameters), saved in bf16 as the starting point.
4. Training: rlhf.c's own SFT, `build/rlhf train tools/tiny_model/pretrain.yaml`, writes
   models/tiny-arith (bf16 weights, config, tokenizer files).

Python (tokenizers, transformers from the reference virtualenv, tools/reference/README.md) is
used for steps 2-3 only; CI never runs this. From the repo root, after `make`:

    tools/reference/.venv/bin/python tools/tiny_model/make_tiny_model.py
"""
import json
import os
import random
import shutil
import subprocess

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "examples", "data")
INIT = os.path.join(ROOT, "build", "tiny-arith-init")
PRESET = "Below is an instruction that describes a task. Write a response that appropriately " \
         "completes the request.\n\n### Instruction:\n{}\n\n### Response:\n"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def arithmetic_rows(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        a, b = rng.randint(0, 50), rng.randint(0, 50)
        if rng.random() < 0.5:
            rows.append({"instruction": f"What is {a} + {b}?", "input": "", "output": str(a + b)})
        else:
            a, b = max(a, b), min(a, b)
            rows.append({"instruction": f"What is {a} - {b}?", "input": "", "output": str(a - b)})
    return rows


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def make_tokenizer(texts):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def main():
    os.makedirs(DATA, exist_ok=True)
    train = arithmetic_rows(6000, seed=1)
    quick = arithmetic_rows(256, seed=2)
    write_jsonl(os.path.join(DATA, "arithmetic_train.jsonl"), train)
    write_jsonl(os.path.join(DATA, "arithmetic_quickstart.jsonl"), quick)

    texts = [PRESET.format(r["instruction"]) + r["output"] for r in train]
    tok = make_tokenizer(texts)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=192, intermediate_size=512, num_hidden_layers=6,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512,
                         rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=None,
                         eos_token_id=tok.eos_token_id, pad_token_id=None)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    shutil.rmtree(INIT, ignore_errors=True)
    model.save_pretrained(INIT)
    tok.save_pretrained(INIT)
    n = sum(p.numel() for p in model.parameters())
    print(f"tokenizer {len(tok)} entries; model {n / 1e6:.2f}M parameters; initial weights in {INIT}")

    out = os.path.join(ROOT, "models", "tiny-arith")
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([os.path.join(ROOT, "build", "rlhf"), "train", os.path.join(ROOT, "tools", "tiny_model", "pretrain.yaml")],
                   check=True, cwd=ROOT)
    for f in ("metrics.jsonl",):
        path = os.path.join(out, f)
        if os.path.exists(path):
            os.rename(path, os.path.join(ROOT, "tools", "tiny_model", "pretrain_metrics.jsonl"))
    print(f"trained model in {out}")


if __name__ == "__main__":
    main()
