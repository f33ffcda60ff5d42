"""Reward functions for examples/grpo*.yaml and examples/gdpo.yaml, written the way Axolotl users
write them: TRL's keyword arguments (prompts, completions, completion_ids, every dataset column),
one float (or None) per completion. rlhf.c finds this file next to the config (or in the working
directory, as Axolotl does)."""
import re

_NUMBER = re.compile(r"-?\d+")


def _last_number(text):
    found = _NUMBER.findall(text)
    return int(found[-1]) if found else None


def closeness(prompts, completions, answer, **kwargs):
    """1 for the right number, less the further off it is; 0 without a number. Dense enough for
    a tiny model to climb: a near miss scores more than a wild guess."""
    scores = []
    for completion, target in zip(completions, answer):
        guess = _last_number(completion)
        scores.append(0.0 if guess is None else 1.0 / (1.0 + abs(guess - int(target)) / 4.0))
    return scores


def short_answer(completions, **kwargs):
    """The answer alone: 1 when the completion is just a number, else 0."""
    return [1.0 if re.fullmatch(r"\s*-?\d+\s*", c) else 0.0 for c in completions]


def arithmetic_transform(cfg, *args, **kwargs):
    """A dataset transform (type: rewards.arithmetic_transform): {question, chosen} rows of
    examples/data/arith_pref_intel.jsonl become GRPO prompts in the model's Alpaca format plus
    the answer column the rewards read."""
    preset = ("Below is an instruction that describes a task. Write a response that appropriately "
              "completes the request.\n\n### Instruction:\n{}\n\n### Response:\n")

    def transform_fn(example, tokenizer=None):
        return {"prompt": preset.format(example["question"]), "answer": example["chosen"]}

    return transform_fn, {"remove_columns": ["question", "chosen", "rejected"]}
