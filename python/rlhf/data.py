"""Datasets as rlhf.c reads them: the rows written to a JSONL file, and the `datasets:` entry
(with its `type`) that makes the C side read them the way TRL's trainer reads those columns.

A dataset may be a `datasets.Dataset` (or IterableDataset), a list of dicts, or the path of a
JSON / JSONL file; it is read into rows here in every case, so that the same column rules apply
whatever the source.
"""

import json
import os

import numpy as np


def dataset_rows(dataset, what="train_dataset"):
    """The rows of a dataset as a list of dicts."""
    if dataset is None:
        return None
    if isinstance(dataset, (str, os.PathLike)):
        return _read_json_file(os.fspath(dataset), what)
    if isinstance(dataset, dict) or type(dataset).__name__ in ("DatasetDict", "IterableDatasetDict"):
        raise TypeError(
            f"{what}: got a dataset with several splits ({', '.join(map(str, dataset.keys()))}); "
            f"pass one of them, e.g. {what}=dataset['train']"
        )
    if hasattr(dataset, "to_list"):  # datasets.Dataset
        rows = dataset.to_list()
    else:
        rows = list(dataset)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise TypeError(f"{what}[{i}]: expected a dict of columns, got {type(row).__name__}")
    if not rows:
        raise ValueError(f"{what} is empty")
    return rows


def _read_json_file(path, what):
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what}: {path} is not a file (a JSON or JSONL dataset)")
    with open(path, encoding="utf-8") as fp:
        text = fp.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from None
    else:
        rows = []
        for line_no, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not valid JSON: {e}") from None
    return dataset_rows(rows, what)


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"a value of type {type(value).__name__} cannot be written as JSON")


def write_jsonl(rows, path):
    with open(path, "w", encoding="utf-8") as fp:
        for i, row in enumerate(rows):
            try:
                fp.write(json.dumps(row, ensure_ascii=False, default=_jsonable))
            except TypeError as e:
                raise TypeError(f"dataset row {i}: {e}") from None
            fp.write("\n")


def _is_conversation(value):
    return isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value)


def _columns(rows):
    return set(rows[0].keys())


# ---------------------------------------------------------------- per method
# Each returns (rows to write, extra keys of the datasets: entry).


def sft_entry(rows, args):
    """TRL's SFT formats: language modelling ("text", or dataset_text_field), conversational
    ("messages"), and conversational prompt-completion."""
    cols = _columns(rows)
    text_field = getattr(args, "dataset_text_field", "text") or "text"
    if "messages" in cols:
        # TRL trains on the whole conversation unless assistant_only_loss
        roles = ["assistant"] if args.assistant_only_loss else ["system", "user", "assistant",
                                                                "tool"]
        return rows, {"type": "chat_template", "roles_to_train": roles, "train_on_eos": "turn"}
    if "prompt" in cols and "completion" in cols:
        if not (_is_conversation(rows[0]["prompt"]) and _is_conversation(rows[0]["completion"])):
            raise ValueError(
                "train_dataset: prompt-completion rows of plain text are not supported by "
                "rlhf.c's SFT yet; use a 'text' column, 'messages', or prompt/completion as "
                "lists of messages"
            )
        # completion_only_loss (TRL's default for this format): only the completion trains
        only_completion = args.completion_only_loss in (None, True)
        out = [dict(r, messages=list(r["prompt"]) + list(r["completion"])) for r in rows]
        for r in out:
            del r["prompt"], r["completion"]
        roles = ["assistant"] if only_completion else ["system", "user", "assistant", "tool"]
        return out, {"type": "chat_template", "roles_to_train": roles, "train_on_eos": "turn"}
    if text_field in cols:
        if text_field != "text":
            rows = [{"text": r[text_field]} for r in rows]
        return rows, {"type": "completion"}
    raise ValueError(
        f"train_dataset: columns {sorted(cols)}: SFT needs '{text_field}' (dataset_text_field), "
        "'messages', or 'prompt' and 'completion'"
    )


def preference_entry(rows, method):
    """Paired preference rows (DPO, ORPO, CPO): prompt / chosen / rejected, as strings or as
    conversations (explicit prompt, or implicit: chosen and rejected whole conversations)."""
    cols = _columns(rows)
    if not {"chosen", "rejected"} <= cols:
        raise ValueError(
            f"train_dataset: columns {sorted(cols)}: {method} needs 'chosen' and 'rejected' "
            "(and 'prompt')"
        )
    first = rows[0]
    conversational = _is_conversation(first["chosen"])
    if not conversational:
        if "prompt" not in cols:
            raise ValueError(
                f"train_dataset: {method} rows of plain text need a 'prompt' column"
            )
        return rows, {}
    if method == "orpo":
        if "prompt" in cols:
            rows = [dict(r, chosen=list(r["prompt"]) + list(r["chosen"]),
                         rejected=list(r["prompt"]) + list(r["rejected"])) for r in rows]
            for r in rows:
                del r["prompt"]
        return rows, {"type": "chat_template.argilla"}
    if "prompt" in cols:  # explicit prompt: the prompt conversation, then each answer
        out = [dict(r, messages=r["prompt"]) for r in rows]
        for r in out:
            del r["prompt"]
        return out, {"type": "chat_template.default"}
    return rows, {"type": "chat_template.argilla_chat"}


def kto_entry(rows):
    """Unpaired rows: prompt / completion / label (or paired rows, which TRL unpairs)."""
    cols = _columns(rows)
    if {"prompt", "completion", "label"} <= cols or {"prompt", "chosen", "rejected"} <= cols:
        if _is_conversation(rows[0]["prompt"]):
            raise ValueError(
                "train_dataset: conversational KTO rows are not supported by the Python API yet; "
                "use plain-text prompt/completion/label"
            )
        return [dict(r, label=bool(r["label"])) if "label" in r else r for r in rows], {}
    raise ValueError(
        f"train_dataset: columns {sorted(cols)}: KTO needs 'prompt', 'completion' and 'label'"
    )


def grpo_entry(rows):
    """Prompt-only rows: 'prompt' (text or messages); every other column goes to the rewards."""
    if "prompt" not in _columns(rows):
        raise ValueError(
            f"train_dataset: columns {sorted(_columns(rows))}: GRPO needs a 'prompt' column"
        )
    return rows, {}
