#!/usr/bin/env python3
"""Reference fixtures for the rlhf.c forward-pass / scoring tests.

Run from the repository root:

    tools/reference/.venv/bin/python tools/reference/make_model_fixtures.py

It creates, with transformers' own config/model classes and random weights (nothing is
downloaded):

  tests/fixtures/models/<name>/            one tiny checkpoint per feature the C loader and
      config.json                          forward pass must get right (RoPE variants, biases,
      generation_config.json               tied embeddings, Qwen3 q/k-norm, sliding window,
      model.safetensors (or 2 shards       bf16 storage, sharded storage), plus
        + model.safetensors.index.json)
      reference.json                       log-probs/logits computed by transformers (fp32)
      score.jsonl                          the input for `rlhf score`


Everything is deterministic: each model is built under its own torch.manual_seed, the token
batches come from seeded torch.Generators, and torch runs single-process on CPU.

reference.json keys (see the brief in tools/reference/README.md):
  model, transformers_version, torch_version,
  input_ids [B][T] (right-padded with 0), attention_mask [B][T],
  token_logp [B][T]  token_logp[b][t] = log_softmax(logits[b, t-1])[input_ids[b][t]] in float64
                     from the fp32 logits; 0.0 for t == 0 and for padded positions,
  logits_check       {"batch": 1, "t0": 2, "t1": 5, "values": logits[1, 2:5] (fp32, full rows)},
  score              one entry per batch row: prompt_ids, completion_ids, logp (sum of the
                     completion tokens' log-probs), tokens, mean_logp.

Score semantics: every score entry is computed by running that ONE sequence alone (B = 1, no
padding, positions 0..n-1) on a freshly loaded model -- i.e. exactly what `rlhf score` sees when it
reads one line of score.jsonl. For every model except llama_rope_dynamic this equals the sum of the
batch token_logp over the completion positions (asserted below to 1e-4). Dynamic-NTK RoPE depends
on the sequence length (max position + 1), so a 13-token row scored alone (13 <= 16, no scaling)
differs from the same row inside the padded T=20 batch (scaled with seq_len 20); the script prints
both for that model.
"""

import inspect
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

torch.set_num_threads(2)
transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bars in the log

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "models")

# Common tiny sizes (brief): H 32, I 64, L 2, V 128, nh 4, nkv 2, hd 8 unless stated.
BASE = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    vocab_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
)

# Test batch: 3 rows of unequal length, right-padded with id 0 to the longest (20).
SEQ_LENS = [20, 13, 7]
# Prompt length per row for the score entries (>= 1); the rest of the row is the completion.
PROMPT_LENS = [8, 5, 3]

# Weight scales for the random re-initialisation (see reinit_weights).
MATRIX_STD = 0.2  # Linear/Embedding weights; the HF default 0.02 makes attention ~uniform and
#                   logits ~0, which would hide RoPE / mask mistakes.
NORM_STD = 0.1  # RMSNorm weights = 1 + NORM_STD * randn
BIAS_STD = 0.1  # biases = BIAS_STD * randn (HF initialises them to zero)

TV = tuple(int(x) for x in transformers.__version__.split(".")[:2])


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------


def rope_kwargs(config_cls, theta, scaling):
    """Config kwargs for RoPE that the installed transformers accepts.

    transformers v5 replaced `rope_theta` + `rope_scaling` by one `rope_parameters` dict; v4 only
    knows the former. We pass whichever the config class's __init__ declares.
    """
    params = inspect.signature(config_cls.__init__).parameters
    if "rope_parameters" in params:
        d = {"rope_type": "default"}
        d.update(scaling or {})
        d["rope_theta"] = float(theta)
        return {"rope_parameters": d}
    return {"rope_theta": float(theta), "rope_scaling": dict(scaling) if scaling else None}


def dtype_kw(dtype):
    """from_pretrained keyword for the load dtype (`dtype` since 4.56, `torch_dtype` before)."""
    return {"dtype": dtype} if TV >= (4, 56) else {"torch_dtype": dtype}


def make_model(model_cls, config):
    config._attn_implementation = "eager"
    try:
        model = model_cls._from_config(config, attn_implementation="eager", **dtype_kw(torch.float32))
    except TypeError:
        model = model_cls(config)
    return model


def reinit_weights(model, seed):
    """Deterministic random weights that exercise every parameter.

    - every matrix (Linear weight, Embedding): N(0, MATRIX_STD)
    - every RMSNorm weight (input/post-attention/final norms, Qwen3 q_norm/k_norm): 1 + NORM_STD*N(0,1)
    - every bias: BIAS_STD*N(0,1)  (non-zero, so a loader that forgets a bias fails the test)
    named_parameters() yields a tied lm_head/embedding pair once.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith(".bias"):
                p.copy_(BIAS_STD * r)
            elif p.dim() == 1:  # RMSNorm weights are the only 1-D non-bias parameters
                assert "norm" in name, name
                p.copy_(1.0 + NORM_STD * r)
            else:
                p.copy_(MATRIX_STD * r)


def make_batch(seed, vocab):
    """3 sequences of lengths SEQ_LENS, random ids in [1, vocab), right-padded with 0."""
    g = torch.Generator().manual_seed(seed)
    T = max(SEQ_LENS)
    ids = torch.zeros((len(SEQ_LENS), T), dtype=torch.long)
    mask = torch.zeros((len(SEQ_LENS), T), dtype=torch.long)
    for b, n in enumerate(SEQ_LENS):
        ids[b, :n] = torch.randint(1, vocab, (n,), generator=g)
        mask[b, :n] = 1
    return ids, mask


def token_logp_from_logits(logits, ids, mask):
    """[B,T] float64: lp[b,t] = log_softmax(logits[b,t-1])[ids[b,t]] for real t >= 1, else 0."""
    lsm = torch.log_softmax(logits.double(), dim=-1)  # float64 from the fp32 logits
    B, T = ids.shape
    out = torch.zeros((B, T), dtype=torch.float64)
    out[:, 1:] = lsm[:, :-1, :].gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    out[mask == 0] = 0.0
    return out


def load_fp32(path):
    return AutoModelForCausalLM.from_pretrained(
        path, attn_implementation="eager", **dtype_kw(torch.float32)
    ).eval()


@torch.no_grad()
def forward_logits(model, ids, mask):
    # No position_ids: transformers uses 0..T-1 for every row.
    return model(input_ids=ids, attention_mask=mask).logits.float()


def clean_dir(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)


def prune_saved_files(path):
    """Keep only what the C loader needs (generation_config.json may stay)."""
    keep = {"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json"}
    for f in os.listdir(path):
        if f in keep or (f.startswith("model-") and f.endswith(".safetensors")):
            continue
        os.remove(os.path.join(path, f))
        print(f"    removed unneeded file {f}")
    for f in os.listdir(path):  # safetensors writes 0600; make the tree readable by everyone
        os.chmod(os.path.join(path, f), 0o644)


def dir_size(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def llama3_regimes(head_dim, theta, scaling):
    """Classify each RoPE frequency under the llama3 rule (keep / smoothed / scaled)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    orig = scaling["original_max_position_embeddings"]
    low_wl = orig / scaling["low_freq_factor"]
    high_wl = orig / scaling["high_freq_factor"]
    out = []
    for f in inv.tolist():
        wl = 2 * np.pi / f
        if wl < high_wl:
            regime = "keep"
        elif wl > low_wl:
            regime = "scaled (/factor)"
        else:
            regime = "smoothed"
        out.append((f, wl, regime))
    return out, low_wl, high_wl


# ----------------------------------------------------------------------------------------------
# the fixture models
# ----------------------------------------------------------------------------------------------

LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 256,
}


def spec_list():
    """(name, model class, config, options). Options: save_dtype, shards, baseline config for
    a sensitivity check (same weights, feature switched off -> the logits must differ)."""
    specs = []

    def llama(**kw):
        theta = kw.pop("rope_theta", 10000.0)
        scaling = kw.pop("rope_scaling", None)
        c = dict(BASE, rms_norm_eps=1e-5, tie_word_embeddings=False)
        c.update(kw)
        c.update(rope_kwargs(LlamaConfig, theta, scaling))
        return LlamaConfig(**c)

    # 1. Llama 3.x RoPE, untied, GQA 4/2, hd 8.
    specs.append(("llama_rope_llama3", LlamaForCausalLM,
                  llama(rope_theta=500000.0, rope_scaling=LLAMA3_SCALING, max_position_embeddings=2048),
                  {"baseline": llama(rope_theta=500000.0, max_position_embeddings=2048)}))
    # 2. Tied embeddings + every Llama bias (q/k/v/o and gate/up/down).
    specs.append(("llama_tied", LlamaForCausalLM,
                  llama(tie_word_embeddings=True, attention_bias=True, mlp_bias=True), {}))
    # 3. Linear position interpolation.
    specs.append(("llama_rope_linear", LlamaForCausalLM,
                  llama(rope_scaling={"rope_type": "linear", "factor": 2.0}),
                  {"baseline": llama()}))
    # 4. Dynamic NTK: max_position_embeddings 16 < T = 20, so the batch forward is scaled.
    specs.append(("llama_rope_dynamic", LlamaForCausalLM,
                  llama(rope_scaling={"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=16),
                  {"baseline": llama(max_position_embeddings=16)}))
    # 5. YaRN with original context 16.
    specs.append(("llama_rope_yarn", LlamaForCausalLM,
                  llama(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16},
                        max_position_embeddings=64),
                  {"baseline": llama(max_position_embeddings=64)}))
    # 6. Qwen2: hard-wired q/k/v biases, tied, eps 1e-6.
    c = dict(BASE, rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=2048)
    c.update(rope_kwargs(Qwen2Config, 1000000.0, None))
    specs.append(("qwen2_bias", Qwen2ForCausalLM, Qwen2Config(**c), {}))
    # 7. Qwen3: q_norm/k_norm, head_dim 16 while H/nh = 8 (nh*hd = 64 != H = 32), untied.
    c = dict(BASE, head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=False, max_position_embeddings=2048)
    c.update(rope_kwargs(Qwen3Config, 1000000.0, None))
    specs.append(("qwen3_qknorm", Qwen3ForCausalLM, Qwen3Config(**c), {}))
    # 8. Mistral with sliding window 6 (sequences up to 20 tokens).
    def mistral(window):
        c = dict(BASE, rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=2048,
                 sliding_window=window)
        c.update(rope_kwargs(MistralConfig, 10000.0, None))
        return MistralConfig(**c)
    specs.append(("mistral_window", MistralForCausalLM, mistral(6), {"baseline": mistral(None)}))
    # 9. Llama stored in bfloat16 (reference computed in fp32 from the upcast bf16 weights).
    specs.append(("llama_bf16", LlamaForCausalLM, llama(), {"save_dtype": torch.bfloat16}))
    # 10. Llama stored as exactly 2 safetensors shards.
    specs.append(("llama_sharded", LlamaForCausalLM, llama(), {"shards": 2}))
    return specs


def save_sharded(model, path, want_shards):
    """save_pretrained with the largest max_shard_size (in KB) that still yields want_shards files."""
    total = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    # Start near total/want_shards and grow until the count drops below want_shards.
    for kb in range(max(1, total // want_shards // 1000), total // 1000 + 2):
        clean_dir(path)
        model.save_pretrained(path, safe_serialization=True, max_shard_size=f"{kb}KB")
        shards = sorted(f for f in os.listdir(path) if f.startswith("model-") and f.endswith(".safetensors"))
        if len(shards) == want_shards:
            print(f"    max_shard_size={kb}KB -> {shards}")
            assert os.path.exists(os.path.join(path, "model.safetensors.index.json"))
            assert not os.path.exists(os.path.join(path, "model.safetensors"))
            return
    raise SystemExit(f"could not produce {want_shards} shards")


def build_fixture(idx, name, model_cls, config, opts):
    path = os.path.join(FIXTURES, name)
    print(f"\n[{idx}] {name}: {model_cls.__name__}")
    seed = 1000 + idx
    torch.manual_seed(seed)
    model = make_model(model_cls, config)
    reinit_weights(model, seed)
    model.eval()

    if name == "llama_rope_llama3":
        hd = config.head_dim if getattr(config, "head_dim", None) else config.hidden_size // config.num_attention_heads
        regimes, low_wl, high_wl = llama3_regimes(hd, 500000.0, LLAMA3_SCALING)
        print(f"    llama3 rule: hd={hd} high_wl={high_wl} low_wl={low_wl}")
        for i, (f, wl, reg) in enumerate(regimes):
            print(f"      inv_freq[{i}]={f:.6g} wavelength={wl:.6g} -> {reg}")
        hit = {r for _, _, r in regimes}
        assert hit == {"keep", "smoothed", "scaled (/factor)"}, hit

    # --- save -------------------------------------------------------------------------------
    clean_dir(path)
    if opts.get("save_dtype") == torch.bfloat16:
        model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    elif opts.get("shards"):
        save_sharded(model, path, opts["shards"])
    else:
        model.save_pretrained(path, safe_serialization=True)
    prune_saved_files(path)

    # --- reference forward (fp32). Reload from disk so the reference is exactly what the files
    # hold (for llama_bf16: the bf16 weights upcast to fp32, computed in fp32). ----------------
    ref_model = load_fp32(path)
    assert ref_model.config._attn_implementation == "eager"
    ids, mask = make_batch(seed=2000 + idx, vocab=config.vocab_size)
    logits = forward_logits(ref_model, ids, mask)
    assert logits.dtype == torch.float32
    lp = token_logp_from_logits(logits, ids, mask)

    # In-memory model vs reloaded model (not for bf16, where the in-memory copy is bf16).
    if opts.get("save_dtype") is None:
        fresh = make_model(model_cls, config)
        fresh.load_state_dict(model.state_dict())
        fresh.eval()
        d = (forward_logits(fresh, ids, mask) - logits)[mask.bool()].abs().max().item()
        print(f"    in-memory vs reloaded logits max|diff| = {d:.3g}")
        assert d < 1e-5, d

    # Sensitivity: the same weights with the feature switched off must give different log-probs.
    if "baseline" in opts:
        base = make_model(model_cls, opts["baseline"])
        base.load_state_dict(ref_model.state_dict())
        base.eval()
        lp_base = token_logp_from_logits(forward_logits(base, ids, mask), ids, mask)
        d = (lp - lp_base).abs().max().item()
        print(f"    sensitivity: max|token_logp - token_logp(feature off)| = {d:.4g}")
        assert d > 1e-3, f"{name}: the feature under test barely changes the output ({d})"

    # --- score entries: each row alone on a freshly loaded model (see module docstring) -----
    score = []
    for b, n in enumerate(SEQ_LENS):
        p = PROMPT_LENS[b]
        assert 1 <= p < n
        row = ids[b : b + 1, :n]
        single = load_fp32(path)  # fresh: dynamic-NTK RoPE keeps state between calls
        lp1 = token_logp_from_logits(forward_logits(single, row, torch.ones_like(row)), row, torch.ones_like(row))
        logp = float(lp1[0, p:n].sum())
        logp_batch = float(lp[b, p:n].sum())
        if name == "llama_rope_dynamic":
            print(f"    row {b} (n={n}): score alone {logp:.6f} vs inside padded batch {logp_batch:.6f}")
        else:
            assert abs(logp - logp_batch) < 1e-4, (name, b, logp, logp_batch)
        tokens = n - p
        score.append({
            "prompt_ids": ids[b, :p].tolist(),
            "completion_ids": ids[b, p:n].tolist(),
            "logp": logp,
            "tokens": tokens,
            "mean_logp": logp / tokens,
        })

    ref = {
        "model": name,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "input_ids": ids.tolist(),
        "attention_mask": mask.tolist(),
        "token_logp": lp.tolist(),
        "logits_check": {"batch": 1, "t0": 2, "t1": 5, "values": logits[1, 2:5].tolist()},
        "score": score,
    }
    with open(os.path.join(path, "reference.json"), "w") as f:
        f.write(json.dumps(ref, separators=(",", ":")) + "\n")
    with open(os.path.join(path, "score.jsonl"), "w") as f:
        for s in score:
            f.write(json.dumps({"prompt_ids": s["prompt_ids"], "completion_ids": s["completion_ids"]}) + "\n")
    print(f"    mean token_logp over real t>=1: {lp[:, 1:][mask[:, 1:].bool()].mean().item():.4f} "
          f"(uniform would be {-np.log(config.vocab_size):.4f}); dir size {dir_size(path)} bytes")


def verify_fixture(name):
    """Reload with AutoModelForCausalLM in fp32 and recompute everything recorded."""
    path = os.path.join(FIXTURES, name)
    with open(os.path.join(path, "reference.json")) as f:
        ref = json.load(f)
    assert ref["model"] == name
    model = load_fp32(path)
    ids = torch.tensor(ref["input_ids"])
    mask = torch.tensor(ref["attention_mask"])
    logits = forward_logits(model, ids, mask)
    lc = ref["logits_check"]
    dl = (logits[lc["batch"], lc["t0"] : lc["t1"]].double() - torch.tensor(lc["values"], dtype=torch.float64)).abs().max().item()
    dlp = (token_logp_from_logits(logits, ids, mask) - torch.tensor(ref["token_logp"], dtype=torch.float64)).abs().max().item()
    for s in ref["score"]:
        assert s["tokens"] == len(s["completion_ids"]) >= 1 and len(s["prompt_ids"]) >= 1
        assert abs(s["mean_logp"] * s["tokens"] - s["logp"]) < 1e-9
    with open(os.path.join(path, "score.jsonl")) as f:
        lines = [json.loads(l) for l in f]
    assert lines == [{"prompt_ids": s["prompt_ids"], "completion_ids": s["completion_ids"]} for s in ref["score"]]
    # Independent float64 re-implementation of the spec vs the recorded transformers fp32 values.
    slp = token_logp_from_logits(spec_forward(path, ids, mask), ids, mask)
    dspec = (slp - torch.tensor(ref["token_logp"], dtype=torch.float64)).abs().max().item()
    print(f"  verify {name:20s} logits max|diff| {dl:.3g}  token_logp max|diff| {dlp:.3g}  "
          f"spec-float64 vs transformers-fp32 token_logp max|diff| {dspec:.3g}")
    assert dl < 1e-5 and dlp < 1e-5
    assert dspec < 1e-4, dspec
    # The score sums, each sequence alone (for dynamic RoPE this is what makes them differ from
    # the padded batch: seq_len = that sequence's own length).
    for s in ref["score"]:
        row = torch.tensor([s["prompt_ids"] + s["completion_ids"]])
        one = torch.ones_like(row)
        lp1 = token_logp_from_logits(spec_forward(path, row, one), row, one)
        d = abs(float(lp1[0, len(s["prompt_ids"]) :].sum()) - s["logp"])
        assert d < 1e-4, (name, d)


def spec_forward(path, ids, mask):
    """Independent float64 forward pass written from shared/spec/hf-formats.md §2-§3.

    It reads config.json and the safetensors files directly (the way the C loader does, not via
    transformers), so agreement with transformers checks both the spec and what is on disk.
    Returns float64 logits [B, T, V].
    """
    from safetensors.torch import load_file  # torch, because numpy has no bfloat16

    cfg = json.load(open(os.path.join(path, "config.json")))
    # weights: unsharded file first, else the index
    if os.path.exists(os.path.join(path, "model.safetensors")):
        files = ["model.safetensors"]
    else:
        files = sorted(set(json.load(open(os.path.join(path, "model.safetensors.index.json")))["weight_map"].values()))
    W = {}
    for f in files:
        W.update(load_file(os.path.join(path, f)))

    def w(name):
        return W[name].double()  # bf16/f32 -> float64 (exact)

    H, nh = cfg["hidden_size"], cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or H // nh
    L, eps = cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    mt = cfg["model_type"]
    # §2.3 RoPE resolution
    p = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rtype = p.get("rope_type") or p.get("type") or "default"
    theta = p.get("rope_theta") or cfg.get("rope_theta") or 10000.0
    B, T = ids.shape
    pos = torch.arange(T, dtype=torch.float32)  # no position_ids -> 0..T-1
    i2 = torch.arange(0, hd, 2, dtype=torch.int64).float() / hd
    inv = 1.0 / (theta ** i2)
    attn_factor = 1.0
    if rtype == "linear":
        inv = inv / p["factor"]
    elif rtype == "dynamic":
        mp, seq_len = cfg["max_position_embeddings"], T  # seq_len = max(position) + 1
        if seq_len > mp:
            th = theta * ((p["factor"] * seq_len / mp) - (p["factor"] - 1)) ** (hd / (hd - 2))
            inv = 1.0 / (th ** i2)
    elif rtype == "llama3":
        orig = p.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        lo_wl, hi_wl = orig / p["low_freq_factor"], orig / p["high_freq_factor"]
        out = []
        for f in inv.tolist():
            wl = 2 * np.pi / f
            if wl < hi_wl:
                out.append(f)
            elif wl > lo_wl:
                out.append(f / p["factor"])
            else:
                s = (orig / wl - p["low_freq_factor"]) / (p["high_freq_factor"] - p["low_freq_factor"])
                out.append((1 - s) * f / p["factor"] + s * f)
        inv = torch.tensor(out, dtype=torch.float32)
    elif rtype == "yarn":
        orig = p.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        factor = p.get("factor") or cfg["max_position_embeddings"] / orig
        bf, bs = p.get("beta_fast") or 32, p.get("beta_slow") or 1
        cd = lambda r: hd * math.log(orig / (2 * math.pi * r)) / (2 * math.log(theta))
        lo, hi = cd(bf), cd(bs)
        if p.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, hd - 1)
        if lo == hi:
            hi += 0.001
        pf = theta ** i2
        ramp = torch.clamp((torch.arange(hd // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
        ef = 1 - ramp
        inv = (1 / (factor * pf)) * (1 - ef) + (1 / pf) * ef
        g = lambda s_, m_=1: 1.0 if s_ <= 1 else 0.1 * m_ * math.log(s_) + 1.0
        if p.get("attention_factor") is not None:
            attn_factor = p["attention_factor"]
        elif p.get("mscale") and p.get("mscale_all_dim"):
            attn_factor = g(factor, p["mscale"]) / g(factor, p["mscale_all_dim"])
        else:
            attn_factor = g(factor)
    else:
        assert rtype == "default", rtype
    freqs = pos[:, None] * inv[None, :]  # float32, as transformers
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = (emb.cos() * attn_factor).double(), (emb.sin() * attn_factor).double()

    def rope(u):  # u [B, n, T, hd]
        rot = torch.cat([-u[..., hd // 2 :], u[..., : hd // 2]], -1)
        return u * cos + rot * sin

    def rms(x, wt):
        return wt * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))

    def lin(x, name):
        y = x @ w(name + ".weight").T
        return y + w(name + ".bias") if name + ".bias" in W else y

    window = None
    if mt == "mistral" and cfg.get("sliding_window") is not None:
        window = cfg["sliding_window"]
    elif mt in ("qwen2", "qwen3") and cfg.get("use_sliding_window"):
        raise NotImplementedError("Qwen sliding window not exercised by these fixtures")
    i_idx, l_idx = torch.arange(T)[:, None], torch.arange(T)[None, :]
    vis = (l_idx <= i_idx)[None] & mask.bool()[:, None, :]  # [B, T(i), T(l)]
    if window is not None:
        vis = vis & (l_idx > i_idx - window)[None]

    h = w("model.embed_tokens.weight")[ids]
    for n in range(L):
        pre = f"model.layers.{n}."
        a = rms(h, w(pre + "input_layernorm.weight"))
        q = lin(a, pre + "self_attn.q_proj").view(B, T, nh, hd).transpose(1, 2)
        k = lin(a, pre + "self_attn.k_proj").view(B, T, nkv, hd).transpose(1, 2)
        v = lin(a, pre + "self_attn.v_proj").view(B, T, nkv, hd).transpose(1, 2)
        if pre + "self_attn.q_norm.weight" in W:  # Qwen3: per-head RMSNorm before RoPE
            q = rms(q, w(pre + "self_attn.q_norm.weight"))
            k = rms(k, w(pre + "self_attn.k_norm.weight"))
        q, k = rope(q), rope(k)
        rep = nh // nkv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        s = (q @ k.transpose(-1, -2)) * hd**-0.5
        s = s.masked_fill(~vis[:, None], float("-inf"))
        pr = torch.softmax(s, -1).nan_to_num(0.0)  # fully masked rows (none here) -> 0
        o = (pr @ v).transpose(1, 2).reshape(B, T, nh * hd)
        h = h + lin(o, pre + "self_attn.o_proj")
        m = rms(h, w(pre + "post_attention_layernorm.weight"))
        g_ = lin(m, pre + "mlp.gate_proj")
        h = h + lin(torch.nn.functional.silu(g_) * lin(m, pre + "mlp.up_proj"), pre + "mlp.down_proj")
    h = rms(h, w("model.norm.weight"))
    lm = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    return h @ w(lm).T


# ----------------------------------------------------------------------------------------------
def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}, "
          f"python {sys.version.split()[0]}")
    os.makedirs(FIXTURES, exist_ok=True)
    specs = spec_list()
    for i, (name, cls, config, opts) in enumerate(specs, start=1):
        build_fixture(i, name, cls, config, opts)
    print("\nsanity check: reload every fixture with AutoModelForCausalLM (fp32)")
    for name, _, _, _ in specs:
        verify_fixture(name)
    print("\nfixture sizes:")
    for name, _, _, _ in specs:
        print(f"  {name:20s} {dir_size(os.path.join(FIXTURES, name)):8d} bytes")
    total = dir_size(FIXTURES)
    print(f"  total tests/fixtures/models: {total} bytes ({total / 1e6:.3f} MB)")
    assert total < 2_000_000


if __name__ == "__main__":
    main()
