"""The PyTorch side of bench/gpu_step.sh (issue 29): the machine's two ceilings, then the same DPO
step and batch-1 decoding that bench_backend_step times, in PyTorch eager with transformers, on
the same shapes (bench/shapes/*.json), in one run.

The step is what TRL's DPOTrainer computes for a full fine-tune (concatenated chosen/rejected
rows, selective log-softmax of the labels over full logits, the reference's log-probs under
no_grad, sigmoid loss, backward, clip_grad_norm_, AdamW), written out here because the device
machine has no TRL and reaches no registry; the reference is the policy's own weights, as in
bench_backend_step. Two precisions: fp32 with TF32 off (the arithmetic rlhf.c's CUDA backend
does today) and bf16 autocast over fp32 weights (what `bf16: true` gives a TRL user).

Timing follows the device's METHOD.md: warm-up first, torch.cuda.synchronize around host
timers for whole steps, CUDA events (median of repeats) for the ceilings, random data.
Prints one JSON line per measurement.

The GRPO step (--grpo, beside bench_backend_step's grpo mode): model.generate (temperature-1
sampling over the whole vocabulary, top_k 0 as TRL's default, a KV cache, every prompt repeated
GENERATIONS times, exactly COMPLETION_LEN new tokens), then what TRL 1.9's GRPOTrainer computes
for that generation batch with num_iterations 1: random rewards and group-normalised advantages,
the reference's log-probs under no_grad and the policy's with entropies (logits_to_keep: only the
completion's positions through the lm_head), the dapo loss (TRL's default; epsilon 0.2, beta 0.04
so that the reference is read), backward, clip_grad_norm_, AdamW. One warm-up step first, whose
generation stops after 8 tokens.

Usage: python3 gpu_torch_step.py CONFIG_JSON ROWS SEQ_LEN STEPS DECODE_TOKENS [--ceilings]
       python3 gpu_torch_step.py --grpo CONFIG_JSON PROMPTS GENERATIONS PROMPT_LEN COMPLETION_LEN STEPS
"""

import json
import math
import statistics
import sys
import time

import torch

# The device; cpu only to smoke-test this script on a machine without a GPU (tiny shape).
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def ceilings():
    """The copy bandwidth (bytes read + written) and the fp32/bf16 matrix rates, measured."""
    dev = "cuda"
    n = 1 << 30  # bytes per buffer (1 GiB): far past the L2
    a = torch.rand(n // 4, device=dev)
    b = torch.empty_like(a)
    times = []
    for i in range(12):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        if i >= 2:
            times.append(s.elapsed_time(e) / 1e3)
    copy_tb_s = 2 * n / statistics.median(times) / 1e12
    del a, b
    out = {"bench": "ceilings", "gpu": torch.cuda.get_device_name(), "copy_tb_s": round(copy_tb_s, 3)}
    for name, dtype, tf32 in (("bf16", torch.bfloat16, False), ("fp32_no_tf32", torch.float32, False)):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        m = 8192
        xs = [torch.randn(m, m, device=dev, dtype=dtype) for _ in range(4)]  # rotate: no cache reuse
        ys = [torch.randn(m, m, device=dev, dtype=dtype) for _ in range(4)]
        times = []
        reps = 20 if dtype == torch.bfloat16 else 6
        for i in range(reps + 3):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            xs[i % 4] @ ys[(i + 1) % 4]
            e.record()
            torch.cuda.synchronize()
            if i >= 3:
                times.append(s.elapsed_time(e) / 1e3)
        out[name + "_tflop_s"] = round(2 * m**3 / statistics.median(times) / 1e12, 1)
        del xs, ys
    torch.cuda.empty_cache()
    print(json.dumps(out), flush=True)


def flops_per_token(cfg, t):
    """bench_backend_step's count: 2 FLOPs per matrix parameter (lm_head once) plus causal
    attention (QK^T and PV over T/2 keys on average), per token of one forward."""
    hd = cfg.hidden_size // cfg.num_attention_heads
    h, i = cfg.hidden_size, cfg.intermediate_size
    attn = h * cfg.num_attention_heads * hd * 2 + h * cfg.num_key_value_heads * hd * 2
    params = cfg.num_hidden_layers * (attn + 3 * h * i) + cfg.vocab_size * h
    return 2 * params + cfg.num_hidden_layers * 4 * (t / 2) * cfg.num_attention_heads * hd


def selective_log_softmax(logits, index):
    """TRL's selective_log_softmax for fp32/bf16 logits: gather minus logsumexp, row by row."""
    logsumexp = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
    return torch.gather(logits, -1, index.unsqueeze(-1)).squeeze(-1) - logsumexp


def completion_logps(model, ids, mask):
    logits = model(input_ids=ids).logits[:, :-1]
    per_token = selective_log_softmax(logits, ids[:, 1:])
    return (per_token * mask[:, 1:]).sum(-1)


def dpo_step(model, opt, ids, mask, autocast):
    with torch.autocast(DEV, dtype=torch.bfloat16, enabled=autocast):
        with torch.no_grad():
            ref = completion_logps(model, ids, mask)
        pol = completion_logps(model, ids, mask)
    margin = (pol[0::2] - ref[0::2]) - (pol[1::2] - ref[1::2])
    loss = -torch.nn.functional.logsigmoid(0.1 * margin).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def load_model(config_path):
    """A model of the config's shape, random fp32 weights, on DEV."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(config_path) as f:
        fields = json.load(f)
    cfg = AutoConfig.for_model(fields.pop("model_type"), **fields)
    cfg.dtype = torch.float32
    torch.manual_seed(0)
    with torch.device(DEV):
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").float()
    return cfg, model


def entropy_from_logits(logits, chunk_size=128):
    """TRL's entropy_from_logits: the softmax's entropy of each row, in chunks of rows."""
    flat = logits.reshape(-1, logits.size(-1))
    out = [-(torch.exp(lp) * lp).sum(-1) for lp in
           (torch.log_softmax(c, dim=-1) for c in flat.split(chunk_size))]
    return torch.cat(out).reshape(logits.shape[:-1])


def grpo_logps(model, ids, completion_len, entropies):
    """TRL's _get_per_token_logps_and_entropies (temperature 1): logits of the completion's
    positions only, selective log-softmax of its tokens, and (policy) their entropies."""
    logits = model(input_ids=ids, logits_to_keep=completion_len + 1).logits[:, :-1]
    logps = selective_log_softmax(logits, ids[:, -completion_len:])
    ent = None
    if entropies:
        with torch.no_grad():
            ent = entropy_from_logits(logits)
    return logps, ent


def grpo_train(model, opt, ids, prompts, per, completion_len, autocast, beta=0.04, eps=0.2):
    """The training part of a GRPO step on one generation batch (rows grouped by prompt)."""
    rows = ids.size(0)
    rewards = torch.rand(rows, device=DEV)
    grouped = rewards.view(prompts, per)
    adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(rows, 1)
    mask = torch.ones(rows, completion_len, device=DEV)
    with torch.autocast(DEV, dtype=torch.bfloat16, enabled=autocast):
        with torch.no_grad():
            ref, _ = grpo_logps(model, ids, completion_len, False)
        logps, _ent = grpo_logps(model, ids, completion_len, True)
    ratio = torch.exp(logps - logps.detach())  # num_iterations 1: old = current, detached
    per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - eps, 1 + eps) * adv)
    d = ref - logps
    per_token = per_token + beta * (torch.exp(d) - d - 1)
    loss = (per_token * mask).sum() / mask.sum()  # dapo: over the generation batch's tokens
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def bench_grpo(config_path, prompts, per, prompt_len, completion_len, steps):
    cfg, model = load_model(config_path)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0, fused=DEV == "cuda")
    rows, t = prompts * per, prompt_len + completion_len
    flops = flops_per_token(cfg, t) * rows * t * 4  # reference 1, policy 1, backward 2
    prompt_ids = torch.randint(0, cfg.vocab_size, (prompts, prompt_len), device=DEV)
    warm_completion = torch.randint(0, cfg.vocab_size, (rows, completion_len), device=DEV)
    for precision, autocast in (("fp32_no_tf32", False), ("bf16_autocast", True)):
        if DEV == "cuda":  # each precision's own high-water mark (the model and moments stay)
            torch.cuda.reset_peak_memory_stats()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        gens, trains = [], []
        for s in range(steps + 1):  # step 0 warms up, its generation short
            n_new = 8 if s == 0 and completion_len > 8 else completion_len
            model.eval()  # TRL generates in eval mode (no dropout: Qwen2 has none anyway)
            sync()
            t0 = time.perf_counter()
            with torch.no_grad(), torch.autocast(DEV, dtype=torch.bfloat16, enabled=autocast):
                out = model.generate(input_ids=prompt_ids, attention_mask=torch.ones_like(prompt_ids),
                                     do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=n_new, min_new_tokens=n_new,
                                     num_return_sequences=per, use_cache=True,
                                     pad_token_id=0)
            sync()
            t1 = time.perf_counter()
            if out.size(1) != prompt_len + n_new:
                raise SystemExit(f"generate returned {out.size(1) - prompt_len} tokens, not {n_new}")
            ids = out if n_new == completion_len else torch.cat([out[:, :prompt_len], warm_completion], 1)
            model.train()
            loss = grpo_train(model, opt, ids, prompts, per, completion_len, autocast)
            sync()
            t2 = time.perf_counter()
            if s > 0:
                gens.append(t1 - t0)
                trains.append(t2 - t1)
        gen, train = statistics.median(gens), statistics.median(trains)
        print(json.dumps({"bench": "grpo_step", "backend": "torch-eager", "precision": precision,
                          "config": config_path, "prompts": prompts, "generations": per,
                          "prompt_len": prompt_len, "completion_len": completion_len,
                          "params": n_params, "generation_s": round(gen, 4),
                          "training_s": round(train, 4), "step_s": round(gen + train, 4),
                          "gen_tokens_per_s": round(rows * completion_len / gen, 1),
                          "train_tokens_per_s": round(rows * t / train, 1),
                          "tflop_per_train": round(flops / 1e12, 3),
                          "train_tflop_s": round(flops / train / 1e12, 2), "loss": loss.item(),
                          "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 1)
                          if DEV == "cuda" else None}), flush=True)


def bench_model(config_path, rows, t, steps, decode_tokens):
    cfg, model = load_model(config_path)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6, weight_decay=0.0, fused=DEV == "cuda")
    ids = torch.randint(0, cfg.vocab_size, (rows, t), device=DEV)
    mask = torch.zeros(rows, t, device=DEV)
    mask[:, t // 2:] = 1
    flops = flops_per_token(cfg, t) * rows * t * 4  # reference 1, policy 1, backward 2
    for precision, autocast in (("fp32_no_tf32", False), ("bf16_autocast", True)):
        if DEV == "cuda":  # each precision's own high-water mark (the model and moments stay)
            torch.cuda.reset_peak_memory_stats()
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model.train()
        times = []
        for s in range(steps + 1):
            sync()
            t0 = time.perf_counter()
            loss = dpo_step(model, opt, ids, mask, autocast)
            sync()
            if s > 0:
                times.append(time.perf_counter() - t0)
        step = statistics.median(times)
        print(json.dumps({"bench": "dpo_step", "backend": "torch-eager", "precision": precision,
                          "config": config_path, "rows": rows, "seq_len": t, "params": n_params,
                          "step_s": round(step, 4), "tokens_per_s": round(rows * t / step, 1),
                          "tflop_per_step": round(flops / 1e12, 3),
                          "tflop_s": round(flops / step / 1e12, 2), "loss": loss.item(),
                          "peak_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 3)
                          if DEV == "cuda" else None,
                          "peak_reserved_gb": round(torch.cuda.max_memory_reserved() / 1e9, 3)
                          if DEV == "cuda" else None}),
              flush=True)
    opt = None
    if DEV == "cuda":
        torch.cuda.empty_cache()
    if decode_tokens > 0:
        model.eval()
        for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            model.to(dtype)
            prompt = torch.randint(0, cfg.vocab_size, (1, 32), device=DEV)
            with torch.no_grad():
                out = model(input_ids=prompt, use_cache=True)
                past = out.past_key_values
                warm = 4
                for i in range(decode_tokens):
                    if i == warm:
                        sync()
                        t0 = time.perf_counter()
                    nxt = torch.randint(0, cfg.vocab_size, (1, 1), device=DEV)
                    out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                    past = out.past_key_values
                    out.logits.float().cpu()  # the logits reach the host, as in rlhf.c's loop
                sync()
            per = (time.perf_counter() - t0) / (decode_tokens - warm)
            weight_bytes = (flops_per_token(cfg, 0) / 2 + cfg.hidden_size) * (4 if dtype == torch.float32 else 2)
            print(json.dumps({"bench": "decode", "backend": "torch-eager", "precision": precision,
                              "ms_per_token": round(per * 1e3, 4), "tokens_per_s": round(1 / per, 1),
                              "weight_gb_per_token": round(weight_bytes / 1e9, 4),
                              "achieved_gb_s": round(weight_bytes / per / 1e9, 1)}), flush=True)
    del model


def main():
    if "--ceilings" in sys.argv:
        ceilings()
        return
    if sys.argv[1] == "--grpo":
        bench_grpo(sys.argv[2], *map(int, sys.argv[3:8]))
        return
    config_path, rows, t, steps, decode_tokens = sys.argv[1], *map(int, sys.argv[2:6])
    bench_model(config_path, rows, t, steps, decode_tokens)


if __name__ == "__main__":
    main()
