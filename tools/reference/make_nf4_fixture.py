#!/usr/bin/env python3
"""NF4 (QLoRA) quantisation fixture: bitsandbytes' quantize_4bit on the CPU, as transformers'
BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)
quantises each nn.Linear weight at load (bnb.nn.Params4bit._quantize: blocksize 64,
compress_statistics=True), and its dequantize_4bit.

Cases (each a weight matrix as nn.Linear holds it, quantised from float32 values):
- "wide":   60 x 320 = 300 blocks of 64, so the absmax double quantisation has two blocks of 256
            (the second partial); one row block all zero (absmax 0), one row scaled up 1000x;
- "ragged": 5 x 50 = 250 values, a partial last block of 58 (bitsandbytes divides by that block's
            absmax instead of multiplying by its reciprocal), with values whose code tells the two
            apart;
- "ties":   2 x 64 values exactly on the midpoints between NF4 values (times an absmax of 2);
- "bf16":   64 x 128 values rounded to bfloat16 first (a checkpoint loaded with
            torch_dtype=bfloat16 is quantised from those).
and "dq": bitsandbytes' quantize_blockwise(blocksize=256) alone (the 8-bit dynamic map the absmax
double quantisation uses, the CPU library's 65536-step lookup table) on 8192 values of magnitudes
from 1e-7 to 10, to cover its rounding more densely than the absmax values do.

Writes tests/fixtures/nf4/nf4.safetensors: per case <case>.weight (float32 input),
<case>.packed (uint8, two codes a byte, the first in the high nibble), <case>.absmax_plain
(float32 absmax without double quantisation), <case>.qabsmax (uint8), <case>.absmax2 (float32),
<case>.offset (float32, one value), <case>.dequant (float32, dequantize_4bit's output); dq.input,
dq.codes, dq.absmax; mean<n>.input / mean<n>.value (torch's float32 mean, which bitsandbytes takes
of the absmax); and code.dynamic (the 256-value map). reference.json records the versions.

    /work/venv-ref/bin/python tools/reference/make_nf4_fixture.py   # from the repo root, ~2 s
"""
import copy
import json
import os

import bitsandbytes
import bitsandbytes.functional as F
import safetensors.torch
import torch

OUT = os.path.join("tests", "fixtures", "nf4")


def quantise(name, w, tensors):
    packed, state = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    _, plain = F.quantize_4bit(w, blocksize=64, compress_statistics=False, quant_type="nf4")
    assert state.nested and state.state2.blocksize == 256
    # dequantised to float32 (the bf16 case would otherwise come back in its own dtype): what
    # rlhf.c multiplies with, its arithmetic fp32
    fp32_state = copy.copy(state)
    fp32_state.dtype = torch.float32
    deq = F.dequantize_4bit(packed, fp32_state, quant_type="nf4")
    tensors[f"{name}.weight"] = w.float().contiguous()
    tensors[f"{name}.packed"] = packed.reshape(-1).contiguous()
    tensors[f"{name}.absmax_plain"] = plain.absmax.contiguous()
    tensors[f"{name}.qabsmax"] = state.absmax.contiguous()
    tensors[f"{name}.absmax2"] = state.state2.absmax.contiguous()
    tensors[f"{name}.offset"] = state.offset.reshape(1).float().contiguous()
    tensors[f"{name}.dequant"] = deq.contiguous()
    tensors["code.dynamic"] = state.state2.code.contiguous()


NF4 = torch.tensor([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                    0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
                    0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                    0.7229568362236023, 1.0], dtype=torch.float32)
MID = (NF4[:-1] + NF4[1:]) / 2


def nf4_code(s):
    return int(torch.bucketize(s, MID))


def ragged(g):
    """5 x 50 values; the partial last block (58 values) holds, beside its absmax a, values x
    near a midpoint times a whose code differs between x * (1 / a) and x / a (found by search)."""
    w = torch.randn(250, generator=g)
    a = torch.tensor(2.9470518, dtype=torch.float32)
    inv = 1.0 / a
    found = []
    for m in MID:
        x = (m * a).reshape(1)
        for _ in range(8):
            for y in (x, -x):
                if nf4_code(y * inv) != nf4_code(y / a):
                    found.append(float(y))
            x = torch.nextafter(x, torch.tensor([float("inf")]))
    assert found, "no value tells multiplying from dividing"
    tail = w[192:]
    tail.clamp_(-2.5, 2.5)
    tail[0] = a
    tail[1:1 + len(found)] = torch.tensor(found)
    return w.reshape(5, 50)


def ties():
    """2 x 64: blocks with absmax 2 (scaling exact) whose values sit exactly on the midpoints
    between NF4 values (bucketize gives the lower code) and one ulp either side."""
    vals = [2.0]
    for m in MID:
        t = 2 * m
        vals += [t, -t, torch.nextafter(t, torch.tensor(9.0)), torch.nextafter(t, torch.tensor(-9.0))]
    w = torch.tensor([float(v) for v in vals][:128] + [0.0] * max(0, 128 - len(vals)))
    return w.reshape(2, 64)


def main():
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(33)
    tensors = {}
    wide = torch.randn(60, 320, generator=g) * 0.02
    wide[10, :64] = 0.0  # one block of zeros (in row 10: 320 = 5 blocks a row)
    wide[40] *= 1000.0
    quantise("wide", wide, tensors)
    quantise("ragged", ragged(g), tensors)
    quantise("ties", ties(), tensors)
    quantise("bf16", (torch.randn(64, 128, generator=g) * 0.05).to(torch.bfloat16), tensors)

    mags = torch.logspace(-7, 1, 8192, dtype=torch.float64)
    signs = torch.where(torch.rand(8192, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    x = (mags * signs)[torch.randperm(8192, generator=g)].float()
    codes, state = F.quantize_blockwise(x, blocksize=256)
    tensors["dq.input"] = x.contiguous()
    tensors["dq.codes"] = codes.contiguous()
    tensors["dq.absmax"] = state.absmax.contiguous()

    # torch's float32 mean (the double quantisation's offset) on longer rows than the cases'
    # absmax: 6000 values engage its cascaded sum's levels, 37 its scalar tail
    # (rows drawn until torch's result differs from the correctly rounded mean, so that the
    # order of its sums is what the test checks)
    for n in (6000, 37):
        while True:
            v = torch.rand(n, generator=g) * torch.logspace(-3, 1, n)[torch.randperm(n, generator=g)]
            exact = torch.tensor(float(v.double().sum()), dtype=torch.float32) / n
            if v.mean() != exact:
                break
        tensors[f"mean{n}.input"] = v.contiguous()
        tensors[f"mean{n}.value"] = v.mean().reshape(1).contiguous()

    os.makedirs(OUT, exist_ok=True)
    safetensors.torch.save_file(tensors, os.path.join(OUT, "nf4.safetensors"))
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump({"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__,
                   "device": "cpu", "script": "tools/reference/make_nf4_fixture.py"}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
