#!/usr/bin/env python3
"""One GRPO step (fp32, CPU), rlhf.c's `rlhf train` vs TRL 1.9's GRPOTrainer, in one run, each
side in its own process so that peak RSS is each side's own; both split into generation, rewards
and training.

A step: one generation batch of `--generations` completions (G per prompt, prompts of about
`--prompt-len` words), each `--completion-len` tokens long (a random model never samples EOS, so
every completion runs to max_completion_length); rewards from a regex search (builtin.format on
rlhf.c's side, the same `re.search` as a Python reward function on TRL's); then the forward and
backward of the policy on those completions (micro-batches of `--micro-batch`, accumulated into
one optimizer step), loss dapo, beta 0 (TRL's defaults: no reference, no old log-probs), AdamW
(fp32 moments) at lr 1e-6, constant. With --lora-r, a LoRA adapter on every linear layer.

- rlhf.c: `rlhf train` on a generated YAML. Its generation engine prefills each prompt once for
  its G completions and decodes them together (KV cache, weights packed once per step); training
  computes a micro-batch's shared prompt once. The per-step split is the `time/generation`,
  `time/rewards` and `time/training` keys of metrics.jsonl.
- TRL: GRPOTrainer with the model given by path (fp32), transformers' generate() (no vLLM: TRL's
  path on a CPU), the same prompts as text, the same tokenizer. A GRPOTrainer subclass times
  `_generate` and `_calculate_rewards`; a TrainerCallback times each optimizer step from
  on_step_begin to on_step_end. Training is the step less generation and rewards.

The tokenizer is the repository's qwen2_bytelevel fixture (its ids fall inside Qwen's vocabulary):
tokenisation is not what is timed. Sampled ids outside its 3003 entries decode to nothing, so the
reward pattern is "." (any decoded character): about 3 in 4 random completions hold one, and
groups have reward spread, so the loss and gradients are not zero.

Both sides run `--steps` optimizer steps; the first is a warm-up (first-touch of the optimizer
state, the allocator's growth) and the comparison is the mean of the rest.

Training FLOPs per step: forward_bench's per-token matmul FLOPs over the prompt and completion
positions, the lm_head over the completion positions only (both sides score only those),
attention as full T x T; x3 for forward + backward (x2 with LoRA: no weight gradients). TRL runs
every completion's prompt rows; rlhf.c a micro-batch's shared prompt once, so each side's
GFLOP/s and MFU count the rows it executes (the speed ratio is the ratio of times). MFU: against
OpenBLAS sgemm's best on the model's shapes, measured in the same run, and against the machine's
own fp32 FMA peak (machine_peak.py: build/bench/peak_flops before and after, the higher kept).

--vs-trl: issue 33's side-by-side workload, 8 prompts x 8 completions (--generations 64
--num-generations 8) of 128 tokens (--completion-len 128), both sides; the other options as given
(an explicit --generations, e.g. 16 = 2 prompts x 8, where 64 does not fit the time).

    tools/reference/.venv/bin/python bench/grpo_step_bench.py [--steps 3] [--lora-r R] [--no-trl]
    tools/reference/.venv/bin/python bench/grpo_step_bench.py --vs-trl --steps 2 [--model smollm2-135m]

Writes bench/out/grpo_step.json (grpo_step_lora<R>.json with --lora-r)."""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import forward_bench  # noqa: E402  (make_model: the shared random Qwen2.5-0.5B-shaped model)
from dpo_step_bench import peak_rss_mb  # noqa: E402

ROOT = forward_bench.ROOT
OUT = forward_bench.OUT
TOKENIZER_DIR = os.path.join(ROOT, "tests/fixtures/tokenizers/qwen2_bytelevel")
PATTERN = "."  # the reward: 1 when the decoded completion holds any character (see above)
LEARNING_RATE = 1e-6


def write_prompts(path, n, words_per_prompt):
    """n copies of one prompt: each side draws prompts in its own order, and so both train on
    prompts of the same length."""
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma", "delta", "river", "stone", "light", "number", "seven"]
    prompt = " ".join(rng.choice(words) for _ in range(words_per_prompt))
    with open(path, "w") as f:
        for _ in range(n):
            f.write(json.dumps({"prompt": prompt}) + "\n")


def rlhf_side(a, model_dir, prompts, work):
    lora = (f"adapter: lora\nlora_r: {a.lora_r}\nlora_alpha: {2 * a.lora_r}\nlora_target_linear: true\n"
            if a.lora_r else "")
    config = os.path.join(work, "grpo.yaml")
    with open(config, "w") as f:
        f.write(f"""base_model: {model_dir}
tokenizer_config: {TOKENIZER_DIR}
rl: grpo
trl:
  num_generations: {a.num_generations}
  max_completion_length: {a.completion_len}
  reward_funcs: [{{function: builtin.format, pattern: '{PATTERN}', match: search}}]
datasets:
  - path: {prompts}
micro_batch_size: {a.micro_batch}
gradient_accumulation_steps: {a.generations // a.micro_batch}
max_steps: {a.steps}
learning_rate: {LEARNING_RATE}
lr_scheduler: constant
output_dir: {os.path.join(work, 'out')}
overwrite_output_dir: true
logging_steps: 1
seed: 0
{'bf16: true' if a.bf16 else ''}
{lora}""")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    run = subprocess.run([os.path.join(ROOT, "build", "rlhf"), "train", config], capture_output=True,
                         text=True, env=env)
    if run.returncode != 0:
        sys.stderr.write(run.stderr[-2000:])
        sys.exit(f"rlhf train failed: {run.stdout[-2000:]}")
    done = re.search(r"peak memory (\d+) MB", run.stdout + run.stderr)
    lines = [json.loads(line) for line in open(os.path.join(work, "out", "metrics.jsonl"))]
    steps = [{"step": m["step"], "step_s": m["step_time"], "generation_s": m["time/generation"],
              "rewards_s": m["time/rewards"], "training_s": m["time/training"],
              "generation_cpu_s": m.get("cpu_time/generation"), "training_cpu_s": m.get("cpu_time/training")}
             for m in lines]
    return {"impl": "rlhf.c", "steps": steps, "peak_rss_mb": int(done.group(1)),
            "prompt_tokens": lines[0]["num_tokens"] / a.generations - lines[0]["completions/mean_length"],
            "completion_tokens": lines[0]["completions/mean_length"],
            "reward_mean": [m["reward"] for m in lines], "loss": [m["loss"] for m in lines],
            "grad_norm": [m["grad_norm"] for m in lines]}


def trl_side(a, model_dir, prompts):
    import torch
    torch.set_num_threads(a.threads)
    import transformers
    import trl
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    tok = transformers.AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    rows = [json.loads(line) for line in open(prompts)]

    def format(completions, **kwargs):  # noqa: A001  (the reward's name, as rlhf.c logs it)
        return [1.0 if re.search(PATTERN, c) else 0.0 for c in completions]

    class TimedGRPOTrainer(GRPOTrainer):
        generation_s = rewards_s = generation_cpu_s = 0.0

        def _generate(self, *args, **kwargs):
            t, c = time.perf_counter(), time.process_time()
            out = super()._generate(*args, **kwargs)
            self.generation_s += time.perf_counter() - t
            self.generation_cpu_s += time.process_time() - c
            return out

        def _calculate_rewards(self, *args, **kwargs):
            t = time.perf_counter()
            out = super()._calculate_rewards(*args, **kwargs)
            self.rewards_s += time.perf_counter() - t
            return out

    class StepTimer(transformers.TrainerCallback):
        def __init__(self):
            self.steps, self.threads = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.threads = torch.get_num_threads()
            self.t0, self.g0, self.r0 = time.perf_counter(), trainer.generation_s, trainer.rewards_s
            self.c0, self.gc0 = time.process_time(), trainer.generation_cpu_s

        def on_step_end(self, args, state, control, **kwargs):
            step = time.perf_counter() - self.t0
            gen, rew = trainer.generation_s - self.g0, trainer.rewards_s - self.r0
            gen_cpu = trainer.generation_cpu_s - self.gc0
            self.steps.append({"step": state.global_step, "step_s": step, "generation_s": gen,
                               "rewards_s": rew, "training_s": step - gen - rew,
                               "generation_cpu_s": gen_cpu,
                               "training_cpu_s": time.process_time() - self.c0 - gen_cpu})
            # a TRL step at the 0.5B shape takes many minutes: show each as it ends
            with open(os.path.join(OUT, "grpo_step", "trl_steps.jsonl"), "a") as f:
                f.write(json.dumps(self.steps[-1]) + "\n")

    timer = StepTimer()
    peft_config = None
    if a.lora_r:
        from peft import LoraConfig
        peft_config = LoraConfig(r=a.lora_r, lora_alpha=2 * a.lora_r, lora_dropout=0.0,
                                 target_modules="all-linear", task_type="CAUSAL_LM")
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, report_to=[], save_strategy="no", bf16=a.bf16, use_cpu=True,
                          dataloader_num_workers=0, disable_tqdm=True, seed=0, logging_steps=1,
                          per_device_train_batch_size=a.micro_batch,
                          gradient_accumulation_steps=a.generations // a.micro_batch,
                          num_generations=a.num_generations, max_completion_length=a.completion_len,
                          max_steps=a.steps, learning_rate=LEARNING_RATE, lr_scheduler_type="constant",
                          warmup_steps=0, model_init_kwargs={"dtype": "float32"})
        trainer = TimedGRPOTrainer(model=model_dir, reward_funcs=format, args=args,
                                   train_dataset=Dataset.from_list(rows), processing_class=tok,
                                   peft_config=peft_config, callbacks=[timer])
        trainer.train()
    logs = [h for h in trainer.state.log_history if "num_tokens" in h]
    print(json.dumps({
        "impl": "trl", "trl": trl.__version__, "transformers": transformers.__version__,
        "torch": torch.__version__, "threads": timer.threads, "steps": timer.steps,
        "peak_rss_mb": peak_rss_mb(),
        "prompt_tokens": logs[0]["num_tokens"] / a.generations - logs[0]["completions/mean_length"],
        "completion_tokens": logs[0]["completions/mean_length"],
        "reward_mean": [h["reward"] for h in logs], "loss": [h["loss"] for h in logs],
        "grad_norm": [h["grad_norm"] for h in logs],
        "trained_params": sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)}))


def training_flops(cfg, a, prompt_tokens, prompt_once):
    """Training FLOPs of one step (see the module docstring). prompt_once: the prompt's rows
    counted once per micro-batch (its completions all share it), as rlhf.c computes them."""
    from types import SimpleNamespace
    c = SimpleNamespace(**cfg)
    seq = prompt_tokens + a.completion_len
    lm_head = 2 * c.vocab_size * c.hidden_size
    per_token = forward_bench.flops_per_token(c, seq) - lm_head
    micro_batches = a.generations // a.micro_batch
    prompt_rows = micro_batches * prompt_tokens if prompt_once else a.generations * prompt_tokens
    rows = prompt_rows + a.generations * a.completion_len
    forward = rows * per_token + a.generations * a.completion_len * lm_head
    return (2 if a.lora_r else 3) * forward


def mean_after_warmup(steps, key):
    timed = steps[1:]  # --steps is at least 2
    return sum(s[key] for s in timed) / len(timed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps, the first a warm-up")
    ap.add_argument("--generations", type=int, default=None, help="completions per step (8; 64 with --vs-trl)")
    ap.add_argument("--num-generations", type=int, default=8, help="completions per prompt (G)")
    ap.add_argument("--prompt-len", type=int, default=64, help="words per prompt")
    ap.add_argument("--completion-len", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--lora-r", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-trl", action="store_true", help="rlhf.c's side only")
    ap.add_argument("--vs-trl", action="store_true",
                    help="issue 33's workload: 64 completions, 8 per prompt, of 128 tokens, against TRL")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 mixed precision on both sides: rlhf.c bf16: true (autocast products on "
                         "gemm_bf16, generation on AMX tiles where present), TRL bf16=True (torch CPU "
                         "autocast, oneDNN); fp32 weights and AdamW on both")
    ap.add_argument("--trl-side", nargs=2, metavar=("MODEL_DIR", "PROMPTS"), help=argparse.SUPPRESS)
    forward_bench.add_model_argument(ap)
    a = ap.parse_args()
    if a.steps < 2:
        ap.error("--steps must be at least 2 (the first is a warm-up)")
    if a.vs_trl:
        if a.no_trl:
            ap.error("--vs-trl runs TRL's side: drop --no-trl")
        a.num_generations, a.completion_len = 8, 128
    if a.generations is None:
        a.generations = 64 if a.vs_trl else 8
    if a.generations % a.micro_batch or a.generations % a.num_generations:
        ap.error("--generations must be a multiple of --micro-batch and of --num-generations")
    if a.trl_side:
        trl_side(a, *a.trl_side)
        return
    model_dir = forward_bench.make_model(a.model)
    work = os.path.join(OUT, "grpo_step")
    os.makedirs(work, exist_ok=True)
    prompts = os.path.join(work, "prompts.jsonl")
    write_prompts(prompts, 64, a.prompt_len)
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    import machine_peak
    peaks = [machine_peak.measure(env)]
    ours = rlhf_side(a, model_dir, prompts, work)
    rows = a.micro_batch * int(ours["prompt_tokens"] + a.completion_len)  # a micro-batch's token rows
    sgemm = json.loads(subprocess.run([os.path.join(ROOT, "build", "bench", "bench_dpo_step"), "--sgemm",
                                       str(rows), str(cfg["hidden_size"]), str(cfg["intermediate_size"])],
                                      check=True, capture_output=True, text=True, env=env).stdout)
    sides = [("rlhf.c", ours)]
    theirs = None
    if not a.no_trl:
        cmd = [sys.executable, __file__, "--trl-side", model_dir, prompts] + [
            f"--{k.replace('_', '-')}={v}" for k, v in vars(a).items()
            if k in ("steps", "generations", "num_generations", "prompt_len", "completion_len", "micro_batch",
                     "lora_r", "threads")] + (["--bf16"] if a.bf16 else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-6000:])
            sys.exit(f"TRL side failed (exit {proc.returncode})")
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])
        sides.append(("TRL", theirs))
    peaks.append(machine_peak.measure(env))
    machine = machine_peak.merge(peaks)
    peak = sgemm["peak_gflops"]
    for _, side in sides:
        side["mean_after_warmup_s"] = {k: mean_after_warmup(side["steps"], k)
                                       for k in ("step_s", "generation_s", "rewards_s", "training_s")}
        if all(s.get("generation_cpu_s") is not None for s in side["steps"]):
            side["mean_after_warmup_cpu_s"] = {k: mean_after_warmup(side["steps"], k)
                                               for k in ("generation_cpu_s", "training_cpu_s")}
        training_s = side["mean_after_warmup_s"]["training_s"]
        credited = training_flops(cfg, a, side["prompt_tokens"], prompt_once=False)
        executed = training_flops(cfg, a, side["prompt_tokens"], prompt_once=side is ours)
        side["training_gflop_credited"] = credited * 1e-9
        side["training_gflop_executed"] = executed * 1e-9
        side["training_gflops_per_s"] = executed / training_s * 1e-9
        side["training_mfu_vs_sgemm"] = side["training_gflops_per_s"] / peak
        side["training_mfu_vs_fp32_peak"] = side["training_gflops_per_s"] / machine["fp32_peak_gflops"]
        side["new_tokens_per_s_generation"] = a.generations * side["completion_tokens"] / \
            side["mean_after_warmup_s"]["generation_s"]
    result = {
        "workload": (f"GRPO step {'bf16 autocast' if a.bf16 else 'fp32'}, loss dapo, beta 0, {a.generations} completions ({a.num_generations} per "
                     f"prompt) of {a.completion_len} tokens, prompts of ~{ours['prompt_tokens']:.0f} tokens, "
                     f"micro-batches of {a.micro_batch}, "
                     + (f"LoRA r {a.lora_r} all-linear" if a.lora_r else "full fine-tuning, AdamW")
                     + f", {a.threads} threads"),
        "model": forward_bench.MODELS[a.model]["desc"] + (", random, bf16 autocast compute (fp32 weights)"
                                                          if a.bf16 else ", random, fp32 compute"),
        "sgemm": sgemm, "machine_peak": machine, "rlhf.c": ours, "trl": theirs,
    }
    if theirs:
        mine, other = ours["mean_after_warmup_s"], theirs["mean_after_warmup_s"]
        result["speedup"] = {k: other[k] / mine[k] for k in ("step_s", "generation_s", "training_s")}
        result["rss_ratio"] = ours["peak_rss_mb"] / theirs["peak_rss_mb"]
    name = ((f"grpo_step_lora{a.lora_r}" if a.lora_r else "grpo_step") + forward_bench.MODELS[a.model]["suffix"]
            + ("_bf16" if a.bf16 else "") + ".json")
    out_path = os.path.join(OUT, name)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)

    print(result["workload"])
    print(f"OpenBLAS sgemm peak on the model's shapes: {peak:.1f} GFLOP/s")
    print(machine_peak.describe(machine))
    print("means of the steps after the first (s):")
    for label, side in sides:
        m = side["mean_after_warmup_s"]
        print(f"{label:7s} step {m['step_s']:7.2f}  generation {m['generation_s']:7.2f} "
              f"({side['new_tokens_per_s_generation']:6.1f} new tok/s)  rewards {m['rewards_s']:6.3f}  "
              f"training {m['training_s']:7.2f} ({side['training_gflops_per_s']:6.1f} GFLOP/s, "
              f"MFU {100 * side['training_mfu_vs_sgemm']:4.1f}% of sgemm, "
              f"{100 * side['training_mfu_vs_fp32_peak']:4.1f}% of the FMA peak)  peak RSS {side['peak_rss_mb']:6.0f} MB  "
              f"prompt {side['prompt_tokens']:.0f} + completion {side['completion_tokens']:.0f} tokens")
    for label, side in sides:
        c = side.get("mean_after_warmup_cpu_s")
        if c:
            print(f"{label:7s} CPU seconds (all threads): generation {c['generation_cpu_s']:7.2f}  "
                  f"training (rewards included) {c['training_cpu_s']:7.2f}")
    if theirs:
        sp = result["speedup"]
        print(f"rlhf.c / TRL: step {sp['step_s']:.2f}x, generation {sp['generation_s']:.2f}x, training "
              f"{sp['training_s']:.2f}x faster; {result['rss_ratio']:.2f}x peak RSS")
    print(f"wrote {os.path.relpath(out_path, ROOT)}")


if __name__ == "__main__":
    main()
