"""The machine's own arithmetic peaks, for the model benches' MFU (build/bench/peak_flops: a
register-resident fp32 FMA and bf16 dot-product microkernel per instruction set the CPU has, on
one thread and on all of them).

measure() runs it; the benches call it before and after their steps and keep, for each figure,
the higher of the two (`merge`): on a shared machine a measurement can only come out lower than
what the cores can do, and MFU against the higher figure is the conservative one."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXE = os.path.join(ROOT, "build", "bench", "peak_flops")


def measure(env):
    """peak_flops's JSON (see bench/peak_flops.c) with the load average when it ran."""
    out = json.loads(subprocess.run([EXE], check=True, capture_output=True, text=True, env=env).stdout)
    with open("/proc/loadavg") as f:
        out["load_average"] = [float(x) for x in f.read().split()[:3]]
    return out


def merge(runs):
    """One figure set from several measure() results: each kernel's figures and each precision's
    peak the highest of the runs; the runs themselves kept under "runs"."""
    best = {"cpu": runs[0]["cpu"], "threads": runs[0]["threads"], "kernels": {}, "runs": runs}
    for r in runs:
        for name, k in r["kernels"].items():
            have = best["kernels"].setdefault(name, dict(k))
            for key in ("gflops_1_thread", "gflops_all_threads", "gflops_per_cpu_second"):
                have[key] = max(have[key], k[key])
    for p in ("fp32", "bf16"):
        cands = [(k["gflops_all_threads"], n) for n, k in best["kernels"].items() if k["precision"] == p]
        best[f"{p}_peak_gflops"], best[f"{p}_peak_kernel"] = max(cands) if cands else (0.0, None)
    return best


def describe(peak):
    """One line for a bench's printout."""
    k = peak["kernels"]
    parts = [f"{n} {v['gflops_all_threads']:.1f} ({v['gflops_1_thread']:.1f} on 1 thread, "
             f"{v['gflops_per_cpu_second']:.1f} per CPU-second)" for n, v in k.items()]
    loads = ", ".join(f"{r['load_average'][0]:.1f}" for r in peak["runs"])
    return (f"machine peak ({peak['threads']} threads, GFLOP/s, best of {len(peak['runs'])} runs at load "
            f"{loads}): " + "; ".join(parts))
