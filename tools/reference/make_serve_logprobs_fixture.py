#!/usr/bin/env python3
"""The log-probabilities `rlhf serve` must report (tests/serve/serve_logprobs.py), from
transformers on models/tiny-arith in float32.

vLLM's OpenAI server reports log-probs of the raw logits (logprobs_mode "raw_logprobs": the
log-softmax before repetition penalty, temperature, top-k, top-p); TRL's vLLM server starts vLLM
with logprobs_mode="processed_logprobs" (after them). Cases:
  completion  prompt "The answer" (the tokenizer's special tokens added, as the server tokenises a
              text prompt): transformers' greedy continuation of at most 8 tokens (eos 0), and at
              each step the 20 most likely ids, their texts (tokenizer.decode([id])) and raw
              log-probs, with the chosen token's;
  chat        the same for [{"role": "user", "content": "Tell me a story"}] through the chat
              template with the generation prompt;
  processed   the completion prompt and its first 2 greedy tokens: the log-softmax after
              transformers' TemperatureLogitsWarper(0.7) and TopKLogitsWarper(4), its finite ids
              (4) by rank.
Ranks: descending log-prob, equal values in ascending id order (a stable sort).
Writes tests/fixtures/serve/logprobs.json.

    /work/venv-ref/bin/python tools/reference/make_serve_logprobs_fixture.py   # repo root, ~5 s
"""
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "models", "tiny-arith")
OUT = os.path.join(REPO, "tests", "fixtures", "serve", "logprobs.json")
TOP = 20
MAX_NEW = 8
EOS = 0


def ranked(lp, n):
    """The n most likely ids of a log-prob row (descending, ties by ascending id)."""
    order = sorted(range(lp.shape[0]), key=lambda j: (-float(lp[j]), j))[:n]
    return order, [float(lp[j]) for j in order]


def next_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float()


def greedy_case(model, tok, prompt_ids):
    """transformers' greedy continuation, and each step's raw top-20."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=MAX_NEW, do_sample=False,
                             eos_token_id=EOS, pad_token_id=EOS, top_k=None, top_p=None,
                             temperature=None)
    tokens = out[0, len(prompt_ids):].tolist()
    if EOS in tokens:
        tokens = tokens[:tokens.index(EOS) + 1]
    steps = []
    for t, tok_id in enumerate(tokens):
        lp = torch.log_softmax(next_logits(model, prompt_ids + tokens[:t]).double(), -1)
        ids, lps = ranked(lp, TOP)
        steps.append({"token": tok_id, "text": tok.decode([tok_id]), "logprob": float(lp[tok_id]),
                      "top_ids": ids, "top_tokens": [tok.decode([j]) for j in ids],
                      "top_logprobs": lps})
    return {"prompt_ids": prompt_ids, "tokens": tokens, "steps": steps}


def main():
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    completion = greedy_case(model, tok, tok("The answer", add_special_tokens=True)["input_ids"])
    completion["prompt"] = "The answer"
    messages = [{"role": "user", "content": "Tell me a story"}]
    chat_ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                       return_dict=True)["input_ids"]
    chat = greedy_case(model, tok, list(chat_ids))
    chat["messages"] = messages

    prefix = completion["prompt_ids"] + completion["tokens"][:2]
    z = next_logits(model, prefix)[None]
    ids_t = torch.tensor([prefix])
    z = TemperatureLogitsWarper(0.7)(ids_t, z)
    z = TopKLogitsWarper(4)(ids_t, z)
    lp = torch.log_softmax(z[0].double(), -1)
    finite = int(torch.isfinite(lp).sum())
    ids, lps = ranked(lp, finite)
    processed = {"prompt_ids": prefix, "temperature": 0.7, "top_k": 4, "top_ids": ids,
                 "top_logprobs": lps}

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                   "completion": completion, "chat": chat, "processed": processed}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: completion {len(completion['tokens'])} tokens, chat {len(chat['tokens'])}, "
          f"processed {finite} ids")


if __name__ == "__main__":
    main()
