#!/usr/bin/env python3
"""Tokens/s of `rlhf train` on one process against N ranks (`--nproc N`) on the same global
batch, and the bytes the ranks exchange per optimizer step.

    python3 bench/dist_scaling.py [--config examples/quickstart.yaml] [--nproc 2] [--steps 24]

One process runs with micro_batch_size x (gradient_accumulation_steps x N) and every core in its
OpenMP threads; N ranks run with the config's accumulation, cores / N threads each (what
`--nproc` sets). Both train the same examples in the same windows, so the tokens/s ratio is the
speed-up of the data-parallel split alone. Each run is repeated (--repeat) and the best kept:
the machine may be shared. Standard library only.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_value(path, key, default):
    with open(path) as f:
        for line in f:
            m = re.match(rf"^{key}:\s*([^#\s]+)", line)
            if m:
                return m.group(1)
    return default


def trained_params(model_dir):
    """Parameters in model.safetensors (full fine-tuning trains them all)."""
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    total = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for d in t["shape"]:
            count *= d
        total += count
    return total


def run(binary, config, out, steps, extra, env):
    cmd = [binary, "train", config, "--output_dir", out, "--max_steps", str(steps),
           "--save_steps", "0", "--logging_steps", str(steps)] + extra
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr}")
    m = re.search(r"done: \d+ steps in ([\d.]+) s, (\d+) tokens/s", p.stderr)
    return float(m.group(1)), int(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/quickstart.yaml")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--zero-stage", default="0")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "rlhf"))
    ap.add_argument("--threads", type=int, default=0,
                    help="OpenMP threads of the one process (default: every core)")
    a = ap.parse_args()
    config = os.path.join(ROOT, a.config)
    ga = int(config_value(config, "gradient_accumulation_steps", "1"))
    micro = int(config_value(config, "micro_batch_size", "1"))
    cores = os.cpu_count()
    params = trained_params(os.path.join(ROOT, config_value(config, "base_model", "")))
    with tempfile.TemporaryDirectory() as tmp:
        threads = a.threads or cores
        env1 = dict(os.environ, OMP_NUM_THREADS=str(threads))
        envn = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        one = max((run(a.binary, config, os.path.join(tmp, "one"), a.steps,
                       ["--gradient_accumulation_steps", str(ga * a.nproc)], env1)
                   for _ in range(a.repeat)), key=lambda r: r[1])
        many = max((run(a.binary, config, os.path.join(tmp, "many"), a.steps,
                        ["--nproc", str(a.nproc), "--zero_stage", a.zero_stage], envn)
                    for _ in range(a.repeat)), key=lambda r: r[1])
    grad_bytes = 4 * params
    # A ring all-reduce (or ZeRO-1's reduce-scatter + all-gather) sends and receives
    # 2 (N-1)/N of the buffer per rank.
    per_rank = 2 * (a.nproc - 1) / a.nproc * grad_bytes
    print(f"config {a.config}: global batch {micro} x {ga} x {a.nproc} = {micro * ga * a.nproc}, "
          f"{a.steps} steps, {cores} cores")
    print(f"1 process ({threads} thread(s)):          {one[1]:>8} tokens/s ({one[0]:.2f} s)")
    print(f"{a.nproc} ranks ({max(cores // a.nproc, 1)} thread(s) each):      {many[1]:>8} tokens/s "
          f"({many[0]:.2f} s)  x{many[1] / one[1]:.2f}")
    print(f"gradient buffer all-reduced per step: {params} fp32 = {grad_bytes / 1e6:.2f} MB; "
          f"sent + received per rank: {per_rank / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
