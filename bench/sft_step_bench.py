#!/usr/bin/env python3
"""SFT training step (forward + backward + AdamW, fp32), rlhf.c vs PyTorch + transformers, in
one run, each in its own process so that peak RSS is each side's own.

Model: the Qwen2.5-0.5B-shaped random model of forward_bench.py (made on first use). Batch of
random tokens, every position a label. PyTorch side: AutoModelForCausalLM in fp32 (sdpa
attention, the default), the loss as Trainer computes it, torch.optim.AdamW, clip_grad_norm_.

    tools/reference/.venv/bin/python bench/sft_step_bench.py [--batch 1] [--seq 512] [--steps 3]
                                                             [--lora-r R]

With --lora-r both sides train a LoRA adapter on every linear layer (alpha 2r, no dropout) with
the base frozen: peft's get_peft_model on the PyTorch side.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))


def torch_side(model_dir, batch, seq, steps, threads, lora_r):
    import torch
    import transformers
    torch.set_num_threads(threads)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if lora_r:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=lora_r, lora_alpha=2 * lora_r, lora_dropout=0.0,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-5)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=g)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad()
        return float(loss)

    step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "transformers": transformers.__version__,
                      "best_s": min(times), "mean_s": sum(times) / len(times),
                      "tokens_per_s": batch * seq / min(times), "peak_rss_mb": rss, "lora_r": lora_r,
                      "trained_params": sum(p.numel() for p in trainable), "loss": loss}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lora-r", type=int, default=0, help="train a LoRA adapter of this rank")
    ap.add_argument("--torch-side", metavar="MODEL_DIR", help=argparse.SUPPRESS)
    from forward_bench import MODELS, add_model_argument, make_model
    add_model_argument(ap)
    a = ap.parse_args()
    if a.torch_side:
        torch_side(a.torch_side, a.batch, a.seq, a.steps, a.threads, a.lora_r)
        return
    model_dir = make_model(a.model)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    ours = json.loads(subprocess.run([os.path.join(ROOT, "build", "bench", "bench_sft_step"), model_dir,
                                      str(a.batch), str(a.seq), str(a.steps), "0", str(a.lora_r)],
                                     check=True, capture_output=True, text=True, env=env).stdout)
    out = subprocess.run([sys.executable, __file__, "--torch-side", model_dir, "--batch", str(a.batch),
                          "--seq", str(a.seq),
                          "--steps", str(a.steps), "--threads", str(a.threads), "--lora-r", str(a.lora_r)],
                         check=True, capture_output=True, text=True).stdout
    theirs = json.loads(out.strip().splitlines()[-1])
    what = f"LoRA r {a.lora_r} all-linear" if a.lora_r else "full fine-tuning"
    result = {"workload": f"SFT step fp32 ({what}), batch {a.batch} x {a.seq}, {a.threads} threads",
              "model": MODELS[a.model]["desc"] + ", random weights",
              "rlhf.c": ours, "pytorch": theirs,
              "speedup": ours["tokens_per_s"] / theirs["tokens_per_s"],
              "rss_ratio": ours["peak_rss_mb"] / theirs["peak_rss_mb"]}
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    name = (f"sft_step_lora{a.lora_r}" if a.lora_r else "sft_step") + MODELS[a.model]["suffix"] + ".json"
    with open(os.path.join(ROOT, "bench", "out", name), "w") as f:
        json.dump(result, f, indent=2)
    for name, r in (("rlhf.c", ours), ("pytorch", theirs)):
        print(f"{name:10s} {r['tokens_per_s']:8.1f} tokens/s  step {r['best_s']:6.2f} s  "
              f"peak RSS {r['peak_rss_mb']:7.0f} MB  trained {r['trained_params']:,}  loss {r['loss']:.4f}")
    print(f"speedup {result['speedup']:.2f}x, peak RSS ratio {result['rss_ratio']:.2f}")


if __name__ == "__main__":
    main()
