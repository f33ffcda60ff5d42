#!/usr/bin/env python3
"""DPO training step (fp32, CPU), rlhf.c vs TRL 1.9's DPOTrainer, in one run, each side in its
own process so that peak RSS is each side's own.

One optimizer step of DPO on a micro-batch of B pairs (2B sequences: the B prompt + chosen, then
the B prompt + rejected), every sequence `--seq` tokens (a prompt of `--prompt-len` random tokens
and a response of the rest): the policy forward and backward on the 2B rows, the reference's
forward-only log-probs of the same rows, the sigmoid DPO loss (beta 0.1), clipping to 1.0, AdamW.

- rlhf.c: build/bench/bench_dpo_step, which runs the library's own path (pref_batch_build,
  pref_method's TrainMethod, trainer_step, the reference policy) as `rlhf train` with rl: dpo
  does. Reference: a frozen copy of the model (with --lora-r: the adapter switched off).
- TRL: DPOTrainer with the model given by path (TRL then loads the policy and, as its default
  when there is no peft, a frozen copy as ref_model, both fp32), sdpa attention, no gradient
  checkpointing, dropout disabled (TRL's default). The pairs are handed over already tokenised
  (a DPOTrainer subclass skips the tokenisation of _prepare_dataset, which is not part of a
  step) and taken in order, so that both sides train on the same ids. With --lora-r, peft's
  LoraConfig on every linear layer (alpha 2r) and no ref model (TRL disables the adapter).
  Each optimizer step is timed by a TrainerCallback from on_step_begin to on_step_end.

Both sides: best of `--steps` timed steps after one warm-up step, all cores
(torch.set_num_threads, OMP_NUM_THREADS). The warm-up step is also a sanity check: the policy
equals the reference there, so the DPO loss must be ln 2 on both sides, and both must give the
same summed completion log-probs (logps/chosen, logps/rejected).

FLOPs credited per step (the same figure for both sides, so GFLOP/s ratios are speed ratios):
forward_bench.flops_per_token per token (every matmul, lm_head included at every position,
attention as full T x T) times the 2B*T tokens, times 3 for the policy (forward + backward)
plus 1 for the reference's forward; with --lora-r the policy counts 2 (no weight gradients).
MFU: those GFLOP/s over OpenBLAS sgemm's best GFLOP/s on the model's GEMM shapes, measured in
the same run (bench_dpo_step --sgemm) with the same thread count; and over the machine's own
fp32 FMA peak (machine_peak.py: build/bench/peak_flops, measured before and after the steps, the
higher kept), the honest figure: the sgemm one moves with whichever kernel OpenBLAS picks.
With --bf16 both sides train in bf16 mixed precision (rlhf.c `bf16: true`, its autocast backend;
TRL `bf16=True`, torch's CPU autocast) and MFU is also given against the bf16 dot-product peak.

    tools/reference/.venv/bin/python bench/dpo_step_bench.py [--pairs 1] [--seq 512]
        [--prompt-len 128] [--steps 3] [--lora-r R] [--smoke]

--smoke: a tiny Qwen2-shaped random model (2 layers, hidden 64, vocab 1024) and 64-token
sequences, to check both sides run and agree; its timings mean nothing.
Writes bench/out/dpo_step.json (dpo_step_lora<R>.json with --lora-r, a _gc suffix with
--gradient-checkpointing, _smoke with --smoke). Exits 1 when the step-0 sanity check fails.
"""
import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
SMOKE_MODEL_DIR = os.path.join(OUT, "qwen2-smoke-random")
BETA = 0.1


def peak_rss_mb():
    """VmHWM: the peak RSS of this process's own address space (ru_maxrss would carry the
    spawning process's over exec)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_smoke_model():
    if os.path.exists(os.path.join(SMOKE_MODEL_DIR, "config.json")):
        return
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    transformers.Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(SMOKE_MODEL_DIR)


def write_batch(path, pairs, seq, prompt_len, vocab, seed):
    """B pairs of random ids: a prompt of prompt_len, chosen and rejected of seq - prompt_len.
    Ids start at 3 so that none is the pad id (0) TRL's collator uses; nothing is padded anyway."""
    rng = random.Random(seed)
    resp = seq - prompt_len

    def ids(n):
        return [rng.randrange(3, vocab) for _ in range(n)]
    batch = {"prompt": [], "chosen": [], "rejected": []}
    for _ in range(pairs):
        batch["prompt"].append(ids(prompt_len))
        batch["chosen"].append(ids(resp))
        batch["rejected"].append(ids(resp))
    with open(path, "w") as f:
        json.dump(batch, f)


def trl_side(model_dir, batch_path, steps, threads, lora_r, checkpointing, adamw_8bit=False, bf16=False):
    import torch
    torch.set_num_threads(threads)
    import transformers
    import trl
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from torch.utils.data import SequentialSampler
    from trl import DPOConfig, DPOTrainer

    with open(batch_path) as f:
        batch = json.load(f)
    pairs, seq = len(batch["prompt"]), len(batch["prompt"][0]) + len(batch["chosen"][0])
    # steps + 1 optimizer steps (the first a warm-up), each on the same B pairs in order
    rows = [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r}
            for p, c, r in zip(batch["prompt"], batch["chosen"], batch["rejected"])] * (steps + 1)
    # DPOTrainer wants a tokenizer for its pad id; the ids come tokenised already.
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<pad>": 0, "<eos>": 1, "<unk>": 2}, unk_token="<unk>")),
        pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")

    class PretokenizedDPOTrainer(DPOTrainer):
        def _prepare_dataset(self, dataset, *args, **kwargs):
            return dataset  # already prompt_ids / chosen_ids / rejected_ids

        def _get_train_sampler(self, *args, **kwargs):
            return SequentialSampler(self.train_dataset)

    class StepTimer(transformers.TrainerCallback):
        def __init__(self):
            self.times, self.threads = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.threads = torch.get_num_threads()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.t0)

    timer = StepTimer()
    peft_config = None
    if lora_r:
        from peft import LoraConfig
        peft_config = LoraConfig(r=lora_r, lora_alpha=2 * lora_r, lora_dropout=0.0, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    with tempfile.TemporaryDirectory() as tmp:
        args = DPOConfig(output_dir=tmp, report_to=[], save_strategy="no", bf16=bf16, use_cpu=True,
                         gradient_checkpointing=checkpointing, dataloader_num_workers=0,
                         per_device_train_batch_size=pairs, gradient_accumulation_steps=1, max_steps=steps + 1,
                         learning_rate=1e-6, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                         max_grad_norm=1.0, logging_steps=1, max_length=seq, beta=BETA, loss_type=["sigmoid"],
                         model_init_kwargs={"dtype": "float32"}, disable_tqdm=True, seed=42,
                         **({"optim": "adamw_bnb_8bit"} if adamw_8bit else {}))
        trainer = PretokenizedDPOTrainer(model=model_dir, args=args, train_dataset=Dataset.from_list(rows),
                                         processing_class=tok, peft_config=peft_config, callbacks=[timer])
        trainer.train()
    history = [h for h in trainer.state.log_history if "loss" in h]
    timed = timer.times[1:]
    trained = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    rss = peak_rss_mb()
    print(json.dumps({"impl": "trl", "trl": trl.__version__, "transformers": transformers.__version__,
                      "torch": torch.__version__, "threads": timer.threads, "pairs": pairs, "rows": 2 * pairs,
                      "seq_len": seq, "steps": len(timed), "best_s": min(timed), "mean_s": sum(timed) / len(timed),
                      "tokens": 2 * pairs * seq, "tokens_per_s": 2 * pairs * seq / min(timed), "peak_rss_mb": rss,
                      "gradient_checkpointing": checkpointing, "bf16": bf16, "lora_r": lora_r, "optimizer": args.optim,
                      "reference": "adapter disabled" if lora_r else "frozen copy of the model (ref_model)",
                      "trained_params": trained, "loss_step0": history[0]["loss"],
                      "logps_chosen_step0": history[0]["logps/chosen"],
                      "logps_rejected_step0": history[0]["logps/rejected"], "loss_last": history[-1]["loss"]}))


def flops_per_step(model_dir, seq, rows, lora_r):
    """Credited FLOPs of one step (see the module docstring)."""
    from types import SimpleNamespace
    from forward_bench import flops_per_token
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    cfg = SimpleNamespace(hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                          num_hidden_layers=c["num_hidden_layers"], vocab_size=c["vocab_size"],
                          num_attention_heads=c["num_attention_heads"], num_key_value_heads=c["num_key_value_heads"])
    forward = flops_per_token(cfg, seq) * rows * seq
    policy = (2 if lora_r else 3) * forward
    return policy + forward, c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=1, help="pairs per step (B); 2B sequences")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sequence, prompt + response (512)")
    ap.add_argument("--prompt-len", type=int, default=None, help="prompt tokens of each sequence (seq / 4)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps after one warm-up (3)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lora-r", type=int, default=0, help="train a LoRA adapter of this rank")
    ap.add_argument("--gradient-checkpointing", action="store_true")
    ap.add_argument("--bf16-reference", action="store_true",
                    help="rlhf.c keeps the frozen reference in bf16 (bf16: true); TRL's stays fp32")
    ap.add_argument("--adamw-8bit", action="store_true",
                    help="optim adamw_bnb_8bit on both sides (bitsandbytes' 8-bit AdamW; pip install bitsandbytes)")
    ap.add_argument("--trl-fp32-adamw", action="store_true",
                    help="with --adamw-8bit: TRL keeps its default optimizer (adamw_torch, fp32 moments)")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 mixed precision on both sides (rlhf.c bf16: true, TRL bf16=True)")
    ap.add_argument("--unshared", action="store_true",
                    help="rlhf.c computes the prompt in both rows of a pair, as TRL does (by default once)")
    ap.add_argument("--reuse-trl", action="store_true",
                    help="take the TRL row from the last result file of the same workload instead of running it")
    ap.add_argument("--smoke", action="store_true", help="tiny model and sequences: a correctness check only")
    ap.add_argument("--trl-side", nargs=2, metavar=("MODEL_DIR", "BATCH_JSON"), help=argparse.SUPPRESS)
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from forward_bench import MODELS, add_model_argument, make_model
    add_model_argument(ap)
    a = ap.parse_args()
    if a.seq is None:
        a.seq = 64 if a.smoke else 512
    if a.prompt_len is None:
        a.prompt_len = a.seq // 4
    if a.steps is None:
        a.steps = 2 if a.smoke else 3
    if not 0 < a.prompt_len < a.seq:
        ap.error("--prompt-len must be between 1 and --seq - 1")
    if a.trl_side:
        trl_side(a.trl_side[0], a.trl_side[1], a.steps, a.threads, a.lora_r, a.gradient_checkpointing,
                 a.adamw_8bit, a.bf16)
        return

    sys.path.insert(0, os.path.join(ROOT, "bench"))
    os.makedirs(OUT, exist_ok=True)
    if a.smoke:
        make_smoke_model()
        model_dir = SMOKE_MODEL_DIR
    else:
        model_dir = make_model(a.model)
    rows = 2 * a.pairs
    credited, cfg = flops_per_step(model_dir, a.seq, rows, a.lora_r)
    batch_path = os.path.join(OUT, "dpo_step_batch.json")
    write_batch(batch_path, a.pairs, a.seq, a.prompt_len, cfg["vocab_size"], seed=1)

    exe = os.path.join(ROOT, "build", "bench", "bench_dpo_step")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    import machine_peak
    peaks = [machine_peak.measure(env)]
    sgemm = json.loads(subprocess.run([exe, "--sgemm", str(rows * a.seq), str(cfg["hidden_size"]),
                                       str(cfg["intermediate_size"])],
                                      check=True, capture_output=True, text=True, env=env).stdout)
    ours = json.loads(subprocess.run([exe, model_dir, batch_path, str(a.steps), str(a.lora_r),
                                      "1" if a.gradient_checkpointing else "0",
                                      "1" if a.bf16_reference else "0", "1" if a.adamw_8bit else "0",
                                      "1" if a.unshared else "0", "1" if a.bf16 else "0"],
                                     check=True, capture_output=True, text=True, env=env).stdout)
    name = ("dpo_step" + (f"_lora{a.lora_r}" if a.lora_r else "") + ("_gc" if a.gradient_checkpointing else "")
            + ("_bf16ref" if a.bf16_reference else "") + ("_adamw8bit" if a.adamw_8bit else "")
            + ("_vs_trl_fp32_adamw" if a.adamw_8bit and a.trl_fp32_adamw else "")
            + ("_unshared" if a.unshared else "") + ("_bf16" if a.bf16 else "")
            + ("_smoke" if a.smoke else "") + MODELS[a.model]["suffix"] + ".json")
    out_path = os.path.join(OUT, name)
    cmd = [sys.executable, __file__, "--trl-side", model_dir, batch_path, "--steps", str(a.steps),
           "--threads", str(a.threads), "--lora-r", str(a.lora_r), "--seq", str(a.seq),
           "--prompt-len", str(a.prompt_len)]
    if a.gradient_checkpointing:
        cmd.append("--gradient-checkpointing")
    if a.bf16:
        cmd.append("--bf16")
    trl_8bit = a.adamw_8bit and not a.trl_fp32_adamw
    if trl_8bit:
        cmd.append("--adamw-8bit")
    if a.reuse_trl:
        # the TRL side of the same workload from an earlier run (its file, or the fp32-reference one)
        previous = out_path if os.path.exists(out_path) else out_path.replace("_bf16ref", "")
        previous = previous.replace("_unshared", "")
        with open(previous) as f:
            theirs = json.load(f)["trl"]
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-6000:])
            sys.exit(f"TRL side failed (exit {proc.returncode})")
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])

    peaks.append(machine_peak.measure(env))
    machine = machine_peak.merge(peaks)
    peak = sgemm["peak_gflops"]
    for r in (ours, theirs):
        r["gflop_per_step_credited"] = credited * 1e-9
        r["gflops_per_s"] = credited / r["best_s"] * 1e-9
        r["mfu_vs_sgemm"] = r["gflops_per_s"] / peak
        r["mfu_vs_fp32_peak"] = r["gflops_per_s"] / machine["fp32_peak_gflops"]
        if a.bf16 and machine["bf16_peak_gflops"]:
            r["mfu_vs_bf16_peak"] = r["gflops_per_s"] / machine["bf16_peak_gflops"]
    # Sanity at the warm-up step: policy = reference, so loss = ln 2, and the same summed log-probs.
    ln2 = math.log(2.0)
    logp_tol = 1e-2 if a.bf16 else 1e-4  # bf16 products: each side's own rounding
    checks = {
        # a bf16 reference is not the fp32 policy: its summed log-probs may differ by up to 1e-2
        # under --bf16 policy and reference both run the bf16 products over the same bf16-stored
        # weights: ln 2 to the rounding of the summed log-probs
        "rlhf.c loss = ln 2": abs(ours["loss_step0"] - ln2) < (1e-3 if a.bf16 else 1e-4)
        if a.bf16 or not a.bf16_reference else ours["bf16_ref_logps_max_rel_diff"] < 1e-2,
        "TRL loss = ln 2": abs(theirs["loss_step0"] - ln2) < (1e-3 if a.bf16 else 1e-4),
        "logps/chosen agree": math.isclose(ours["logps_chosen_step0"], theirs["logps_chosen_step0"],
                                           rel_tol=logp_tol),
        "logps/rejected agree": math.isclose(ours["logps_rejected_step0"], theirs["logps_rejected_step0"],
                                             rel_tol=logp_tol),
    }
    what = f"LoRA r {a.lora_r} all-linear, reference = adapter off" if a.lora_r else \
        "full fine-tuning, reference = frozen copy" + (" (rlhf.c: kept in bf16)" if a.bf16_reference else "")
    what += ", optim adamw_bnb_8bit" if a.adamw_8bit else ", optim adamw_torch"
    if a.adamw_8bit and a.trl_fp32_adamw:
        what += " (TRL: adamw_torch, its default)"
    what += (", rlhf.c computes the shared prompt in both rows" if a.unshared
             else ", rlhf.c computes the shared prompt once")
    result = {
        "workload": f"DPO step {'bf16 mixed precision' if a.bf16 else 'fp32'} sigmoid beta {BETA} ({what}), {a.pairs} pair(s) = {rows} sequences x {a.seq} "
                    f"tokens (prompt {a.prompt_len} + response {a.seq - a.prompt_len}), {a.threads} threads"
                    + (", gradient checkpointing" if a.gradient_checkpointing else "")
                    + (" [SMOKE: tiny model, timings meaningless]" if a.smoke else ""),
        "model": model_dir, "smoke": a.smoke,
        "flops_note": ("credited per step: forward FLOPs of every matmul (lm_head at every position) and "
                       f"full-square attention over the {rows * a.seq} tokens, x{2 if a.lora_r else 3} for the "
                       "policy + x1 for the reference; rlhf.c puts only the response positions through the "
                       "lm_head, so its executed FLOPs are lower than credited"),
        "sgemm": sgemm, "machine_peak": machine, "rlhf.c": ours, "trl": theirs,
        "trl_reused_from_earlier_run": a.reuse_trl,
        "speedup": ours["tokens_per_s"] / theirs["tokens_per_s"],
        "rss_ratio": ours["peak_rss_mb"] / theirs["peak_rss_mb"],
        "sanity_step0": {"ln2": ln2, **checks},
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2)

    print(result["workload"])
    print(f"OpenBLAS sgemm peak on the model's shapes: {peak:.1f} GFLOP/s ({sgemm['threads']} threads)")
    print(f"our own fp32 GEMM ({sgemm['own_path']}) on the same shapes, same run: "
          f"{sgemm['own_peak_gflops']:.1f} GFLOP/s peak, {sgemm['own_all_gflops']:.1f} over all of them "
          f"(OpenBLAS {sgemm['all_gflops']:.1f})")
    print(machine_peak.describe(machine))
    for label, r in (("rlhf.c", ours), ("TRL", theirs)):
        print(f"{label:7s} {r['tokens_per_s']:9.1f} tokens/s  step {r['best_s']:8.3f} s  "
              f"peak RSS {r['peak_rss_mb']:7.0f} MB  {r['gflops_per_s']:7.1f} GFLOP/s  "
              f"MFU {100 * r['mfu_vs_sgemm']:5.1f}% of sgemm, {100 * r['mfu_vs_fp32_peak']:5.1f}% of the fp32 "
              f"FMA peak ({machine['fp32_peak_gflops']:.1f})"
              + (f", {100 * r['mfu_vs_bf16_peak']:5.1f}% of the bf16 peak ({machine['bf16_peak_gflops']:.1f})"
                 if "mfu_vs_bf16_peak" in r else "") + f"  trained {r['trained_params']:,}")
    print(f"rlhf.c / TRL: {result['speedup']:.2f}x tokens/s, {result['rss_ratio']:.2f}x peak RSS")
    print(f"sanity at step 0 (policy = reference): loss rlhf.c {ours['loss_step0']:.7f}, "
          f"TRL {theirs['loss_step0']:.7f}, ln 2 = {ln2:.7f}; logps/chosen rlhf.c "
          f"{ours['logps_chosen_step0']:.4f}, TRL {theirs['logps_chosen_step0']:.4f}; logps/rejected rlhf.c "
          f"{ours['logps_rejected_step0']:.4f}, TRL {theirs['logps_rejected_step0']:.4f}")
    failed = [k for k, ok in checks.items() if not ok]
    print("sanity: " + ("OK" if not failed else "FAILED: " + ", ".join(failed)))
    print(f"wrote {os.path.relpath(out_path, ROOT)}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
