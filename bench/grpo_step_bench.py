#!/usr/bin/env python3
"""Time of one GRPO step of `rlhf train` (fp32, CPU) on the Qwen2.5-0.5B-shaped random model,
split into generation, rewards and training, as rlhf.c reports it at the end of a run.

A step: one generation batch of `--generations` completions (G per prompt, prompts of about
`--prompt-len` tokens), each `--completion-len` tokens long (a random model never samples EOS, so
every completion runs to max_completion_length), sampled by rlhf.c's engine with the KV cache;
rewards from builtin.format (a regex search, so that groups have spread); then the forward and backward of the policy on those completions
(micro-batches of `--micro-batch`, accumulated into one optimizer step), beta 0 (TRL's default:
no reference, no old log-probs). With --lora-r, a LoRA adapter on every linear layer.

The tokenizer is the repository's qwen2_bytelevel fixture (its ids fall inside Qwen's vocabulary):
tokenisation is not what is timed. No TRL side yet: TRL's generation in this setting is
transformers' generate(), which forward_bench/generate_bench already compare.

    tools/reference/.venv/bin/python bench/grpo_step_bench.py [--steps 3] [--lora-r R]

Writes bench/out/grpo_step.json (grpo_step_lora<R>.json with --lora-r)."""
import argparse
import json
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward_bench  # noqa: E402  (make_model: the shared random Qwen2.5-0.5B-shaped model)

ROOT = forward_bench.ROOT
OUT = forward_bench.OUT


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--num-generations", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--completion-len", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--lora-r", type=int, default=0)
    forward_bench.add_model_argument(ap)
    a = ap.parse_args()
    model_dir = forward_bench.make_model(a.model)
    work = os.path.join(OUT, "grpo_step")
    os.makedirs(work, exist_ok=True)
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "light", "number", "seven"]
    prompts = os.path.join(work, "prompts.jsonl")
    with open(prompts, "w") as f:
        for _ in range(64):
            f.write(json.dumps({"prompt": " ".join(rng.choice(words) for _ in range(a.prompt_len))})
                    + "\n")
    lora = (f"adapter: lora\nlora_r: {a.lora_r}\nlora_alpha: {2 * a.lora_r}\nlora_target_linear: true\n"
            if a.lora_r else "")
    config = os.path.join(work, "grpo.yaml")
    with open(config, "w") as f:
        f.write(f"""base_model: {model_dir}
tokenizer_config: {os.path.join(ROOT, 'tests/fixtures/tokenizers/qwen2_bytelevel')}
rl: grpo
trl:
  num_generations: {a.num_generations}
  max_completion_length: {a.completion_len}
  reward_funcs: [{{function: builtin.format, pattern: 'e.*a', match: search}}]
datasets:
  - path: {prompts}
micro_batch_size: {a.micro_batch}
gradient_accumulation_steps: {a.generations // a.micro_batch}
max_steps: {a.steps}
learning_rate: 1e-6
lr_scheduler: constant
output_dir: {os.path.join(work, 'out')}
logging_steps: 1
seed: 0
{lora}""")
    run = subprocess.run([os.path.join(ROOT, "build", "rlhf"), "train", config], capture_output=True,
                         text=True)
    sys.stderr.write(run.stderr[-2000:])
    if run.returncode != 0:
        sys.exit(f"rlhf train failed: {run.stdout[-2000:]}")
    done = re.search(r"per step: generation ([\d.]+) s, rewards ([\d.]+) s, training ([\d.]+) s; "
                     r"peak memory (\d+) MB", run.stdout + run.stderr)
    steps = [json.loads(line) for line in open(os.path.join(work, "out", "metrics.jsonl"))]
    result = {
        "model": forward_bench.MODELS[a.model]["desc"] + ", random, fp32 compute",
        "threads": os.cpu_count(),
        "steps": a.steps, "generations_per_step": a.generations, "num_generations": a.num_generations,
        "prompt_tokens": steps[0]["num_tokens"] / a.generations - steps[0]["completions/mean_length"],
        "completion_tokens": steps[0]["completions/mean_length"],
        "lora_r": a.lora_r,
        "mean_s_per_step": {"generation": float(done.group(1)), "rewards": float(done.group(2)),
                            "training": float(done.group(3))},
        "step_time_s": [s["step_time"] for s in steps],
        "peak_rss_mb": int(done.group(4)),
    }
    name = (f"grpo_step_lora{a.lora_r}" if a.lora_r else "grpo_step") + forward_bench.MODELS[a.model]["suffix"] + ".json"
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
