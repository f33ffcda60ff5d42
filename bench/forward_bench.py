#!/usr/bin/env python3
"""Forward-pass throughput, rlhf.c vs transformers (PyTorch, CPU), in one run.

Workload: per-token log-probs of a batch of random token sequences (every position scored),
which is what DPO/GRPO log-prob passes compute. Model (--model): Qwen2.5-0.5B-shaped (hidden
896, 24 layers, 14/2 heads, intermediate 4864, vocab 151936, tied) or SmolLM2-135M-shaped (a
Llama: hidden 576, 30 layers, 9/3 heads, intermediate 1536, vocab 49152, tied), random weights
made here with transformers and saved in bf16; both sides compute in fp32.

    tools/reference/.venv/bin/python bench/forward_bench.py [--model smollm2-135m] [--batch 4] [--seq 512] [--reps 3]

Needs `make` first (build/bench/bench_forward) and the reference virtualenv (see
tools/reference/README.md). Writes bench/out/forward.json.
"""
import argparse
import json
import os
import subprocess
import time

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
# The two model shapes every workload runs on (--model): random weights, saved in bf16.
MODELS = {
    "qwen2.5-0.5b": {"dir": "qwen2.5-0.5b-random", "suffix": "",
                     "desc": "Qwen2.5-0.5B-shaped (hidden 896, 24 layers, 14/2 heads, vocab 151936, tied)"},
    "smollm2-135m": {"dir": "smollm2-135m-random", "suffix": "_135m",
                     "desc": "SmolLM2-135M-shaped Llama (hidden 576, 30 layers, 9/3 heads, vocab 49152, tied)"},
}
MODEL_DIR = os.path.join(OUT, MODELS["qwen2.5-0.5b"]["dir"])


def model_config(name):
    if name == "qwen2.5-0.5b":
        return transformers.Qwen2Config(
            vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
            num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
            rms_norm_eps=1e-6, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    return transformers.LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192, rms_norm_eps=1e-5,
        tie_word_embeddings=True, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 100000.0})


def make_model(name="qwen2.5-0.5b"):
    """The random model `name` (MODELS) in bench/out, made once; returns its directory."""
    path = os.path.join(OUT, MODELS[name]["dir"])
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(model_config(name)).to(torch.bfloat16)
    model.save_pretrained(path)
    return path


def add_model_argument(ap):
    ap.add_argument("--model", choices=sorted(MODELS), default="qwen2.5-0.5b",
                    help="model shape (result files of smollm2-135m end in _135m)")


def flops_per_token(cfg, seq_len):
    """Forward FLOPs per token: 2 per weight of every matmul (lm_head included, embedding
    lookup excluded) plus the attention score and value products, 2*2*L*(nh*hd)*T_ctx with
    T_ctx the average causal context (seq_len/2) -- computed here as full T x T since both
    implementations measured do the full square."""
    H, I, L, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
    hd = H // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    per_layer = H * q + 2 * H * kv + q * H + 3 * H * I
    matmul = 2 * (L * per_layer + V * H)
    attention = 2 * 2 * L * q * seq_len
    return matmul + attention


def bench_transformers(model_dir, batch, seq, reps, threads):
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=g)

    def step():
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        return logp

    step()  # warm-up
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return {"impl": "transformers", "version": transformers.__version__, "torch": torch.__version__,
            "threads": threads, "best_s": min(times), "mean_s": sum(times) / len(times),
            "tokens_per_s": batch * seq / min(times)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    add_model_argument(ap)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    model_dir = make_model(args.model)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    c_out = subprocess.run(
        [os.path.join(ROOT, "build", "bench", "bench_forward"), model_dir, str(args.batch),
         str(args.seq), str(args.reps)], check=True, capture_output=True, text=True, env=env)
    ours = json.loads(c_out.stdout)
    theirs = bench_transformers(model_dir, args.batch, args.seq, args.reps, args.threads)
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    fpt = flops_per_token(cfg, args.seq)
    for r in (ours, theirs):
        r["gflops_per_s"] = fpt * r["tokens_per_s"] / 1e9
    result = {"workload": f"forward log-probs, batch {args.batch} x {args.seq}, fp32, "
                          f"{args.threads} threads", "model": MODELS[args.model]["desc"] + ", random weights",
              "forward_flops_per_token": fpt, "rlhf.c": ours, "transformers": theirs,
              "speedup": ours["tokens_per_s"] / theirs["tokens_per_s"]}
    with open(os.path.join(OUT, "forward" + MODELS[args.model]["suffix"] + ".json"), "w") as f:
        json.dump(result, f, indent=2)
    print(f"{'impl':<14}{'tokens/s':>10}{'best s':>9}{'GFLOP/s':>9}")
    for name, r in (("rlhf.c", ours), ("transformers", theirs)):
        print(f"{name:<14}{r['tokens_per_s']:>10.1f}{r['best_s']:>9.2f}{r['gflops_per_s']:>9.1f}")
    print(f"speedup rlhf.c / transformers: {result['speedup']:.2f}x  (peak RSS rlhf.c "
          f"{ours['peak_rss_mb']:.0f} MB)")


if __name__ == "__main__":
    main()
