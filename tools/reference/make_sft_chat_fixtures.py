#!/usr/bin/env python3
"""Fixtures for the chat_template SFT dataset type, from Axolotl's own strategy
(axolotl.prompt_strategies.chat_template, Axolotl 0.19.0 installed with --no-deps plus datasets,
colorama, accelerate, addict into the reference virtualenv).

Tokenizer: the qwen2_bytelevel fixture tokenizer (ChatML special tokens, eos_token <|im_end|>,
pad <|endoftext|>) with a ChatML chat_template added -> tests/fixtures/sft_chat/tokenizer/.
For each dataset configuration (field names, role mappings, roles_to_train, train_on_eos /
train_on_eot, drop_system_message, template choice) and each row, records what Axolotl's
strategy returns: input_ids and labels (-100 = not trained) -> tests/fixtures/sft_chat/cases.json.

    tools/reference/.venv/bin/python tools/reference/make_sft_chat_fixtures.py
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

import axolotl  # noqa: E402
from axolotl.prompt_strategies.chat_template import load  # noqa: E402
from axolotl.utils.dict import DictDefault  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "sft_chat")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
          " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")

ROWS = [
    {"messages": [{"role": "system", "content": "You add numbers."},
                  {"role": "user", "content": "What is 2 + 3?"},
                  {"role": "assistant", "content": "5"}]},
    {"messages": [{"role": "user", "content": "Hi there"},
                  {"role": "assistant", "content": "Hello! How can I help?"},
                  {"role": "user", "content": "Count to three."},
                  {"role": "assistant", "content": "one, two, three"}]},
    {"messages": [{"role": "user", "content": "café 🤖 日本語"},
                  {"role": "assistant", "content": " spaces  and\ttabs\n"}]},
]
SHAREGPT_ROWS = [
    {"conversations": [{"from": "system", "value": "Be brief."},
                       {"from": "human", "value": "Name a colour."},
                       {"from": "gpt", "value": "Blue."},
                       {"from": "human", "value": "Another?"},
                       {"from": "gpt", "value": "Red."}]},
]

CASES = [
    ("defaults", {}, ROWS),
    ("train_user_too", {"roles_to_train": ["assistant", "user"]}, ROWS),
    ("eos_all", {"train_on_eos": "all"}, ROWS),
    ("eos_last", {"train_on_eos": "last"}, ROWS),
    ("eos_none", {"train_on_eos": "none"}, ROWS),
    ("drop_system", {"drop_system_message": True}, ROWS),
    ("sharegpt_mapping", {"field_messages": "conversations",
                          "message_property_mappings": {"role": "from", "content": "value"},
                          "roles": {"user": ["human"], "assistant": ["gpt"], "system": ["system"]}},
     SHAREGPT_ROWS),
]


def main():
    tok_dir = os.path.join(OUT, "tokenizer")
    shutil.rmtree(tok_dir, ignore_errors=True)
    os.makedirs(tok_dir)
    src = os.path.join(mf.REPO, "tests", "fixtures", "tokenizers", "qwen2_bytelevel")
    shutil.copy(os.path.join(src, "tokenizer.json"), tok_dir)
    with open(os.path.join(src, "tokenizer_config.json")) as f:
        tc = json.load(f)
    tc["chat_template"] = CHATML
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=2)
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    cases = []
    for name, ds_cfg, rows in CASES:
        cfg = DictDefault({"sequence_len": 512, "train_on_inputs": False, "chat_template": "tokenizer_default"})
        strategy = load(tokenizer, cfg, DictDefault(dict(ds_cfg, type="chat_template")))
        outs = []
        for row in rows:
            r = strategy.tokenize_prompt(json.loads(json.dumps(row)))
            outs.append({"row": row, "input_ids": list(r["input_ids"]), "labels": list(r["labels"])})
        cases.append({"name": name, "dataset": ds_cfg, "examples": outs})
        trained = sum(1 for o in outs for x in o["labels"] if x != -100)
        print(f"{name}: {len(outs)} rows, {trained} trained tokens")
    with open(os.path.join(OUT, "cases.json"), "w") as f:
        json.dump({"axolotl_version": axolotl.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
    for root, _, files in os.walk(OUT):
        for fn in files:
            os.chmod(os.path.join(root, fn), 0o644)


if __name__ == "__main__":
    main()
