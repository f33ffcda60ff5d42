#!/usr/bin/env python3
"""Writes src/tokenizer/auto_tokenizer_classes.c: the model types (config.json "model_type") for
which transformers' AutoTokenizer does NOT build the LlamaTokenizer a tokenizer_config.json
declares, but loads tokenizer.json as it is (TokenizersBackend) or another class.

Run from the repository root with the reference venv:

    /work/venv-ref/bin/python tools/reference/dump_auto_tokenizer_classes.py

The rule it tabulates is AutoTokenizer.from_pretrained's (transformers/models/auto/
tokenization_auto.py): with a config.json whose model_type is registered to a tokenizer class
other than the declared one, the registered class wins when it is a backend class
(TokenizersBackend, PreTrainedTokenizerFast, PythonBackend, MistralCommonBackend: all read
tokenizer.json as it is without a tekken.json) or when the model type is listed in
MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS; otherwise the declared class is kept.
"""
import os

import transformers
from transformers.models.auto import tokenization_auto as ta

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "src", "tokenizer", "auto_tokenizer_classes.c")
BACKENDS = {"TokenizersBackend", "PreTrainedTokenizerFast", "PythonBackend", "MistralCommonBackend"}
DECLARED = "LlamaTokenizer"


def main():
    names = dict(ta.TOKENIZER_MAPPING_NAMES)
    # mistral-common may or may not be installed: its model types read tokenizer.json as it is
    # either way when no tekken.json is present
    overriding = []
    for model_type, cls in sorted(names.items()):
        if cls is None:
            continue
        cls = cls.removesuffix("Fast")
        if cls == DECLARED:
            continue
        if cls in BACKENDS or model_type in ta.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS:
            overriding.append(model_type)
    lines = [
        "/* Made by tools/reference/dump_auto_tokenizer_classes.py from transformers "
        f"{transformers.__version__}: do not edit.",
        " * The config.json model types for which AutoTokenizer does not build a declared",
        " * LlamaTokenizer (it reads tokenizer.json as it is). Sorted (strcmp order). */",
        '#include "tokenizer/auto_tokenizer.h"',
        "",
        "const char *const auto_tokenizer_llama_overridden[] = {",
    ]
    lines += [f'    "{m}",' for m in sorted(overriding)]
    lines += ["};", "const size_t auto_tokenizer_llama_overridden_count =",
              "    sizeof auto_tokenizer_llama_overridden / sizeof auto_tokenizer_llama_overridden[0];", ""]
    with open(OUT, "w", encoding="utf-8") as fp:
        fp.write("\n".join(lines))
    print(f"{OUT}: {len(overriding)} model types")


if __name__ == "__main__":
    main()
