#!/usr/bin/env python3
"""SFT on short examples, `sample_packing: true` against the same run unpacked, in one run.

Both sides are `rlhf train` in its own process on the same data and config: one epoch over the
first --examples rows of examples/data/arithmetic_train.jsonl (Alpaca arithmetic, 20-40 tokens
each), micro_batch_size --micro-batch, sequence_len --seq, fp32, full fine-tuning. Unpacked, a
micro-batch is micro_batch_size examples; packed, it is one row of micro_batch_size x
sequence_len tokens (Axolotl's multipack), so the epoch takes far fewer, larger steps. Both
count the same tokens (every real token of the epoch): tokens/s is the epoch's tokens over its
training seconds, as `rlhf train` reports it in its `done:` line.

    make && python3 bench/sft_packing_bench.py [--model tiny-arith|smollm2-135m] [--examples 512]
                                               [--seq 512] [--micro-batch 4] [--repeat 1]

--model smollm2-135m trains forward_bench.py's SmolLM2-135M-shaped random model (made on first
use, needs torch and transformers: tools/reference/.venv/bin/python) with tiny-arith's tokenizer
(its ids fit any larger vocabulary). Results go to bench/out/sft_packing.json. No wall-clock
claim is made in tests: the ratio is for the machine and load of the run.
"""
import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")


def model_dir(name):
    tiny = os.path.join(ROOT, "models", "tiny-arith")
    if name == "tiny-arith":
        return tiny
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from forward_bench import make_model
    path = make_model(name)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tiny, f), path)
    return path


def cpu_description():
    model, flags = platform.processor(), []
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        info = ""
    m = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
    f = re.search(r"^flags\s*:\s*(.*)$", info, re.M)
    if m:
        model = m.group(1).strip()
    if f:
        flags = sorted({x for x in f.group(1).split() if x.startswith(("avx512", "amx", "avx2", "fma"))})
    return {"cpu": model, "cores": os.cpu_count(), "flags": flags}


def write_config(path, model, data, a, packed):
    with open(path, "w") as f:
        f.write(f"""base_model: {model}
datasets:
  - path: {data}
    type: alpaca
sequence_len: {a.seq}
micro_batch_size: {a.micro_batch}
gradient_accumulation_steps: 1
num_epochs: 1
learning_rate: 1e-5
save_steps: 0
logging_steps: 1000000
seed: 42
sample_packing: {"true" if packed else "false"}
""")


def run(binary, config, out, env):
    cmd = [binary, "train", config, "--output_dir", out]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    text = p.stdout + p.stderr
    m = re.search(r"done: (\d+) steps in ([\d.]+) s, (\d+) tok/s, peak memory (\d+) MB", text)
    packing = re.search(r"sample packing \(first-fit\): .*", text)
    return {"steps": int(m.group(1)), "seconds": float(m.group(2)), "tokens_per_s": int(m.group(3)),
            "peak_mb": int(m.group(4)), "packing": packing.group(0) if packing else None,
            # the whole process's CPU seconds (loading included): on a shared machine the wall
            # clock also counts the time other processes held the cores
            "process_cpu_s": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["tiny-arith", "smollm2-135m"], default="tiny-arith")
    ap.add_argument("--examples", type=int, default=512)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=1, help="runs per side; the best is kept")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "rlhf"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    model = model_dir(a.model)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "short.jsonl")
        with open(os.path.join(ROOT, "examples", "data", "arithmetic_train.jsonl")) as src, \
                open(data, "w") as dst:
            for i, line in enumerate(src):
                if i == a.examples:
                    break
                dst.write(line)
        for packed in (False, True):
            name = "packed" if packed else "unpacked"
            config = os.path.join(tmp, f"{name}.yaml")
            write_config(config, model, data, a, packed)
            runs = [run(a.binary, config, os.path.join(tmp, f"{name}-{r}"), env)
                    for r in range(a.repeat)]
            results[name] = max(runs, key=lambda r: r["tokens_per_s"])
            r = results[name]
            print(f"{name:9s} {r['steps']:4d} steps in {r['seconds']:7.1f} s, "
                  f"{r['tokens_per_s']:6d} tok/s, peak {r['peak_mb']} MB, "
                  f"process CPU {r['process_cpu_s']:.1f} s", flush=True)
    ratio = results["packed"]["tokens_per_s"] / max(results["unpacked"]["tokens_per_s"], 1)
    if results["packed"]["packing"]:
        print(results["packed"]["packing"])
    print(f"packed / unpacked tokens/s: {ratio:.2f}x; machine load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "sft_packing.json"), "w") as f:
        json.dump(dict(model=a.model, examples=a.examples, sequence_len=a.seq,
                       micro_batch_size=a.micro_batch, threads=a.threads, machine=cpu_description(),
                       load_average=os.getloadavg()[0], results=results, ratio=ratio), f, indent=2)


if __name__ == "__main__":
    main()
