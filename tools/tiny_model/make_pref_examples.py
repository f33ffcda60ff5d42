#!/usr/bin/env python3
"""The small preference datasets of examples/{dpo,ipo,kto,orpo,simpo}.yaml: arithmetic questions
like those the embedded model (models/tiny-arith) was trained on, the right sum or difference as
the preferred answer and a near miss as the dispreferred one, each file in the row format of the
Axolotl dataset type its example uses. Deterministic (seeded); standard library only.

    python3 tools/tiny_model/make_pref_examples.py
"""
import json
import os
import random

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "examples", "data")
ROWS = 96


def problems(seed):
    """(question, right answer, wrong answer) triples."""
    rng = random.Random(seed)
    for _ in range(ROWS):
        a, b = rng.randint(0, 60), rng.randint(0, 40)
        op = rng.choice("+-")
        if op == "-" and b > a:
            a, b = b, a
        right = a + b if op == "+" else a - b
        wrong = right + rng.choice([-10, -2, -1, 1, 2, 10])
        if wrong < 0:
            wrong = right + 1
        yield f"What is {a} {op} {b}?", str(right), str(wrong)


def write(name, rows):
    with open(os.path.join(OUT, name), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def main():
    # dpo.yaml: chatml.intel (question / chosen / rejected strings)
    write("arith_pref_intel.jsonl",
          [{"question": q, "chosen": good, "rejected": bad} for q, good, bad in problems(1)])
    # ipo.yaml: chat_template.default (messages, then the chosen and rejected replies)
    write("arith_pref_messages.jsonl",
          [{"messages": [user(q)], "chosen": assistant(good), "rejected": assistant(bad)}
           for q, good, bad in problems(2)])
    # kto.yaml: chatml.argilla for KTO (instruction / completion / label), half of the rows
    # desirable (the right answer), half undesirable (a near miss)
    write("arith_kto.jsonl",
          [{"instruction": q, "completion": good if i % 2 == 0 else bad, "label": i % 2 == 0}
           for i, (q, good, bad) in enumerate(problems(3))])
    # orpo.yaml: chat_template.argilla (two conversations differing in the last answer)
    write("arith_orpo.jsonl",
          [{"chosen": [user(q), assistant(good)], "rejected": [user(q), assistant(bad)]}
           for q, good, bad in problems(4)])
    # simpo.yaml: user_defined.default (the example config names the fields and formats)
    write("arith_pref_fields.jsonl",
          [{"task": q, "good": good, "bad": bad} for q, good, bad in problems(5)])


if __name__ == "__main__":
    main()
