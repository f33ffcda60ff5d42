"""Shared pieces of the Python API tests: the embedded tiny model, small local datasets in the
shapes TRL's docs use, and `as_dataset`, which gives a datasets.Dataset when the `datasets`
package is installed and the list of dicts otherwise (CI has no `datasets`)."""

import os
import random

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_MODEL = os.path.join(REPO, "models", "tiny-arith")


def as_dataset(rows):
    try:
        from datasets import Dataset
    except ImportError:
        return rows
    return Dataset.from_list(rows)


def arithmetic(n, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(1, 50), rng.randint(1, 50)
        out.append((f"What is {a} + {b}?", str(a + b), str(a + b + rng.choice([-2, -1, 1, 2]))))
    return out


@pytest.fixture
def prompt_only():
    """A prompt-only dataset (standard format), like trl-internal-testing/zen's
    standard_prompt_only: a `prompt` column of text."""
    return [{"prompt": q} for q, _, _ in arithmetic(16)]


@pytest.fixture
def preference_rows():
    """Explicit-prompt preference pairs (TRL's standard preference format)."""
    return [{"prompt": q, "chosen": good, "rejected": bad} for q, good, bad in arithmetic(16)]


@pytest.fixture
def unpaired_rows():
    """TRL's unpaired preference format: prompt, completion, label."""
    rows = []
    for i, (q, good, bad) in enumerate(arithmetic(16)):
        rows.append({"prompt": q, "completion": good if i % 2 == 0 else bad, "label": i % 2 == 0})
    return rows


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """Each test runs in its own directory: output_dir="./tmp" stays inside it."""
    monkeypatch.chdir(tmp_path)
