#!/usr/bin/env python3
"""Generation throughput, rlhf.c vs transformers generate() (PyTorch, CPU), in one run: prefill and
decode tokens/s at batch 1, 8 and 64 on the Qwen2.5-0.5B-shaped random model (forward_bench.py),
greedy, fp32, prompts of --prompt-len random tokens, --new-tokens new tokens (no eos). The batch-1
row also gives the memory-bandwidth floor for decoding (fp32 weight bytes per token / measured read
bandwidth). Writes bench/out/generate.json.

    tools/reference/.venv/bin/python bench/generate_bench.py [--prompt-len 128] [--new-tokens 32]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from forward_bench import MODELS, add_model_argument, make_model  # noqa: E402


class StepClock(transformers.LogitsProcessor):
    """Notes the time of each generation step: generate() calls it with every step's logits, right
    after that step's forward pass."""

    def __init__(self):
        self.times = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def torch_side(model, batch, plen, new, threads):
    """Prefill: from the call to the first step's logits; decode: from there to the last step's,
    over new - 1 steps. Timed inside one run, as bench_generate times its steps (the difference of
    a 1-token and a full run carries all the noise of the much longer prefill)."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, model.config.vocab_size, (batch, plen), generator=g)
    mask = torch.ones_like(ids)

    def run():
        clock = StepClock()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, pad_token_id=0, top_k=None, top_p=None, temperature=None,
                           logits_processor=transformers.LogitsProcessorList([clock]))
        assert len(clock.times) == new
        return clock.times[0] - start, clock.times[-1] - clock.times[0]

    run()  # warm-up of the timed length, as bench_generate's
    t_prefill, t_decode = run()
    return {"impl": "transformers", "prefill_tokens_per_s": batch * plen / t_prefill,
            "decode_tokens_per_s": batch * (new - 1) / t_decode}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--bf16", action="store_true",
                    help="rlhf.c keeps the weights in bf16 (generate --bf16); transformers runs in fp32 "
                         "and again in bf16 (torch_dtype=bfloat16: bf16 arithmetic throughout)")
    add_model_argument(ap)
    a = ap.parse_args()
    model_dir = make_model(a.model)
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model16 = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval() \
        if a.bf16 else None
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    rows = []
    for batch in [int(b) for b in a.batches.split(",")]:
        ours = json.loads(subprocess.run([os.path.join(ROOT, "build", "bench", "bench_generate"), model_dir,
                                          str(batch), str(a.prompt_len), str(a.new_tokens)]
                                         + (["bf16"] if a.bf16 else []),
                                         check=True, capture_output=True, text=True, env=env).stdout)
        theirs = torch_side(model, batch, a.prompt_len, a.new_tokens, a.threads)
        rows.append({"batch": batch, "rlhf.c": ours, "transformers": theirs,
                     "prefill_speedup": ours["prefill_tokens_per_s"] / theirs["prefill_tokens_per_s"],
                     "decode_speedup": ours["decode_tokens_per_s"] / theirs["decode_tokens_per_s"]})
        r = rows[-1]
        if model16 is not None:
            r["transformers_bf16"] = torch_side(model16, batch, a.prompt_len, a.new_tokens, a.threads)
            r["decode_speedup_vs_bf16"] = ours["decode_tokens_per_s"] / r["transformers_bf16"]["decode_tokens_per_s"]
            r["prefill_speedup_vs_bf16"] = ours["prefill_tokens_per_s"] / r["transformers_bf16"]["prefill_tokens_per_s"]
        floor = f"  (bandwidth floor {ours['decode_floor_tokens_per_s']:.1f} tok/s at {ours['read_bandwidth_gb_s']:.1f} GB/s)" \
            if batch == 1 else ""
        print(f"batch {batch:3d}: prefill {ours['prefill_tokens_per_s']:8.1f} vs {theirs['prefill_tokens_per_s']:8.1f} "
              f"tok/s ({r['prefill_speedup']:.2f}x); decode {ours['decode_tokens_per_s']:7.2f} vs "
              f"{theirs['decode_tokens_per_s']:7.2f} tok/s ({r['decode_speedup']:.2f}x){floor}", flush=True)
        if model16 is not None:
            t16 = r["transformers_bf16"]
            print(f"  vs transformers bf16: prefill {t16['prefill_tokens_per_s']:8.1f} tok/s "
                  f"({r['prefill_speedup_vs_bf16']:.2f}x); decode {t16['decode_tokens_per_s']:7.2f} tok/s "
                  f"({r['decode_speedup_vs_bf16']:.2f}x)", flush=True)
    os.makedirs(os.path.join(ROOT, "bench", "out"), exist_ok=True)
    name = ("generate_bf16" if a.bf16 else "generate") + MODELS[a.model]["suffix"] + ".json"
    with open(os.path.join(ROOT, "bench", "out", name), "w") as f:
        json.dump({"model": MODELS[a.model]["desc"], "rlhf.c weights": "bf16" if a.bf16 else "fp32", "prompt_len": a.prompt_len, "new_tokens": a.new_tokens, "threads": a.threads, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
