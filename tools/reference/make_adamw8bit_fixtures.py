#!/usr/bin/env python3
"""8-bit AdamW fixture: transformers' Trainer with optim="adamw_bnb_8bit" (bitsandbytes' blockwise
AdamW8bit, its CPU kernels), clip_grad_norm_ and a cosine schedule, 5 steps on a tiny Llama.

The model is sized so that every rule of the 8-bit optimizer is exercised:
- tensors of at least 4096 values (q_proj exactly 4096, o_proj, the MLP, the untied lm_head) keep
  their moments as 8-bit codes in blocks of 256 values, with a partial last block (gate_proj has
  96 * 72 = 6912 values = 27 blocks);
- smaller tensors (k_proj, v_proj, the norms) keep fp32 moments (bitsandbytes' min_8bit_size);
- the embedding keeps fp32 moments although it is large (Trainer registers an optim_bits=32
  override for every nn.Embedding).

Rounding to the nearest map value: bitsandbytes has three implementations. Its CUDA kernel and
its PyTorch-native ("default") backend round each scaled moment to the nearest of the 256 values;
its native CPU library (since 2026) first snaps the value to a 65536-step grid of [-1, 1] and looks
the code up in a table, which loses every value below about 1.5e-5 of the block's absmax (the
bottom two decades of the map: a small second moment then comes back as a grid value, not itself).
We build the nearest-value rounding, so this script runs bitsandbytes' CPU optimizer step with
its quantize_blockwise taken from the default backend (found by its registration below).

Gradients are synthetic, as in make_optimizer_fixtures.py, so C makes the same ones:
    g = float32(sin(0.37 * (i + 1) + 1.3 * k + 0.11 * j)) * SCALES[k]

Writes tests/fixtures/optimizer/adamw8bit/: model/ (config.json + model.safetensors, the start),
case.json (hyper-parameters, per-step lr and grad_norm, which tensors are 8-bit), after.safetensors
(the parameters after the last step and, for 8-bit tensors, state1/state2 codes and absmax1/absmax2,
and the two quantisation maps qmap1/qmap2).

    tools/reference/.venv/bin/python tools/reference/make_adamw8bit_fixtures.py
"""
import gc
import inspect
import json
import os
import sys
import tempfile

import bitsandbytes
import torch
import transformers
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402
from make_optimizer_fixtures import SCALES, train_synthetic  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "optimizer", "adamw8bit")
CASE = dict(lr=2e-2, weight_decay=0.1, schedule="cosine", warmup_steps=1, max_grad_norm=1.0,
            betas=(0.9, 0.999), eps=1e-8, steps=5)


def default_backend_quantize():
    """bitsandbytes' PyTorch-native quantize_blockwise (registered for the "default" backend under
    the name `_`, so found among the module's functions by its registration line)."""
    import bitsandbytes.backends.default.ops as default_ops
    for f in gc.get_objects():
        if inspect.isfunction(f) and f.__code__.co_filename == default_ops.__file__:
            src = inspect.getsource(f)
            if '"bitsandbytes::quantize_blockwise", "default"' in src:
                return f
    raise RuntimeError("bitsandbytes' default quantize_blockwise not found")


def use_nearest_rounding():
    import bitsandbytes.backends.cpu.ops as cpu_ops
    quantize = default_backend_quantize()

    def quant_nearest(a, code, absmax_out, out_uint8, blocksize):
        out, absmax = quantize(a, code, blocksize)
        out_uint8.copy_(out)
        absmax_out.copy_(absmax)

    cpu_ops._quant_blockwise_fp32_direct = quant_nearest


def build_model():
    config = LlamaConfig(vocab_size=160, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                         **mf.rope_kwargs(LlamaConfig, 10000.0, None))
    model = mf.make_model(LlamaForCausalLM, config)
    mf.reinit_weights(model, seed=81)
    return model


def trainer_optimizer(model, tmp):
    args = TrainingArguments(output_dir=tmp, optim="adamw_bnb_8bit", learning_rate=CASE["lr"],
                             weight_decay=CASE["weight_decay"], adam_beta1=CASE["betas"][0],
                             adam_beta2=CASE["betas"][1], adam_epsilon=CASE["eps"], use_cpu=True,
                             report_to=[])
    trainer = Trainer(model=model, args=args)
    return trainer.create_optimizer()


def main():
    use_nearest_rounding()
    model = build_model()
    model_dir = os.path.join(OUT, "model")
    mf.clean_dir(OUT)
    model.save_pretrained(model_dir)
    mf.prune_saved_files(model_dir)

    with tempfile.TemporaryDirectory() as tmp:
        opt = trainer_optimizer(model, tmp)
    names = [n for n, _ in model.named_parameters()]
    params = [p for _, p in model.named_parameters()]
    total = CASE["steps"]
    sched = transformers.get_scheduler(CASE["schedule"], opt, num_warmup_steps=CASE["warmup_steps"],
                                       num_training_steps=total)
    lrs, norms = train_synthetic(params, opt, sched, total, CASE["max_grad_norm"])

    tensors = {n: p.detach().contiguous() for n, p in zip(names, params)}
    eight_bit = []
    for n, p in zip(names, params):
        st = opt.state[p]
        if st["state1"].dtype != torch.uint8:
            continue
        eight_bit.append(n)
        for key in ("state1", "state2", "absmax1", "absmax2"):
            tensors[f"{key}.{n}"] = st[key].contiguous()
        tensors["qmap1"], tensors["qmap2"] = st["qmap1"].clone(), st["qmap2"].clone()
    save_file(tensors, os.path.join(OUT, "after.safetensors"), metadata={"format": "pt"})
    decay = [n for g in opt.param_groups if g["weight_decay"] > 0 for n, p in zip(names, params)
             if any(p is q for q in g["params"])]
    meta = dict(CASE, betas=list(CASE["betas"]), param_names=names, decay_names=sorted(decay),
                eight_bit_names=eight_bit, lr_per_step=lrs, grad_norm_per_step=norms, scales=SCALES,
                torch_version=torch.__version__, transformers_version=transformers.__version__,
                bitsandbytes_version=bitsandbytes.__version__)
    with open(os.path.join(OUT, "case.json"), "w") as f:
        json.dump(meta, f, indent=1)
    for f in os.listdir(OUT):
        if os.path.isfile(os.path.join(OUT, f)):
            os.chmod(os.path.join(OUT, f), 0o644)
    print(f"8-bit moments: {eight_bit}")
    print(f"fp32 moments: {[n for n in names if n not in eight_bit]}")
    print(f"lr {['%.3g' % x for x in lrs]}, grad_norm {['%.3g' % x for x in norms]}")


if __name__ == "__main__":
    main()
