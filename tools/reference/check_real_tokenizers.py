#!/usr/bin/env python3
"""Compares `rlhf tokenize` with transformers' AutoTokenizer on real published tokenizer folders
(../shared/real-tokenizers: tokenizer.json.gz + tokenizer_config.json; see its PROVENANCE.md).

    /work/venv-ref/bin/python tools/reference/check_real_tokenizers.py build/rlhf \\
        /work/shared/real-tokenizers [--model-type phi3] [FAMILY ...]

For each family folder (default: every one with a tokenizer.json.gz) it copies the folder into a
temporary directory (unpacking tokenizer.json; with --model-type, adding a config.json naming that
model_type, as a model directory has) and checks, on the strings of
tests/fixtures/tokenizers/corpus.jsonl and corpus_auto.jsonl:
  - encode with and without special tokens: ids equal to AutoTokenizer's;
  - decode of AutoTokenizer's ids, with and without skip_special_tokens: equal text;
  - a few conversations through the folder's chat template (apply_chat_template, tokenize=True):
    rlhf's ids of the rendered text equal transformers'.
Prints one line per family and check; exits 1 on any mismatch. Nothing is written to the repo.
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

from transformers import AutoTokenizer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CORPORA = [os.path.join(ROOT, "tests", "fixtures", "tokenizers", n)
           for n in ("corpus.jsonl", "corpus_auto.jsonl")]
CONVERSATIONS = [
    [{"role": "system", "content": "You are a helpful assistant."},
     {"role": "user", "content": "What is 4+4?"},
     {"role": "assistant", "content": " It is 8.\n\nAnything else?"}],
    [{"role": "user", "content": "  spaced   out\n\n日本語 🤗 <|end|> </s> inside"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"},
     {"role": "user", "content": "\n4\n"}],
]


def run_lines(binary, args, lines):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False, encoding="utf-8") as fp:
        fp.write("".join(json.dumps(x) + "\n" for x in lines))
        path = fp.name
    try:
        out = subprocess.run([binary, "tokenize", *args, "--file", path], capture_output=True,
                             text=True, check=True).stdout
    finally:
        os.remove(path)
    return [json.loads(line) for line in out.split("\n") if line]


def check_family(binary, src, model_type):
    tmp = tempfile.mkdtemp()
    try:
        d = os.path.join(tmp, os.path.basename(src))
        shutil.copytree(src, d)
        with gzip.open(os.path.join(src, "tokenizer.json.gz"), "rb") as f_in, \
                open(os.path.join(d, "tokenizer.json"), "wb") as f_out:
            shutil.copyfileobj(f_in, f_out)
        os.remove(os.path.join(d, "tokenizer.json.gz"))
        if model_type:
            with open(os.path.join(d, "config.json"), "w") as fp:
                json.dump({"model_type": model_type}, fp)
        hf = AutoTokenizer.from_pretrained(d)
        texts = []
        for corpus in CORPORA:
            with open(corpus, encoding="utf-8") as fp:
                texts += [json.loads(line)["text"] for line in fp]
        bad = 0
        for special in (True, False):
            got = run_lines(binary, ["--tokenizer", d] + ([] if special else ["--no-special"]),
                            [{"text": t} for t in texts])
            miss = sum(g["ids"] != hf.encode(t, add_special_tokens=special)
                       for g, t in zip(got, texts))
            bad += miss
            print(f"{os.path.basename(src)} ({type(hf).__name__}): encode "
                  f"{'with' if special else 'without'} special tokens: {len(texts) - miss}/"
                  f"{len(texts)} equal")
        ids = [hf.encode(t) for t in texts]
        for skip in (False, True):
            got = run_lines(binary, ["--tokenizer", d, "--decode"] + (["--skip-special"] if skip
                                                                      else []),
                            [{"ids": i} for i in ids])
            miss = sum(g["text"] != hf.decode(i, skip_special_tokens=skip)
                       for g, i in zip(got, ids))
            bad += miss
            print(f"{os.path.basename(src)}: decode{' skip-special' if skip else ''}: "
                  f"{len(ids) - miss}/{len(ids)} equal")
        if hf.chat_template:
            n = miss = 0
            for conv in CONVERSATIONS:
                for gen in (True, False):
                    try:
                        want = hf.apply_chat_template(conv, tokenize=True,
                                                      add_generation_prompt=gen)
                        text = hf.apply_chat_template(conv, tokenize=False,
                                                      add_generation_prompt=gen)
                    except Exception:  # a template that raises on this conversation
                        continue
                    if not isinstance(want, list):
                        want = list(want["input_ids"])
                    got = run_lines(binary, ["--tokenizer", d, "--no-special"], [{"text": text}])
                    n += 1
                    miss += got[0]["ids"] != want
            bad += miss
            print(f"{os.path.basename(src)}: chat template conversations: {n - miss}/{n} equal")
        return bad
    finally:
        shutil.rmtree(tmp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("folder")
    ap.add_argument("families", nargs="*")
    ap.add_argument("--model-type")
    a = ap.parse_intermixed_args()
    fams = a.families or sorted(f for f in os.listdir(a.folder)
                                if os.path.isfile(os.path.join(a.folder, f, "tokenizer.json.gz")))
    bad = sum(check_family(os.path.abspath(a.binary), os.path.join(a.folder, f), a.model_type)
              for f in fams)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
