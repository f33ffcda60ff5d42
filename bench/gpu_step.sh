#!/usr/bin/env bash
# rlhf.c's CUDA backend beside PyTorch eager on a lent GPU (issue 29), one run: the card's two
# ceilings (copy bandwidth, bf16 and fp32 matrix rates, measured now), then for each shape a DPO
# step (bench_backend_step_cuda and bench/gpu_torch_step.py, the same rows) and batch-1 decoding,
# then a table of ratios and MFU. rlhf.c's step runs twice, fp32 and under bf16 autocast
# (AUTOCAST 1, as `bf16: true`), beside torch's fp32 (no TF32) and bf16_autocast rows; each ratio
# compares the same precision. scripts/gpu-check.sh runs it as `bash bench/gpu_step.sh BINDIR`;
# the JSON lines go to $OUT/gpu_step.jsonl (or ./gpu-check-logs).
#
# Then a GRPO step of each shape (issue 33's: 8 prompts x 8 completions, prompt 64 tokens,
# completions 128), generation included: `bench_backend_step grpo` and `gpu_torch_step.py --grpo`,
# fp32 and bf16 autocast each, one warm-up and one timed step (about a minute in all on an H200).
#
# Shapes: Qwen2.5-0.5B and 1.5B (bench/shapes/), 8 pairs (16 rows) x 512 tokens, random weights.
set -uo pipefail
cd "$(dirname "$0")/.."
bindir=${1:-build-gpu}
bench=${GPU_STEP_BENCH:-$bindir/bench_backend_step_cuda}
[ -x "$bench" ] || bench=$bindir/bench/bench_backend_step_cuda
logs=${OUT:-$PWD/gpu-check-logs}
mkdir -p "$logs"
out=$logs/gpu_step.jsonl
: > "$out"
export PYTHONUNBUFFERED=1

timeout 60 python3 bench/gpu_torch_step.py --ceilings 2>> "$logs/gpu_step.err" | tee -a "$out"
# "shape rows seq_len steps decode_tokens", ';'-separated (GPU_STEP_SPECS overrides: a smoke
# test of this script on the CPU uses the tiny shape and bench_backend_step_emu)
IFS=';' read -ra specs <<< "${GPU_STEP_SPECS:-qwen2.5-0.5b 16 512 3 64;qwen2.5-1.5b 16 512 2 32}"
for spec in "${specs[@]}"; do
    read -r shape rows t steps decode <<< "$spec"
    cfg=bench/shapes/$shape.json
    echo "== $shape: rlhf.c (CUDA backend, fp32)"
    # then one more step op by op (bench/op_timer.h): where the time goes
    timeout 150 "$bench" "$cfg" "$rows" "$t" "$steps" "$decode" 1 2>> "$logs/gpu_step.err" |
        sed "s/^{/{\"shape\": \"$shape\", /" | tee -a "$out"
    echo "== $shape: rlhf.c (CUDA backend, bf16 autocast)"
    timeout 150 "$bench" "$cfg" "$rows" "$t" "$steps" 0 1 1 2>> "$logs/gpu_step.err" |
        sed "s/^{/{\"shape\": \"$shape\", /" | tee -a "$out"
    echo "== $shape: PyTorch eager"
    timeout 150 python3 bench/gpu_torch_step.py "$cfg" "$rows" "$t" "$steps" "$decode" \
        2>> "$logs/gpu_step.err" | sed "s/^{/{\"shape\": \"$shape\", /" | tee -a "$out"
done
# "shape prompts generations prompt_len completion_len steps", ';'-separated (GPU_STEP_GRPO_SPECS
# overrides, as GPU_STEP_SPECS)
IFS=';' read -ra specs <<< "${GPU_STEP_GRPO_SPECS:-qwen2.5-0.5b 8 8 64 128 1;qwen2.5-1.5b 8 8 64 128 1}"
for spec in "${specs[@]}"; do
    read -r shape prompts per lp lc steps <<< "$spec"
    cfg=bench/shapes/$shape.json
    for autocast in 0 1; do
        echo "== $shape: GRPO step, rlhf.c (CUDA backend, autocast $autocast)"
        timeout 120 "$bench" grpo "$cfg" "$prompts" "$per" "$lp" "$lc" "$steps" "$autocast" \
            2>> "$logs/gpu_step.err" | sed "s/^{/{\"shape\": \"$shape\", /" | tee -a "$out"
    done
    echo "== $shape: GRPO step, PyTorch eager"
    timeout 150 python3 bench/gpu_torch_step.py --grpo "$cfg" "$prompts" "$per" "$lp" "$lc" "$steps" \
        2>> "$logs/gpu_step.err" | sed "s/^{/{\"shape\": \"$shape\", /" | tee -a "$out"
done
tail -5 "$logs/gpu_step.err"

python3 - "$out" << 'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ceil = next((r for r in rows if r["bench"] == "ceilings"), {})
bf16, fp32 = ceil.get("bf16_tflop_s"), ceil.get("fp32_no_tf32_tflop_s")
copy = ceil.get("copy_tb_s")
print(f"\n{ceil.get('gpu', '?')}: copy {copy} TB/s, bf16 GEMM {bf16} TFLOP/s, fp32 (no TF32) {fp32} TFLOP/s")
print(f"{'shape':14} {'what':30} {'step s':>8} {'tok/s':>9} {'TFLOP/s':>8} {'MFU bf16':>8} {'MFU 989':>8} {'MFU fp32':>8} {'peak GB':>8} {'resv GB':>8}")
gb = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "-"
for r in rows:
    if r["bench"] != "dpo_step":
        continue
    what = r["backend"] + " " + r.get("precision", "fp32")
    tf = r["tflop_s"]
    mfu = lambda peak: f"{100 * tf / peak:.1f}%" if peak else "-"
    # peak: the device pool's high-water mark (rlhf.c) or torch.cuda.max_memory_allocated;
    # resv: the pool's cached blocks too, or max_memory_reserved
    print(f"{r['shape']:14} {what:30} {r['step_s']:8.3f} {r['tokens_per_s']:9.0f} {tf:8.1f} "
          f"{mfu(bf16):>8} {mfu(989):>8} {mfu(fp32):>8} {gb(r.get('peak_mem_gb')):>8} "
          f"{gb(r.get('peak_reserved_gb')):>8}")
# torch's precision -> rlhf.c's row of the same arithmetic
same = {"fp32_no_tf32": "fp32", "bf16_autocast": "bf16_autocast"}
for shape in sorted({r["shape"] for r in rows if "shape" in r}):
    for r in rows:
        if r.get("shape") != shape or r["bench"] != "dpo_step" or r["backend"] != "torch-eager":
            continue
        ours = next((o for o in rows if o.get("shape") == shape and o["bench"] == "dpo_step"
                     and o["backend"] != "torch-eager"
                     and o.get("precision", "fp32") == same.get(r["precision"])), None)
        if ours:
            print(f"{shape:14} rlhf.c / torch {r['precision']:15} speed ratio {r['step_s'] / ours['step_s']:.2f}x")
print(f"\n{'shape':14} {'GRPO step':30} {'gen s':>7} {'train s':>7} {'total s':>7} "
      f"{'gen tok/s':>9} {'train TFLOP/s':>13} {'torch/ours':>10}")
for r in rows:
    if r["bench"] != "grpo_step":
        continue
    what = r["backend"] + " " + r.get("precision", "fp32")
    ratio = "-"
    if r["backend"] != "torch-eager":  # torch's total over ours, the same arithmetic
        torch = next((o for o in rows if o.get("shape") == r.get("shape") and o["bench"] == "grpo_step"
                      and o["backend"] == "torch-eager"
                      and same.get(o["precision"]) == r.get("precision", "fp32")), None)
        if torch:
            ratio = f"{torch['step_s'] / r['step_s']:.2f}x"
    print(f"{r.get('shape', '?'):14} {what:30} {r['generation_s']:7.2f} {r['training_s']:7.2f} "
          f"{r['step_s']:7.2f} {r['gen_tokens_per_s']:9.0f} {r['train_tflop_s']:13.1f} {ratio:>10}")
print(f"\n{'shape':14} {'decode':30} {'ms/token':>9} {'GB/s':>8} {'of copy bw':>10}")
for r in rows:
    if r["bench"] == "decode":
        what = r["backend"] + " " + r.get("precision", "fp32")
        share = f"{100 * r['achieved_gb_s'] / (copy * 1000):.0f}%" if copy else "-"
        print(f"{r['shape']:14} {what:30} {r['ms_per_token']:9.3f} {r['achieved_gb_s']:8.0f} {share:>10}")
EOF
