#!/usr/bin/env python3
"""A LoRA r16 DPO step on a Qwen2.5-7B-shaped model (issue 33): peak RSS and seconds per step of
`rlhf train` over a frozen bf16 base (`adapter: lora, bf16: true`) and under QLoRA (`adapter:
qlora, load_in_4bit: true`), one run at a time.

The model: Qwen2.5-7B's config.json (hidden 3584, 28 layers, 28/4 heads, intermediate 18944,
vocab 152064, untied lm_head, q/k/v biases), random N(0, 0.02) weights made with torch in bf16
and written straight to safetensors shards (about 2 GB each, one shard in memory at a time) with
a model.safetensors.index.json, as the hub ships 7B checkpoints: 15.2 GB on disk. Made once
under --dir (default /tmp/bench33/qwen2.5-7b-random); --delete removes it at the end.

The run: `rlhf train` on a generated YAML, rl: dpo (sigmoid, beta 0.1), one pair a step
(--prompt-tokens prompt + --response-tokens chosen / rejected, exact token counts of the
repository's qwen2_bytelevel tokenizer fixture, whose ids fall inside Qwen's vocabulary),
LoRA r 16, alpha 32 on every linear layer, the reference = the base with the adapter off,
AdamW, --steps steps. A step's wall and CPU seconds are taken between the appearances of
metrics.jsonl's lines (the first from the log's "training" line); peak RSS both as `rlhf train`
reports it and as this script reads the child's VmHWM from /proc while it runs (its last
reading). The memory plan `rlhf train` prints at start is kept in the result.

    /work/venv-ref/bin/python bench/lora_7b_bench.py --mode qlora [--steps 2] [--delete]
    /work/venv-ref/bin/python bench/lora_7b_bench.py --mode bf16

Writes bench/out/lora_7b_<mode>.json and its log bench/out/lora_7b_<mode>.log."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "out")
TOKENIZER_DIR = os.path.join(ROOT, "tests/fixtures/tokenizers/qwen2_bytelevel")

# Qwen/Qwen2.5-7B's config.json (the fields a Qwen2ForCausalLM reads)
QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
    "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "hidden_act": "silu", "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
    "initializer_range": 0.02, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28,
}
# Qwen/Qwen2.5-0.5B's, untied as the 7B's is (the 0.5B ties its lm_head to the embedding, which
# would hide the embedding's saving): a small shape to check memory savings on before the 7B
QWEN25_05B_UNTIED = dict(QWEN25_7B, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, sliding_window=32768,
                         max_window_layers=21)
SHAPES = {"7b": QWEN25_7B, "0.5b": QWEN25_05B_UNTIED}
SHARD_BYTES = 2 << 30


def tensor_shapes(c):
    """(name, shape) of every tensor of a Qwen2 checkpoint, in the hub's order."""
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    kv = h // c["num_attention_heads"] * c["num_key_value_heads"]
    yield "model.embed_tokens.weight", (v, h)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        yield p + "input_layernorm.weight", (h,)
        yield p + "self_attn.q_proj.weight", (h, h)
        yield p + "self_attn.q_proj.bias", (h,)
        yield p + "self_attn.k_proj.weight", (kv, h)
        yield p + "self_attn.k_proj.bias", (kv,)
        yield p + "self_attn.v_proj.weight", (kv, h)
        yield p + "self_attn.v_proj.bias", (kv,)
        yield p + "self_attn.o_proj.weight", (h, h)
        yield p + "post_attention_layernorm.weight", (h,)
        yield p + "mlp.gate_proj.weight", (i, h)
        yield p + "mlp.up_proj.weight", (i, h)
        yield p + "mlp.down_proj.weight", (h, i)
    yield "model.norm.weight", (h,)
    yield "lm_head.weight", (v, h)


def make_model(path, config):
    """The random bf16 checkpoint of config at path, written shard by shard (made once)."""
    if os.path.exists(os.path.join(path, "model.safetensors.index.json")):
        return
    import torch
    from safetensors.torch import save_file
    os.makedirs(path, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    shapes = list(tensor_shapes(config))
    n_shards, size = 1, 0
    for _, shape in shapes:  # huggingface_hub's split: fill a shard until the next tensor overflows it
        nbytes = 2 * torch.Size(shape).numel()
        if size and size + nbytes > SHARD_BYTES:
            n_shards, size = n_shards + 1, 0
        size += nbytes
    weight_map, shard, size, index, total = {}, {}, 0, 1, 0

    def flush():
        name = f"model-{index:05d}-of-{n_shards:05d}.safetensors"
        tmp = os.path.join(path, name + ".tmp")
        save_file(shard, tmp, metadata={"format": "pt"})
        os.replace(tmp, os.path.join(path, name))
        for k in shard:
            weight_map[k] = name
        print(f"  wrote {name} ({size / 2**30:.2f} GiB)", flush=True)

    t0 = time.perf_counter()
    for name, shape in shapes:
        nbytes = 2 * torch.Size(shape).numel()
        if shard and size + nbytes > SHARD_BYTES:
            flush()
            shard, size, index = {}, 0, index + 1
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            t = torch.ones(shape, dtype=torch.bfloat16)
        else:
            t = torch.empty(shape, dtype=torch.bfloat16).normal_(0.0, 0.02, generator=gen)
        shard[name] = t
        size += nbytes
        total += nbytes
    flush()
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    print(f"made {path}: {total / 1e9:.2f} GB in {time.perf_counter() - t0:.0f} s", flush=True)


def text_of_tokens(tok, n, seed_word):
    """A text of exactly n tokens of tok (words appended until the count is reached, the last
    one cut), so both sides of a comparison have the lengths asked for."""
    words = [seed_word, "river", "stone", "light", "number", "seven", "alpha", "gamma", "delta"]
    text, k = "", 0
    while len(tok(text, add_special_tokens=False)["input_ids"]) < n:
        text += " " + words[k % len(words)]
        k += 1
    ids = tok(text, add_special_tokens=False)["input_ids"][:n]
    out = tok.decode(ids)
    if len(tok(out, add_special_tokens=False)["input_ids"]) != n:
        sys.exit(f"could not make a text of exactly {n} tokens")
    return out


def write_pairs(path, a):
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    row = {"prompt": text_of_tokens(tok, a.prompt_tokens, "question"),
           "chosen": text_of_tokens(tok, a.response_tokens, " yes"),
           "rejected": text_of_tokens(tok, a.response_tokens, " no")}
    with open(path, "w") as f:
        for _ in range(a.steps):
            f.write(json.dumps(row) + "\n")


def process_cpu_s(pid):
    """User + system CPU seconds of process pid so far (/proc/PID/stat); None when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def name(a):
    return (a.mode + ("_fp32" if a.no_bf16 else "") + ("" if a.shape == "7b" else "_" + a.shape)
            + ("_nockpt" if a.no_gradient_checkpointing else "") + (a.tag and "_" + a.tag))


def run_rlhf(a, model_dir, pairs, work):
    mode = ("adapter: qlora\nload_in_4bit: true\n" if a.mode == "qlora" else "adapter: lora\n")
    config = os.path.join(work, f"dpo_{name(a)}.yaml")
    out_dir = os.path.join(work, f"out_{name(a)}")
    shutil.rmtree(out_dir, ignore_errors=True)
    with open(config, "w") as f:
        f.write(f"""base_model: {model_dir}
tokenizer_config: {TOKENIZER_DIR}
rl: dpo
rl_beta: 0.1
datasets:
  - path: {pairs}
sequence_len: {a.prompt_tokens + a.response_tokens}
micro_batch_size: 1
gradient_accumulation_steps: 1
max_steps: {a.steps}
learning_rate: 1e-4
lr_scheduler: constant
warmup_steps: 0
bf16: {'false' if a.no_bf16 else 'true'}
{mode}lora_r: 16
lora_alpha: 32
lora_target_linear: true
output_dir: {out_dir}
logging_steps: 1
seed: 0
gradient_checkpointing: {'false' if a.no_gradient_checkpointing else 'true'}
""")
    log_path = os.path.join(OUT, f"lora_7b_{name(a)}.log")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    hwm_mb, t0 = 0.0, time.perf_counter()
    # metrics.jsonl holds no step time for DPO: each step's is the time between its line and the
    # line before (the first step's from the moment training starts, the log's "training" line)
    metrics_path = os.path.join(out_dir, "metrics.jsonl")
    seen, marks, cpu = 0, [], []
    with open(log_path, "w") as log:
        proc = subprocess.Popen([a.rlhf, "train", config], stdout=log,
                                stderr=subprocess.STDOUT, env=env)
        while proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            hwm_mb = max(hwm_mb, int(line.split()[1]) / 1024)
            except OSError:
                pass
            if not marks and "\ntraining " in open(log_path).read():
                marks.append(time.perf_counter())
                cpu.append(process_cpu_s(proc.pid))
            if os.path.exists(metrics_path):
                with open(metrics_path) as f:
                    lines = sum(1 for _ in f)
                if lines > seen:
                    seen = lines
                    marks.append(time.perf_counter())
                    cpu.append(process_cpu_s(proc.pid))
            time.sleep(0.2)
    wall = time.perf_counter() - t0
    text = open(log_path).read()
    if proc.returncode != 0:
        sys.exit(f"rlhf train failed (exit {proc.returncode}); its log: {log_path}\n{text[-3000:]}")
    peak = re.search(r"peak memory (\d+) MB", text)
    plan = re.search(r"memory plan: .*", text)
    metrics = [json.loads(line) for line in open(os.path.join(out_dir, "metrics.jsonl"))]
    steps = [{k: m.get(k) for k in ("step", "loss", "num_tokens")} for m in metrics]
    for i, st in enumerate(steps):  # a step's wall and CPU seconds, where both marks were seen
        if i + 1 < len(marks):
            st["step_s"] = marks[i + 1] - marks[i]
            if cpu[i] is not None and cpu[i + 1] is not None:
                st["step_cpu_s"] = cpu[i + 1] - cpu[i]
    return {"steps": steps,
            "peak_rss_mb_reported": int(peak.group(1)) if peak else None,
            "peak_rss_mb_vmhwm_polled": hwm_mb, "memory_plan": plan.group(0) if plan else None,
            "wall_s_including_load": wall, "log": os.path.relpath(log_path, ROOT)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("qlora", "bf16"), required=True)
    ap.add_argument("--dir", default=None, help="default /tmp/bench33/qwen2.5-7b-random")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--response-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--no-bf16", action="store_true",
                    help="qlora mode: bf16: false (fp32 products over the dequantised NF4 base)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="7b",
                    help="0.5b: Qwen2.5-0.5B's shape with an untied lm_head (default dir "
                         "/tmp/bench33/qwen2.5-0.5b-untied-random)")
    ap.add_argument("--no-gradient-checkpointing", action="store_true",
                    help="gradient_checkpointing: false (default true, as Axolotl's LoRA/QLoRA "
                         "examples set it)")
    ap.add_argument("--rlhf", default=os.path.join(ROOT, "build", "rlhf"),
                    help="the rlhf binary (another build's, to compare in one run)")
    ap.add_argument("--tag", default="", help="appended to the output files' names")
    ap.add_argument("--make-only", action="store_true", help="write the model and stop")
    ap.add_argument("--delete", action="store_true", help="remove the model directory at the end")
    a = ap.parse_args()
    if a.no_bf16 and a.mode != "qlora":
        ap.error("--no-bf16 is for --mode qlora (a LoRA base is kept in bf16 only with bf16: true)")
    if a.dir is None:
        a.dir = ("/tmp/bench33/qwen2.5-7b-random" if a.shape == "7b"
                 else "/tmp/bench33/qwen2.5-0.5b-untied-random")
    make_model(a.dir, SHAPES[a.shape])
    if a.make_only:
        return
    os.makedirs(OUT, exist_ok=True)
    work = os.path.join(os.path.dirname(a.dir), "work")
    os.makedirs(work, exist_ok=True)
    pairs = os.path.join(work, "pairs.jsonl")
    write_pairs(pairs, a)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    result = {"workload": f"DPO (sigmoid, beta 0.1), LoRA r16 alpha 32 all-linear, "
                          f"bf16: {'false' if a.no_bf16 else 'true'}, "
                          f"{'QLoRA (NF4 base)' if a.mode == 'qlora' else 'frozen bf16 base'}, 1 pair of "
                          f"{a.prompt_tokens} + {a.response_tokens} tokens a step, {a.steps} steps, "
                          f"{a.threads} threads",
              "model": ("Qwen2.5-7B-shaped" if a.shape == "7b" else
                        "Qwen2.5-0.5B-shaped, untied lm_head") + ", random bf16 weights",
              "gradient_checkpointing": not a.no_gradient_checkpointing, "rlhf": a.rlhf,
              "load_average_at_start": load}
    result.update(run_rlhf(a, a.dir, pairs, work))
    with open("/proc/loadavg") as f:
        result["load_average_at_end"] = f.read().split()[:3]
    out_path = os.path.join(OUT, f"lora_7b_{name(a)}.json")
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result, indent=1))
    if a.delete:
        shutil.rmtree(os.path.dirname(a.dir), ignore_errors=True)


if __name__ == "__main__":
    main()
