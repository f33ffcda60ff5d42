#!/usr/bin/env python3
"""Encoding throughput: rlhf.c's C tokenizer vs the `tokenizers` library, one thread each, on
the same documents, in one run.

    make                                   # builds build/tokenize_bench
    tools/reference/.venv/bin/python bench/tokenize_bench.py [--mb 4] [--repeats 3]

For each fixture tokenizer under tests/fixtures/tokenizers (byte-level: Qwen2-, Llama-3- and
SmolLM-style; SentencePiece-style: Llama-2 legacy and Mistral), the documents -- paragraphs of
this repository's sources and docs plus the fixture corpus, cycled in a seeded order up to
--mb megabytes -- are encoded with add_special_tokens=False:

  * C:               build/tokenize_bench (tokenizer_encode per document; best of --repeats
                     passes after one warm-up pass)
  * tokenizers loop: Tokenizer.encode(doc) per document (what a Python data loader calls)
  * tokenizers batch: Tokenizer.encode_batch(docs) with RAYON_NUM_THREADS=1 (no per-call Python
                     overhead; one thread)

Both sides keep their word caches warm the same way (one untimed pass). The ids are checked to
be identical (a hash over all ids). Results go to stdout and bench/out/tokenize_bench.json.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
NAMES = ["qwen2_bytelevel", "llama3_bytelevel", "smollm_bytelevel", "llama2_sp_legacy",
         "mistral_sp_first"]


def documents(megabytes):
    paras = []
    for top, _, files in sorted(os.walk(ROOT)):
        if any(part in top for part in ("/.git", "/build", "/fixtures", "/.venv", "/bench/out")):
            continue
        for f in sorted(files):
            if f.endswith((".c", ".h", ".md", ".py", ".txt")):
                with open(os.path.join(top, f), encoding="utf-8", errors="replace") as fp:
                    paras += [p for p in fp.read().split("\n\n") if p.strip()]
    with open(os.path.join(FIXTURES, "corpus.jsonl"), encoding="utf-8") as fp:
        paras += [json.loads(line)["text"] for line in fp]
    rng = random.Random(1234)
    docs, size = [], 0
    while size < megabytes * 1e6:
        rng.shuffle(paras)
        for p in paras:
            docs.append(p)
            size += len(p.encode("utf-8"))
            if size >= megabytes * 1e6:
                break
    return docs


def ids_hash(all_ids):
    h = 1469598103934665603
    for ids in all_ids:
        for i in ids:
            h = ((h ^ i) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def best_time(fn, repeats):
    fn()  # warm-up: fills the word cache
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bench-bin", default=os.path.join(ROOT, "build", "tokenize_bench"))
    args = ap.parse_args()
    if not os.path.exists(args.bench_bin):
        sys.exit(f"{args.bench_bin} not found: run `make` first")

    docs = documents(args.mb)
    out_dir = os.path.join(ROOT, "bench", "out")
    os.makedirs(out_dir, exist_ok=True)
    docs_path = os.path.join(out_dir, "tokenize_docs.jsonl")
    with open(docs_path, "w", encoding="utf-8") as fp:
        for d in docs:
            fp.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    print(f"{len(docs)} documents, {nbytes / 1e6:.2f} MB; tokenizers {tokenizers.__version__}; "
          f"one thread each; best of {args.repeats} passes after a warm-up pass\n")
    header = (f"{'tokenizer':18s} {'tokens':>9s} {'C tok/s':>12s} {'HF loop tok/s':>14s} "
              f"{'HF batch tok/s':>15s} {'C/HF loop':>10s} {'C/HF batch':>11s}  ids")
    print(header)
    results = []
    for name in NAMES:
        d = os.path.join(FIXTURES, name)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        encs = tok.encode_batch(docs, add_special_tokens=False)
        want_hash = ids_hash(e.ids for e in encs)
        n_tokens = sum(len(e.ids) for e in encs)
        t_loop = best_time(lambda: [tok.encode(x, add_special_tokens=False) for x in docs],
                           args.repeats)
        t_batch = best_time(lambda: tok.encode_batch(docs, add_special_tokens=False),
                            args.repeats)
        proc = subprocess.run([args.bench_bin, d, docs_path, str(args.repeats)], check=True,
                              capture_output=True, text=True)
        c = json.loads(proc.stdout)
        same = c["ids_hash"] == want_hash and c["tokens"] == n_tokens
        r = {"tokenizer": name, "tokens": n_tokens, "bytes": nbytes,
             "c_tokens_per_s": c["tokens_per_s"], "hf_loop_tokens_per_s": n_tokens / t_loop,
             "hf_batch_tokens_per_s": n_tokens / t_batch,
             "ratio_vs_loop": c["tokens_per_s"] / (n_tokens / t_loop),
             "ratio_vs_batch": c["tokens_per_s"] / (n_tokens / t_batch), "ids_identical": same}
        results.append(r)
        print(f"{name:18s} {n_tokens:9d} {r['c_tokens_per_s']:12,.0f} "
              f"{r['hf_loop_tokens_per_s']:14,.0f} {r['hf_batch_tokens_per_s']:15,.0f} "
              f"{r['ratio_vs_loop']:9.2f}x {r['ratio_vs_batch']:10.2f}x  "
              f"{'identical' if same else 'DIFFER'}")
    with open(os.path.join(out_dir, "tokenize_bench.json"), "w") as fp:
        json.dump({"tokenizers_version": tokenizers.__version__, "documents": len(docs),
                   "bytes": nbytes, "results": results}, fp, indent=2)
    if not all(r["ids_identical"] for r in results):
        sys.exit("ids differ between the C tokenizer and tokenizers")


if __name__ == "__main__":
    main()
