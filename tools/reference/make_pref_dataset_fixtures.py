#!/usr/bin/env python3
"""Fixtures for the preference dataset types (tests/test_pref_dataset.c), from Axolotl 0.19.0's own
prompt strategies and TRL 1.9.0's own tokenisation code.

    tools/reference/.venv/bin/python tools/reference/make_pref_dataset_fixtures.py

(The reference virtualenv holds axolotl 0.19.0, trl 1.9.0, transformers 5.23, datasets.) Nothing
is downloaded. Inputs are the hand-written JSONL files in tests/fixtures/pref_datasets/inputs/.

format_cases.json -- for every dataset type: the strings Axolotl's strategy gives for each row.
  Each file is loaded with `datasets` (as Axolotl loads a local JSON file) and mapped with the
  transform that axolotl.prompt_strategies.{dpo,kto,orpo}.load returns for the type name, with
  the tokenizer bound and remove_columns applied as axolotl.utils.data.rl._map_dataset does.
  Cases marked "deviation" are rows where upstream is broken (it crashes or returns garbage)
  and rlhf.c does what the spec (axolotl-config.md §15) decides instead; for those the case
  records both upstream's output ("upstream") and the intended output ("expected"), computed
  here by the rule the spec states.

tokenize_cases.json -- whole loads (type, excess_length_strategy, sequence_len, max_prompt_len,
  rl) and the token ids they give: Axolotl's transform, then Axolotl's own length handling
  (axolotl.utils.data.rl._drop_long_sequences / _truncate_long_sequences_rl /
  _raise_on_long_sequences), then TRL's own tokenisation: DPOTrainer._prepare_dataset (dpo,
  ipo), KTOTrainer._prepare_dataset (kto), ORPOTrainer / CPOTrainer.tokenize_row (orpo, simpo),
  each called on a stand-in `self` that carries only the attributes the routine reads.
  On top of TRL's output this script applies, visibly, the decisions rlhf.c documents where it
  departs from the pinned versions:
    * BOS de-duplication (DPO/KTO): Axolotl's own remove_double_bos_token, wired in as Axolotl's
      DPO trainer means to (its _tokenize override is never called by TRL 1.9);
    * max_prompt_len: the prompt keeps its last max_prompt_len tokens (a leading BOS stays in
      front); the length rule counts the prompt at that length (upstream ignores the key);
    * ORPO/SimPO response truncation to max_length - len(prompt) instead of TRL's
      max_length - len(longest response); a row whose prompt alone fills max_length is dropped;
    * KTO with a paired dataset: rows are unpaired (TRL's unpair_preference_dataset) before the
      length rule; Axolotl would stop there with "Prompt and completion keys are required".

spec_examples.json -- the worked examples written in axolotl-config.md §4, checked here against
  upstream (the script fails if they disagree) and by the C test against rlhf.c.
"""
import copy
import functools
import inspect
import json
import os
import shutil
import sys
import tempfile
import types

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(REPO, "tests", "fixtures", "pref_datasets")
INPUTS = os.path.join(FIX, "inputs")
TOKENIZERS = os.path.join(REPO, "tests", "fixtures", "tokenizers")

os.environ.setdefault("HF_DATASETS_CACHE", tempfile.mkdtemp(prefix="pref_ds_cache_"))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import axolotl  # noqa: E402
import datasets  # noqa: E402
import transformers  # noqa: E402
import trl  # noqa: E402
from axolotl.prompt_strategies.dpo import load as load_dpo  # noqa: E402
from axolotl.prompt_strategies.kto import load as load_kto  # noqa: E402
from axolotl.prompt_strategies.orpo import load as load_orpo  # noqa: E402
from axolotl.utils.dict import DictDefault  # noqa: E402
from axolotl.utils.schemas.enums import RLType  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from trl.data_utils import unpair_preference_dataset  # noqa: E402
from trl.experimental.cpo import CPOTrainer  # noqa: E402
from trl.experimental.orpo import ORPOTrainer  # noqa: E402
from trl.trainer import dpo_trainer as trl_dpo  # noqa: E402
from trl.trainer import kto_trainer as trl_kto  # noqa: E402



def axolotl_functions(module_path, names, namespace):
    """Axolotl's own functions `names` from axolotl/<module_path>, without importing that module:
    axolotl.utils.data.* pulls in telemetry and HTTP packages that the reference virtualenv (axolotl
    installed with --no-deps) does not have. The function bodies are executed as they are."""
    import ast
    path = os.path.join(os.path.dirname(axolotl.__file__), module_path)
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    missing = set(names) - {n.name for n in body}
    if missing:
        raise SystemExit(f"{path}: no {sorted(missing)}")
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), namespace)
    return [namespace[n] for n in names]


_rl_ns = {"Any": object, "RLType": RLType}
drop_long_sequences, truncate_long_sequences_rl, raise_on_long_sequences = axolotl_functions(
    "utils/data/rl.py", ["_drop_long_sequences", "_truncate_long_sequences_rl", "_raise_on_long_sequences"],
    _rl_ns)
(remove_double_bos_token,) = axolotl_functions("utils/data/utils.py", ["remove_double_bos_token"], {})

datasets.disable_progress_bars()
datasets.logging.set_verbosity_error()

# A Zephyr-style template for the tokenizer_default case: its responses end in "</s>\n", so the
# rstrip after the cut matters.
ZEPHYR_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
LLAMA2_SP = os.path.join(TOKENIZERS, "llama2_sp_legacy")
# Tokenizer directories committed with tokenizer_config.json only (all a chat template needs);
# for transformers, llama2_sp_legacy's tokenizer.json is put beside a copy.
ZEPHYR_DIR = os.path.join(FIX, "tokenizer_zephyr")  # its own chat_template (tokenizer_default)
GEMMA_DIR = os.path.join(FIX, "tokenizer_gemma")  # bos_token <bos>, as the spec's Gemma example has
CONFIG_ONLY = {ZEPHYR_DIR: {"chat_template": ZEPHYR_TEMPLATE},
               GEMMA_DIR: {"bos_token": "<bos>", "eos_token": "<eos>"}}


def rel(path):
    return os.path.relpath(path, REPO)


@functools.lru_cache(maxsize=None)
def tokenizer(path):
    if os.path.abspath(path) in CONFIG_ONLY:
        tmp = tempfile.mkdtemp(prefix="pref_tok_")
        shutil.copy(os.path.join(LLAMA2_SP, "tokenizer.json"), tmp)
        shutil.copy(os.path.join(path, "tokenizer_config.json"), tmp)
        path = tmp
    return AutoTokenizer.from_pretrained(path)


def write_config_only_tokenizers():
    with open(os.path.join(LLAMA2_SP, "tokenizer_config.json")) as f:
        base = json.load(f)
    for path, changes in CONFIG_ONLY.items():
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
            json.dump(dict(base, **changes), f, indent=2, ensure_ascii=False)
            f.write("\n")


def load_rows(path):
    """A local JSON file as Axolotl reads it (datasets' json builder)."""
    return datasets.load_dataset("json", data_files=path, split="train")


LOADERS = {"dpo": load_dpo, "ipo": load_dpo, "simpo": load_dpo, "kto": load_kto, "orpo": load_orpo}


def transform(rows, rl, type_name, ds_entry, top, tok):
    """axolotl.utils.data.rl._load_split's per-dataset transform, for one dataset."""
    cfg = DictDefault(dict(top, rl=rl, datasets=[ds_entry]))
    fn = LOADERS[rl](type_name, cfg, dataset_idx=0)
    if fn is None:
        raise RuntimeError(f"axolotl has no {type_name} for rl {rl}")
    map_kwargs = {}
    if isinstance(fn, tuple):
        fn, map_kwargs = fn
    if "remove_columns" in map_kwargs:
        cols = rows.column_names
        rc = map_kwargs["remove_columns"]
        map_kwargs["remove_columns"] = list(cols) if rc == "__all__" else [c for c in rc if c in cols]
    if "tokenizer" in inspect.signature(fn).parameters:
        fn = functools.partial(fn, tokenizer=tok)
    return rows.map(fn, **map_kwargs)


def strings_of(ds, rl):
    keys = ("prompt", "completion", "label") if rl == "kto" else ("prompt", "chosen", "rejected")
    return [{k: r[k] for k in keys} for r in ds]


# --------------------------------------------------------------------------------- format cases

QWEN = os.path.join(TOKENIZERS, "qwen2_bytelevel")
LLAMA3 = os.path.join(TOKENIZERS, "llama3_bytelevel")

# (name, rl, type (str or mapping), input file, extra dataset keys, top-level keys, tokenizer)
FORMAT_CASES = []
for family in ("chatml", "llama3"):
    for t, inp in (("default", "dpo_default"), ("default", "dpo_default_input"),
                   ("default", "dpo_default_question"), ("default", "dpo_default_instruction"),
                   ("argilla", "dpo_default_instruction"), ("argilla_chat", "dpo_argilla_chat"),
                   ("icr", "dpo_icr"), ("intel", "dpo_intel"), ("prompt_pairs", "dpo_prompt_pairs"),
                   ("ultra", "dpo_ultra")):
        FORMAT_CASES.append((f"dpo_{family}_{t}_{inp}", "dpo", f"{family}.{t}", inp, {}, {}, QWEN))
    for t in ("argilla", "argilla_chat", "intel", "prompt_pairs", "ultra"):
        FORMAT_CASES.append((f"kto_{family}_{t}", "kto", f"{family}.{t}", f"kto_{t}", {}, {}, QWEN))
# the bare family name means .default
FORMAT_CASES.append(("dpo_chatml_bare", "dpo", "chatml", "dpo_default", {}, {}, QWEN))
FORMAT_CASES.append(("dpo_llama3_bare", "dpo", "llama3", "dpo_default", {}, {}, QWEN))
FORMAT_CASES.append(("dpo_zephyr_nectar", "dpo", "zephyr.nectar", "dpo_nectar", {}, {}, QWEN))
# Gemma's template refuses a system turn: it gets the inputs without one.
FORMAT_CASES += [
    ("dpo_chat_template_gemma", "dpo", "chat_template.default", "dpo_chat_template_no_system", {},
     {"chat_template": "gemma"}, GEMMA_DIR),
    ("dpo_chat_template_gemma_strings", "dpo", "chat_template", "dpo_chat_template_strings", {},
     {"chat_template": "gemma"}, GEMMA_DIR),
]
for tpl, tokdir in (("chatml", QWEN), ("llama3", LLAMA3)):
    FORMAT_CASES += [
        (f"dpo_chat_template_{tpl}", "dpo", "chat_template.default", "dpo_chat_template", {},
         {"chat_template": tpl}, tokdir),
        (f"dpo_chat_template_{tpl}_strings", "dpo", "chat_template", "dpo_chat_template_strings", {},
         {"chat_template": tpl}, tokdir),
        (f"dpo_chat_template_{tpl}_lists", "dpo", "chat_template", "dpo_chat_template_lists", {},
         {"chat_template": tpl}, tokdir),
        (f"dpo_chat_template_argilla_chat_{tpl}", "dpo", "chat_template.argilla_chat",
         "dpo_chat_template_argilla_chat", {}, {"chat_template": tpl}, tokdir),
        (f"orpo_chat_template_argilla_{tpl}", "orpo", "chat_template.argilla", "orpo_argilla", {},
         {"chat_template": tpl}, tokdir),
    ]
SHAREGPT = {"field_messages": "conversations", "field_chosen": "better", "field_rejected": "worse",
            "message_property_mappings": {"role": "from", "content": "value"},
            "roles": {"user": ["human"], "assistant": ["gpt"], "system": ["system"]}}
LEGACY_FIELDS = dict(SHAREGPT)
del LEGACY_FIELDS["message_property_mappings"]
LEGACY_FIELDS.update(message_field_role="from", message_field_content="value")
FORMAT_CASES += [
    ("dpo_chat_template_sharegpt", "dpo", "chat_template.default", "dpo_chat_template_sharegpt",
     SHAREGPT, {"chat_template": "chatml"}, QWEN),
    ("dpo_chat_template_legacy_fields", "dpo", "chat_template.default",
     "dpo_chat_template_sharegpt", LEGACY_FIELDS, {"chat_template": "llama3"}, LLAMA3),
    # the dataset's own chat_template wins over the top-level one
    ("dpo_chat_template_dataset_template", "dpo", "chat_template.default", "dpo_chat_template",
     {"chat_template": "llama3"}, {"chat_template": "chatml"}, LLAMA3),
    ("dpo_chat_template_tokenizer_default", "dpo", "chat_template.default", "dpo_chat_template", {},
     {}, ZEPHYR_DIR),
    ("dpo_chat_template_jinja", "dpo", "chat_template.default", "dpo_chat_template", {},
     {"chat_template": "jinja", "chat_template_jinja": ZEPHYR_TEMPLATE}, LLAMA2_SP),
    ("orpo_chat_template_argilla_tokenizer_default", "orpo", "chat_template.argilla", "orpo_argilla",
     {}, {}, ZEPHYR_DIR),
    ("orpo_chat_template_argilla_prompt_key", "orpo", "chat_template.argilla", "orpo_argilla_prompt",
     {}, {"chat_template": "chatml"}, QWEN),
    ("dpo_user_defined", "dpo", {"field_system": "sys", "field_prompt": "question", "field_chosen": "good",
                                 "field_rejected": "bad",
                                 "prompt_format": "[SYS]{system}[/SYS] {{literal}} Q: {prompt}\nA:",
                                 "chosen_format": " {chosen} }}end", "rejected_format": " {rejected}"},
     "dpo_user_defined", {}, {}, QWEN),
    ("dpo_user_defined_defaults", "dpo", {"prompt_format": None, "chosen_format": ""},
     "dpo_user_defined_plain", {}, {}, QWEN),
    ("dpo_user_defined_no_system", "dpo", {"prompt_format": "<{prompt}>"}, "dpo_user_defined_plain",
     {}, {}, QWEN),
    ("kto_user_defined", "kto", {"field_system": "sys", "field_prompt": "q", "field_completion": "a",
                                 "field_label": "ok", "prompt_format": "{system}\n\nQ: {prompt}\nA:",
                                 "completion_format": " {completion}"},
     "kto_user_defined", {}, {}, QWEN),
    ("kto_user_defined_no_system_placeholder", "kto",
     {"field_prompt": "q", "field_completion": "a", "field_label": "ok"}, "kto_user_defined", {}, {}, QWEN),
]

# Rows where upstream is broken and rlhf.c follows the spec's decision (axolotl-config.md §15).
DEVIATION_CASES = [
    # §4.3 / §15.6: the response is cut where its content starts after the rendered dummy turn,
    # not at the first occurrence anywhere ("user" is in the header, "a" in "[[dummy_message]]",
    # and llama3's template trims "  padded  " so upstream's find() fails and keeps one char).
    ("dpo_chat_template_pitfalls_chatml", "dpo", "chat_template.default", "dpo_chat_template_pitfalls",
     {}, {"chat_template": "chatml"}, QWEN),
    ("dpo_chat_template_pitfalls_llama3", "dpo", "chat_template.default", "dpo_chat_template_pitfalls",
     {}, {"chat_template": "llama3"}, LLAMA3),
    # §4.6 / §15.7: KTO user_defined with {system} and an empty system: upstream raises KeyError;
    # rlhf.c substitutes "" as the DPO variant does.
    ("kto_user_defined_empty_system", "kto",
     {"field_system": "sys", "field_prompt": "q", "field_completion": "a", "field_label": "ok",
      "prompt_format": "{system}\n\nQ: {prompt}\nA:"}, "kto_user_defined_empty_system", {}, {}, QWEN),
]


def entry_for(type_, extra, input_name):
    e = {"path": rel(os.path.join(INPUTS, input_name + ".jsonl")), "type": type_}
    e.update(extra)
    return e


def strategy_name(type_, rl):
    if isinstance(type_, dict):
        return "user_defined.default"
    if rl != "kto" and type_ in ("chatml.argilla", "llama3.argilla"):
        return type_.split(".")[0] + ".default"  # rlhf.c's alias (removed upstream, §4.2)
    return type_


def run_format_case(name, rl, type_, inp, extra, top, tokdir):
    entry = entry_for(type_, extra, inp)
    rows = load_rows(os.path.join(INPUTS, inp + ".jsonl"))
    tok = tokenizer(tokdir)
    out = transform(rows, rl, strategy_name(type_, rl), entry, top, tok)
    return entry, strings_of(out, rl)


def intended_chat_template_response(tok, tpl, msg):
    """The response cut the spec decides on (§4.3 C impl): the text after the rendered dummy
    turn + generation prompt when the full rendering starts with it; searched from there."""
    dummy = {"role": "user", "content": "[[dummy_message]]"}
    full = tok.apply_chat_template([dummy, msg], add_generation_prompt=False, chat_template=tpl,
                                   tokenize=False)
    prefix = tok.apply_chat_template([dummy], add_generation_prompt=True, chat_template=tpl,
                                     tokenize=False)
    if full.startswith(prefix):
        at = full.find(msg["content"], len(prefix))
        return full[at if at >= 0 else len(prefix):].rstrip()
    at = full.find(msg["content"])
    return full[at:].rstrip()


def run_deviation_case(name, rl, type_, inp, extra, top, tokdir):
    entry = entry_for(type_, extra, inp)
    rows = [json.loads(line) for line in open(os.path.join(INPUTS, inp + ".jsonl"), encoding="utf-8")]
    tok = tokenizer(tokdir)
    if name.startswith("dpo_chat_template_pitfalls"):
        upstream = strings_of(transform(load_rows(os.path.join(INPUTS, inp + ".jsonl")), rl,
                                        type_, entry, top, tok), rl)
        from axolotl.utils.chat_templates import get_chat_template
        tpl = get_chat_template(top["chat_template"], tokenizer=tok)
        expected = []
        for r in rows:
            prompt = tok.apply_chat_template(r["messages"], add_generation_prompt=True, chat_template=tpl,
                                             tokenize=False)
            expected.append({"prompt": prompt,
                             "chosen": intended_chat_template_response(tok, tpl, r["chosen"]),
                             "rejected": intended_chat_template_response(tok, tpl, r["rejected"])})
        return entry, expected, upstream
    if name == "kto_user_defined_empty_system":
        try:
            transform(load_rows(os.path.join(INPUTS, inp + ".jsonl")), rl, "user_defined.default", entry, top,
                      tok)
            raise RuntimeError("upstream no longer fails here; revisit the deviation")
        except KeyError as exc:
            upstream = f"KeyError: {exc}"
        fmt = type_["prompt_format"]
        expected = [{"prompt": fmt.format(system=r[type_["field_system"]] or "", prompt=r[type_["field_prompt"]]),
                     "completion": r[type_["field_completion"]], "label": r[type_["field_label"]]} for r in rows]
        return entry, expected, upstream
    raise AssertionError(name)


# The worked examples of axolotl-config.md §4 (strings copied from the spec).
SPEC_EXAMPLES = [
    ("dpo_chatml_intel_dpo_intel", 0, {
        "prompt": "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
        "chosen": "4<|im_end|>", "rejected": "5<|im_end|>"}),
    ("dpo_chatml_intel_dpo_intel", 1, {
        "prompt": "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"}),
    ("dpo_llama3_prompt_pairs_dpo_prompt_pairs", 0, {
        "prompt": "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "chosen": "Hello!<|eot_id|>", "rejected": "Go away<|eot_id|>"}),
    ("dpo_chat_template_llama3", 0, {
        "prompt": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nhello<|eot_id|><|start_header_id|>user<|end_header_id|>\n\ngoodbye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
        "chosen": "goodbye<|eot_id|>", "rejected": "party on<|eot_id|>"}),
    ("dpo_chat_template_chatml", 0, {
        "prompt": "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\ngoodbye<|im_end|>\n<|im_start|>assistant\n",
        "chosen": "goodbye<|im_end|>"}),
    ("dpo_chat_template_gemma", 0, {
        "prompt": "<bos><start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\nhello<end_of_turn>\n<start_of_turn>user\ngoodbye<end_of_turn>\n<start_of_turn>model\n",
        "chosen": "goodbye<end_of_turn>"}),
    ("dpo_chat_template_argilla_chat_llama3", 0, {
        "prompt": "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"}),
    ("orpo_chat_template_argilla_chatml", 0, {
        "prompt": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n",
        "chosen": "C<|im_end|>\n"}),
    ("orpo_chat_template_argilla_llama3", 0, {"chosen": "C<|eot_id|>"}),
]


def make_format_fixtures():
    cases = []
    by_name = {}
    for c in FORMAT_CASES:
        name, rl, type_, inp, extra, top, tokdir = c
        entry, rows = run_format_case(*c)
        case = {"name": name, "rl": rl, "dataset": entry, "config": top, "tokenizer": rel(tokdir),
                "expected": rows}
        cases.append(case)
        by_name[name] = case
    for c in DEVIATION_CASES:
        name, rl, type_, inp, extra, top, tokdir = c
        entry, rows, upstream = run_deviation_case(*c)
        cases.append({"name": name, "rl": rl, "dataset": entry, "config": top, "tokenizer": rel(tokdir),
                      "expected": rows, "deviation": True, "upstream": upstream})
    for name, idx, want in SPEC_EXAMPLES:
        got = by_name[name]["expected"][idx]
        for k, v in want.items():
            if got[k] != v:
                raise SystemExit(f"spec example {name}[{idx}].{k}: upstream gives {got[k]!r}, spec says {v!r}")
    with open(os.path.join(FIX, "spec_examples.json"), "w", encoding="utf-8") as f:
        json.dump([{"case": n, "row": i, "expected": w} for n, i, w in SPEC_EXAMPLES], f, ensure_ascii=False,
                  indent=1)
        f.write("\n")
    with open(os.path.join(FIX, "format_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"axolotl_version": axolotl.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"format_cases.json: {len(cases)} cases, {sum(len(c['expected']) for c in cases)} rows")


# ------------------------------------------------------------------------------ tokenize cases

LLAMA3_PROMPT_PAIRS = "dpo_prompt_pairs"


class Case:
    def __init__(self, name, rl, tokdir, datasets_, sequence_len=512, strategy=None, max_prompt_len=None,
                 top=None):
        self.name, self.rl, self.tokdir = name, rl, tokdir
        self.datasets = datasets_  # [(type or None, input name, extra dataset keys)]
        self.sequence_len, self.strategy, self.max_prompt_len = sequence_len, strategy, max_prompt_len
        self.top = top or {}


def prompt_fit_len(tokdir, inp, field="prompt"):
    """A sequence_len that makes a typeless file's longest prompt + its responses just fit."""
    tok = tokenizer(tokdir)
    rows = [json.loads(line) for line in open(os.path.join(INPUTS, inp + ".jsonl"), encoding="utf-8")]
    n = lambda t: len(tok(t, add_special_tokens=False)["input_ids"])  # noqa: E731
    return max(n(r[field]) + max(n(r["chosen"]), n(r["rejected"])) for r in rows)


TOKENIZE_CASES = [
    Case("dpo_chatml_qwen", "dpo", QWEN, [("chatml.intel", "dpo_intel", {}), ("chatml", "dpo_default", {}),
                                          (None, "tok_dpo_rows", {})]),
    Case("ipo_chat_template_llama3_double_bos", "ipo", LLAMA3,
         [("chat_template.default", "dpo_chat_template", {}), ("chat_template.argilla_chat",
                                                               "dpo_chat_template_argilla_chat", {})],
         top={"chat_template": "llama3"}),
    Case("dpo_sp_eos_appended", "dpo", LLAMA2_SP, [("chatml.prompt_pairs", "dpo_prompt_pairs", {}),
                                                   (None, "tok_dpo_rows", {}),
                                                   ("zephyr.nectar", "dpo_nectar", {})]),
    Case("dpo_user_defined_llama3", "dpo", LLAMA3,
         [({"field_system": "sys", "field_prompt": "question", "field_chosen": "good", "field_rejected": "bad",
            "prompt_format": "[SYS]{system}[/SYS] Q: {prompt}\nA:"}, "dpo_user_defined", {}),
          ("llama3.ultra", "dpo_ultra", {})]),
    Case("dpo_drop_long", "dpo", LLAMA2_SP, [(None, "tok_dpo_rows", {})], sequence_len=48),
    Case("dpo_truncate", "dpo", QWEN, [(None, "tok_dpo_rows", {})], sequence_len=30, strategy="truncate"),
    Case("dpo_truncate_sp", "dpo", LLAMA2_SP, [(None, "tok_dpo_rows", {})], sequence_len=40,
         strategy="truncate"),
    Case("dpo_raise", "dpo", LLAMA2_SP, [(None, "tok_dpo_rows", {})], sequence_len=24, strategy="raise"),
    Case("dpo_prompt_fills_max_length", "dpo", LLAMA2_SP, [(None, "tok_prompt_fills", {})],
         sequence_len=-1),  # -1: prompt_fit_len (BOS then makes the longest prompt fill it)
    Case("dpo_max_prompt_len", "dpo", LLAMA3, [("llama3.intel", "dpo_intel", {}), (None, "tok_dpo_rows", {})],
         max_prompt_len=8, sequence_len=40),
    Case("kto_chatml_qwen", "kto", QWEN, [("chatml.argilla_chat", "kto_argilla_chat", {}),
                                          ("chatml.intel", "kto_intel", {}), (None, "tok_kto_rows", {})]),
    Case("kto_llama3_user_defined", "kto", LLAMA3,
         [({"field_system": "sys", "field_prompt": "q", "field_completion": "a", "field_label": "ok",
            "prompt_format": "{system}\n\nQ: {prompt}\nA:"}, "kto_user_defined", {}),
          ("llama3.argilla", "kto_argilla", {}), ("llama3.ultra", "kto_ultra", {})]),
    Case("kto_paired_sp", "kto", LLAMA2_SP, [(None, "tok_dpo_rows", {}), (None, "tok_kto_rows", {})]),
    # 1001 pairs: TRL unpairs in batches of 1000 (chosen rows, then rejected rows, per batch)
    Case("kto_unpair_batches", "kto", QWEN, [(None, "tok_kto_1001_pairs", {})]),
    Case("kto_truncate", "kto", LLAMA2_SP, [(None, "tok_kto_rows", {}), (None, "tok_dpo_rows", {})],
         sequence_len=22, strategy="truncate"),
    Case("orpo_chatml_qwen", "orpo", QWEN, [("chat_template.argilla", "orpo_argilla", {}),
                                            ("chat_template.argilla", "orpo_argilla_prompt", {}),
                                            (None, "tok_orpo_merge", {})], top={"chat_template": "chatml"}),
    Case("orpo_sp_bos_eos", "orpo", LLAMA2_SP, [("chat_template.argilla", "orpo_argilla", {}),
                                                (None, "tok_dpo_rows", {})], top={"chat_template": "chatml"}),
    Case("orpo_sp_boundary_error", "orpo", LLAMA2_SP, [(None, "tok_orpo_merge", {})]),
    Case("orpo_response_cut", "orpo", LLAMA2_SP, [(None, "tok_dpo_rows", {})], sequence_len=-1),
    Case("simpo_llama3", "simpo", LLAMA3, [("llama3.prompt_pairs", "dpo_prompt_pairs", {}),
                                           ("llama3.argilla", "dpo_default_instruction", {}),
                                           (None, "tok_orpo_merge", {})]),
    Case("simpo_max_prompt_len_truncate", "simpo", LLAMA3, [(None, "tok_dpo_rows", {})], sequence_len=30,
         strategy="truncate", max_prompt_len=10),
]


def keep_prompt_end(ids, max_prompt_len, bos_id):
    """rlhf.c's max_prompt_len: the last tokens, a leading BOS staying first."""
    if not max_prompt_len or len(ids) <= max_prompt_len:
        return list(ids)
    bos = 1 if bos_id is not None and ids[0] == bos_id and max_prompt_len > 1 else 0
    return ids[:bos] + ids[len(ids) - (max_prompt_len - bos):]


def length_rule(ds, case, tok, index, warnings):
    """Axolotl's excess_length_strategy on one dataset (its own functions; with max_prompt_len,
    the same rule with the prompt counted at most max_prompt_len tokens)."""
    rl = RLType(case.rl)
    strategy = case.strategy or "drop"
    L = case.sequence_len
    if case.max_prompt_len:
        def n(t):
            return len(tok(t, add_special_tokens=False)["input_ids"])

        resp_keys = ["completion"] if case.rl == "kto" else ["chosen", "rejected"]

        def lp(s):
            return min(n(s["prompt"]), case.max_prompt_len)

        def drop_fn(s):
            return all(lp(s) + n(s[k]) <= L for k in resp_keys)

        def truncate_fn(s):
            if drop_fn(s):
                return s
            room = L - lp(s)
            if room <= 0:
                return s
            s = dict(s)
            for k in resp_keys:
                ids = tok(s[k], add_special_tokens=False)["input_ids"]
                if len(ids) > room:
                    s[k] = tok.decode(ids[:room], skip_special_tokens=False)
            return s
    else:
        def drop_fn(s):
            return drop_long_sequences(s, rl=rl, tokenizer=tok, sequence_len=L)

        def truncate_fn(s):
            return truncate_long_sequences_rl(s, rl=rl, tokenizer=tok, sequence_len=L)
    prior = len(ds)
    if strategy == "raise":
        for s in ds:
            if case.max_prompt_len:
                raise AssertionError("not used")
            raise_on_long_sequences(s, rl=rl, tokenizer=tok, sequence_len=L)
        return ds
    if strategy == "truncate":
        ds = ds.map(truncate_fn).filter(drop_fn)
        if prior - len(ds):
            warnings.append(f"Dropped {prior - len(ds)} samples from dataset index {index} that could not "
                            f"be truncated to fit sequence_len (prompt alone exceeds limit)")
        return ds
    ds = ds.filter(drop_fn)
    if prior - len(ds):
        warnings.append(f"Dropped {prior - len(ds)} long samples from dataset index {index}")
    return ds


def deduplicating_tokenize(original, bos_token_id):
    """TRL's module-level _tokenize followed by Axolotl's remove_double_bos_token, which is what
    Axolotl's DPO trainer override means to do (TRL 1.9 calls the module function, not it)."""
    def tokenize(processing_class, input, **kwargs):
        result = original(processing_class, input, **kwargs)
        if bos_token_id is not None:
            result = remove_double_bos_token(result, bos_token_id)
        return result
    return tokenize


def trl_dpo_kto(ds, case, tok):
    module = trl_kto if case.rl == "kto" else trl_dpo
    trainer = module.KTOTrainer if case.rl == "kto" else module.DPOTrainer
    stand_in = types.SimpleNamespace(_tokenizer=tok, calculate_KL=False)
    args = types.SimpleNamespace(dataset_num_proc=None, max_length=None, truncation_mode="keep_start",
                                 per_device_train_batch_size=8)
    original = module._tokenize
    module._tokenize = deduplicating_tokenize(original, tok.bos_token_id)
    try:
        out = trainer._prepare_dataset(stand_in, ds, tok, args, "eval")
    finally:
        module._tokenize = original
    kept, dropped = [], 0
    for r in out:
        prompt = keep_prompt_end(r["prompt_ids"], case.max_prompt_len, tok.bos_token_id)
        if len(prompt) >= case.sequence_len:  # TRL's filter (keep_start), on the kept prompt
            dropped += 1
            continue
        if case.rl == "kto":
            kept.append({"prompt": prompt, "completion": r["completion_ids"], "label": bool(r["label"])})
        else:
            kept.append({"prompt": prompt, "chosen": r["chosen_ids"], "rejected": r["rejected_ids"]})
    return kept, dropped


class ORPOStandIn:
    build_tokenized_answer = ORPOTrainer.build_tokenized_answer
    tokenize_row = ORPOTrainer.tokenize_row


class CPOStandIn:
    build_tokenized_answer = CPOTrainer.build_tokenized_answer
    tokenize_row = CPOTrainer.tokenize_row


def trl_cpo(ds, case, tok):
    stand_in = (ORPOStandIn if case.rl == "orpo" else CPOStandIn)()
    stand_in.is_encoder_decoder = False
    stand_in.processing_class = tok
    stand_in.max_length = 10 ** 9  # TRL's own cut is replaced by rlhf.c's below
    kept, dropped = [], 0
    for r in ds:
        b = stand_in.tokenize_row({"prompt": r["prompt"], "chosen": r["chosen"], "rejected": r["rejected"]})
        parts, keep = {}, True
        for side in ("chosen", "rejected"):
            n_prompt = sum(1 for x in b[f"{side}_labels"] if x == -100)
            prompt = keep_prompt_end(b[f"{side}_input_ids"][:n_prompt], case.max_prompt_len, tok.bos_token_id)
            answer = b[f"{side}_input_ids"][n_prompt:]
            room = case.sequence_len - len(prompt)
            if room <= 0:
                keep = False
            parts[side] = (prompt, answer[:max(room, 0)])
        if not keep:
            dropped += 1
            continue
        pair = {"prompt": parts["chosen"][0], "chosen": parts["chosen"][1], "rejected": parts["rejected"][1]}
        if parts["rejected"][0] != parts["chosen"][0]:
            pair["rejected_prompt"] = parts["rejected"][0]
        kept.append(pair)
    return kept, dropped


def run_tokenize_case(case):
    tok = tokenizer(case.tokdir)
    if case.sequence_len == -1:
        case.sequence_len = prompt_fit_len(case.tokdir, case.datasets[0][1])
    entries, warnings, items, dropped = [], [], [], 0
    for i, (type_, inp, extra) in enumerate(case.datasets):
        entry = {"path": rel(os.path.join(INPUTS, inp + ".jsonl"))}
        if type_ is not None:
            entry["type"] = type_
        entry.update(extra)
        entries.append(entry)
        ds = load_rows(os.path.join(INPUTS, inp + ".jsonl"))
        if type_ is not None:
            ds = transform(ds, case.rl, strategy_name(type_, case.rl), entry, case.top, tok)
        if case.rl == "kto" and "chosen" in ds.column_names and "rejected" in ds.column_names:
            ds = unpair_preference_dataset(ds)
        prior = len(ds)
        ds = length_rule(ds, case, tok, i, warnings)
        dropped += prior - len(ds)
        kept, n = (trl_cpo if case.rl in ("orpo", "simpo") else trl_dpo_kto)(ds, case, tok) if len(ds) else ([], 0)
        dropped += n
        items += kept
    out = {"name": case.name, "rl": case.rl, "tokenizer": rel(case.tokdir), "sequence_len": case.sequence_len,
           "excess_length_strategy": case.strategy, "max_prompt_len": case.max_prompt_len, "config": case.top,
           "datasets": entries, "dropped": dropped, "warnings": warnings}
    out["rows" if case.rl == "kto" else "pairs"] = items
    return out


def make_tokenize_fixtures():
    cases = []
    for case in TOKENIZE_CASES:
        try:
            c = run_tokenize_case(case)
        except ValueError as exc:
            c = {"name": case.name, "rl": case.rl, "tokenizer": rel(case.tokdir),
                 "sequence_len": case.sequence_len, "excess_length_strategy": case.strategy,
                 "max_prompt_len": case.max_prompt_len, "config": case.top,
                 "datasets": [dict({"path": rel(os.path.join(INPUTS, inp + ".jsonl"))},
                                   **({"type": t} if t is not None else {}), **extra)
                              for t, inp, extra in case.datasets],
                 "error": str(exc)}
        cases.append(c)
        what = c.get("error") or f"{len(c.get('pairs', c.get('rows', [])))} kept, {c['dropped']} dropped"
        print(f"  {case.name}: {what}")
    with open(os.path.join(FIX, "tokenize_cases.json"), "w", encoding="utf-8") as f:
        json.dump({"axolotl_version": axolotl.__version__, "trl_version": trl.__version__,
                   "transformers_version": transformers.__version__, "cases": cases}, f, ensure_ascii=False)
        f.write("\n")
    print(f"tokenize_cases.json: {len(cases)} cases")


def main():
    write_config_only_tokenizers()
    make_format_fixtures()
    make_tokenize_fixtures()


if __name__ == "__main__":
    main()
