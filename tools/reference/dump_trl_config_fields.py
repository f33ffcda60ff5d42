"""Writes python/rlhf/_trl_fields.py: the field names and defaults of TRL 1.9's config classes.

The Python package's config classes (python/rlhf/configs.py) take exactly TRL's field names
with TRL's defaults, so that a TRL script runs unchanged. This script reads them from the
installed trl/transformers (tools/reference/.venv) instead of copying them by hand; rerun it
when moving to another TRL version:

    tools/reference/.venv/bin/python tools/reference/dump_trl_config_fields.py

Only names and default values are recorded (no TRL code). Never run by CI.
"""

import dataclasses
import importlib
import os
import sys
import types
import warnings

warnings.simplefilter("ignore")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import trl  # noqa: E402
from transformers import TrainingArguments  # noqa: E402

ROOT = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "..", "..", "python", "rlhf", "_trl_fields.py")

# The experimental packages' __init__ imports their trainers (and vllm clients): the config
# modules are loaded on their own by giving the packages empty stand-ins.
TRL_DIR = os.path.dirname(trl.__file__)
importlib.import_module("trl.experimental")
for pkg in ("orpo", "cpo", "grpo_with_replay_buffer"):
    name = "trl.experimental." + pkg
    stand_in = types.ModuleType(name)
    stand_in.__path__ = [os.path.join(TRL_DIR, "experimental", pkg)]
    sys.modules[name] = stand_in

CONFIGS = [
    ("SFTConfig", "trl.trainer.sft_config"),
    ("DPOConfig", "trl.trainer.dpo_config"),
    ("KTOConfig", "trl.trainer.kto_config"),
    ("ORPOConfig", "trl.experimental.orpo.orpo_config"),
    ("CPOConfig", "trl.experimental.cpo.cpo_config"),
    ("GRPOConfig", "trl.trainer.grpo_config"),
    ("GRPOWithReplayBufferConfig",
     "trl.experimental.grpo_with_replay_buffer.grpo_with_replay_buffer_config"),
]


def default_of(f):
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        raise SystemExit(f"{f.name} has no default")
    if hasattr(value, "value") and type(value).__module__.startswith(("transformers", "trl")):
        value = value.value  # enums: their string
    text = repr(value)
    import ast
    ast.literal_eval(text)  # only plain literals go into the table
    return text


def fields_of(cls):
    return [(f.name, default_of(f)) for f in dataclasses.fields(cls) if f.init]


base = fields_of(TrainingArguments)
base_defaults = dict(base)
lines = [
    '"""TRL 1.9.0 / transformers 5 config fields: (name, default) in declaration order.',
    "",
    "Made by tools/reference/dump_trl_config_fields.py from the installed packages; do not edit.",
    '"""',
    "",
    "# transformers.TrainingArguments, every TRL config's base",
    "TRAINING_ARGUMENTS = [",
]
lines += [f"    ({n!r}, {d}),".replace("'", '"', 2) for n, d in base]
lines += ["]", "", "# per config: the defaults it changes, then its own fields", "CONFIGS = {"]
for cls_name, module in CONFIGS:
    cls = getattr(importlib.import_module(module), cls_name)
    fields = fields_of(cls)
    changed = [(n, d) for n, d in fields if n in base_defaults and base_defaults[n] != d]
    own = [(n, d) for n, d in fields if n not in base_defaults]
    lines.append(f'    "{cls_name}": {{')
    lines.append('        "changed": {')
    lines += [f'            "{n}": {d},' for n, d in changed]
    lines.append("        },")
    lines.append('        "own": [')
    lines += [f'            ("{n}", {d}),' for n, d in own]
    lines.append("        ],")
    lines.append("    },")
lines.append("}")
with open(OUT, "w") as fp:
    fp.write("\n".join(lines) + "\n")
print("wrote", os.path.normpath(OUT))
