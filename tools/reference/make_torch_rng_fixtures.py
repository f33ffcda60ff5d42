#!/usr/bin/env python3
"""torch's CPU generator, drawn by torch itself: randperm, uniform_ (float32 and float64), exponential_ and
kaiming_uniform_(a=sqrt(5)) (what nn.Linear.reset_parameters and PEFT's LoRA A init call) for a
few seeds, sizes and interleavings. Floats are written as their bit patterns (float64 ones as 16 hex digits), so the C test
(tests/test_torch_rng.c) compares bit for bit.

    /work/venv-ref/bin/python tools/reference/make_torch_rng_fixtures.py   # from the repo root, <1 s
"""
import json
import math
import os
import struct

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures",
                   "torch_rng", "torch_rng.json")


def bits32(t):
    return [struct.unpack("<I", struct.pack("<f", v))[0] for v in t.reshape(-1).tolist()]


def bits64(t):
    # Hex strings: JSON readers (jansson) hold integers as signed 64-bit.
    return ["%016x" % struct.unpack("<Q", struct.pack("<d", v))[0] for v in t.reshape(-1).tolist()]


def generator(seed):
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def main():
    torch.set_num_threads(2)
    # torch's AVX2/AVX512 kernels fuse uniform_'s x * range + from (FMA); its DEFAULT kernels do
    # not (src/common/torch_generator.h). The fixture is the fused one users' CPUs give.
    assert torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512"), "run on an AVX2 CPU"
    cases = []
    # Seeds: small, the HF default 42, a value above 32 bits (torch keeps its low 32 bits for the
    # state), a negative one (torch takes it modulo 2^64).
    for seed in [0, 42, 3407, 2**32 + 42, -7]:
        for n in [1, 2, 3, 10, 97, 1000]:
            g = generator(seed)
            cases.append({"op": "randperm", "seed": seed, "n": n,
                          "out": torch.randperm(n, generator=g).tolist()})
    for seed in [0, 42, 2**32 + 42]:
        g = generator(seed)
        cases.append({"op": "uniform_f32", "seed": seed, "from": -0.3, "to": 0.4,
                      "bits": bits32(torch.empty(40, dtype=torch.float32).uniform_(-0.3, 0.4, generator=g))})
        g = generator(seed)
        cases.append({"op": "uniform_f64", "seed": seed, "from": -0.3, "to": 0.4,
                      "bits": bits64(torch.empty(40, dtype=torch.float64).uniform_(-0.3, 0.4, generator=g))})
    # kaiming_uniform_(a=sqrt(5)) on (rows, fan_in) matrices, as nn.Linear and PEFT call it.
    for seed, rows, fan_in in [(42, 8, 64), (0, 4, 24), (1234, 2, 3)]:
        g = generator(seed)
        w = torch.empty(rows, fan_in)
        torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=g)
        cases.append({"op": "kaiming_uniform_f32", "seed": seed, "rows": rows, "fan_in": fan_in,
                      "bits": bits32(w)})
    # exponential_() on float32: what torch.multinomial(probs, 1) draws (a vocabulary-sized row
    # and more, so that a parallel or MKL path would show).
    for seed, n in [(0, 7), (11, 3021), (2**32 + 42, 5000)]:
        g = generator(seed)
        cases.append({"op": "exponential_f32", "seed": seed,
                      "bits": bits32(torch.empty(n, dtype=torch.float32).exponential_(generator=g))})
    # One generator through several calls: randperm, uniform_ f32, randperm, uniform_ f64 (the
    # state carries over between ops).
    g = generator(7)
    seq = [torch.randperm(13, generator=g).tolist(),
           bits32(torch.empty(5).uniform_(0, 1, generator=g)),
           torch.randperm(13, generator=g).tolist(),
           bits64(torch.empty(3, dtype=torch.float64).uniform_(0, 1, generator=g))]
    cases.append({"op": "sequence", "seed": 7, "steps": seq})
    doc = {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cases": cases}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
