#!/usr/bin/env python3
"""Gemma 2 and Gemma 3 fixtures (issue 34), made with transformers' own Gemma2Config /
Gemma2ForCausalLM and Gemma3TextConfig / Gemma3ForCausalLM and random weights. Run from the
repository root with the reference venv:

    /work/venv-ref/bin/python tools/reference/make_gemma2_fixtures.py [gemma2] [gemma3]

tests/fixtures/models/gemma2_tiny: make_model_fixtures.py's sizes, batch and reference.json /
score.jsonl format (then grads.* and reference_bf16.json as make_grad_fixtures.py and
make_bf16_weight_fixtures.py write them), with every Gemma 2 feature made to matter at this size:

  head_dim 16 (nh * hd = 64 != hidden 32), query_pre_attn_scalar 24 (scale 24^-1/2, not 16^-1/2),
  attn_logit_softcapping 2 and final_logit_softcapping 3 (small enough that tanh bends the
  scores and logits of these weights), sliding_window 4 on layer 0 (layer_types' default:
  sliding on even layers), tied embeddings, embeddings scaled by sqrt(32), gelu_pytorch_tanh.

The RMSNorm weights are drawn centred on 0 (Gemma's norms scale by 1 + w), the other weights as
make_model_fixtures.reinit_weights. Each feature is checked to change the log-probs (> 1e-3) when
it alone is switched off on the same weights.

reference_bf16.json: as make_bf16_weight_fixtures (weights rounded to bf16, fp32 arithmetic), and the
embedding normalizer rounded to bf16 as well: transformers multiplies by embed_scale.to(weight.dtype),
so a Gemma whose weights are bf16 scales by bf16(sqrt(32)) = 5.65625, not 5.656854.

tests/fixtures/generate/gemma2_tiny.json: transformers' batched greedy generate, as
make_phi3_fixtures.generate_fixture makes it (the longest prompt stops early on its eos).

models/tiny-arith-gemma2: the model of examples/dpo-gemma2.yaml, models/tiny-arith's tokenizer, chat
template and vocabulary (335) on a Gemma 2 with gemma2_tiny's layer shapes (hidden 32, 2 layers,
GQA 4/2, head_dim 16; so an adapter trained on it loads onto gemma2_tiny:
make_rlhf_adapter_fixtures.py's rlhf_gemma2_all_linear), sliding window 16 on layer 0 and
Gemma2Config's soft caps 50 and 30 with transformers' own random
initialisation (Gemma2PreTrainedModel._init_weights: normal(0, 0.02), norms 0), seed 1234. It
knows no arithmetic: the example shows a Gemma 2 learning a preference, not a capability.

tests/fixtures/models/gemma3_tiny: the same, for Gemma 3 text (Gemma3ForCausalLM): 3 layers,
sliding_window_pattern 2 (layers 0 and 2 sliding with window 4, layer 1 global), head_dim 16,
query_pre_attn_scalar 24, no soft caps (Gemma3TextConfig's default), (1 + w) q_norm/k_norm,
the global layers on rope_theta 10000 with linear scaling factor 4 (as the 4B+ checkpoints' factor
8), the sliding layers on rope_local_base_freq 100: each of these, switched off alone (local base
= global base, factor 1, no window, scalar = head_dim), changes the log-probs. Its config.json is
transformers 5's (rope_parameters keyed by layer type, layer_types); config_v4.json is the same
model in the keys of the Hub's Gemma 3 checkpoints (rope_theta, rope_local_base_freq,
rope_scaling, sliding_window_pattern), which transformers is checked to read into the same
rope_parameters and layer_types. tests/fixtures/generate/gemma3_tiny.json as for gemma2_tiny.

models/tiny-arith-gemma3: examples/dpo-gemma3.yaml's model, as tiny-arith-gemma2 with
gemma3_tiny's layer shapes (3 layers, pattern 2, window 16, rope bases 1e6 / 1e4), seed 1235.
"""

import json
import os
import pathlib
import shutil
import sys

import torch
import transformers
from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bf16_weight_fixtures as bf  # noqa: E402
import make_grad_fixtures as grads  # noqa: E402
import make_model_fixtures as mf  # noqa: E402
import make_phi3_fixtures as phi3  # noqa: E402

NAME = "gemma2_tiny"
NAME3 = "gemma3_tiny"


def gemma2(**kw):
    c = dict(mf.BASE, head_dim=16, query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
             final_logit_softcapping=3.0, sliding_window=4, tie_word_embeddings=True,
             hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=64,
             pad_token_id=0, bos_token_id=2, eos_token_id=1)
    c.update(kw)
    return Gemma2Config(**c)


def gemma3(**kw):
    c = dict(mf.BASE, num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=24, sliding_window=4,
             sliding_window_pattern=2, rope_theta=10000.0, rope_local_base_freq=100.0,
             rope_scaling={"rope_type": "linear", "factor": 4.0}, tie_word_embeddings=True,
             hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, max_position_embeddings=64,
             pad_token_id=0, bos_token_id=2, eos_token_id=1)
    c.update(kw)
    return Gemma3TextConfig(**c)


# each feature switched off alone must change the log-probs
FEATURES_OFF3 = {
    "rope_local_base_freq": dict(rope_local_base_freq=10000.0),
    "rope_scaling": dict(rope_scaling=None),
    "sliding_window": dict(sliding_window=64),
    "query_pre_attn_scalar": dict(query_pre_attn_scalar=16),
    "layer_types": dict(sliding_window_pattern=1),  # every layer global: global RoPE everywhere
}

FEATURES_OFF = {
    "attn_logit_softcapping": dict(attn_logit_softcapping=None),
    "final_logit_softcapping": dict(final_logit_softcapping=None),
    "sliding_window": dict(sliding_window=64),
    "query_pre_attn_scalar": dict(query_pre_attn_scalar=16),
}


def logp_of(model, ids, mask):
    return mf.token_logp_from_logits(mf.forward_logits(model, ids, mask), ids, mask)


def write_bf16_reference(path):
    """bf.write_bf16_reference's reference with the normalizer in bf16 too (see the docstring)."""
    ref_path = pathlib.Path(path) / "reference.json"
    ref = json.loads(ref_path.read_text())
    model = mf.load_fp32(path)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
        emb = model.model.embed_tokens
        emb.embed_scale.copy_(emb.embed_scale.to(torch.bfloat16).to(torch.float32))
    ids = torch.tensor(ref["input_ids"])
    mask = torch.tensor(ref["attention_mask"])
    logits = mf.forward_logits(model, ids, mask)
    lp = mf.token_logp_from_logits(logits, ids, mask)
    fp32 = torch.tensor(ref["token_logp"], dtype=torch.float64)
    real = mask.bool() & (fp32 != 0)
    rel = ((lp - fp32).abs() / fp32.abs())[real].max().item()
    lc = ref["logits_check"]
    out = {"model": ref["model"], "transformers_version": ref["transformers_version"],
           "torch_version": torch.__version__, "token_logp": lp.tolist(),
           "logits_check": {"batch": lc["batch"], "t0": lc["t0"], "t1": lc["t1"],
                            "values": logits[lc["batch"], lc["t0"]:lc["t1"]].tolist()},
           "max_rel_vs_fp32": rel}
    (ref_path.parent / "reference_bf16.json").write_text(json.dumps(out) + "\n")
    print(f"    bf16: max relative change of a token log-prob from fp32 {rel:.3g}")


def build(name=NAME, cls=Gemma2ForCausalLM, make_config=gemma2, features_off=FEATURES_OFF, seed=1200):
    path = os.path.join(mf.FIXTURES, name)
    config = make_config()
    torch.manual_seed(seed)
    model = mf.make_model(cls, config)
    mf.reinit_weights(model, seed)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:  # Gemma's norms: w near 0, gain 1 + w
                p.copy_(mf.NORM_STD * torch.randn(p.shape, generator=g))
    model.eval()
    print("state dict:", list(model.state_dict())[:12])
    mf.clean_dir(path)
    model.save_pretrained(path, safe_serialization=True)
    mf.prune_saved_files(path)

    ref_model = mf.load_fp32(path)
    ids, mask = mf.make_batch(seed=2200, vocab=config.vocab_size)
    logits = mf.forward_logits(ref_model, ids, mask)
    lp = mf.token_logp_from_logits(logits, ids, mask)
    for feature, off in features_off.items():
        base = mf.make_model(cls, make_config(**off))
        base.load_state_dict(ref_model.state_dict())
        base.eval()
        d = (lp - logp_of(base, ids, mask)).abs().max().item()
        print(f"    sensitivity to {feature}: max|token_logp - token_logp(off)| = {d:.4g}")
        assert d > 1e-3, (feature, d)

    score = []
    for b, n in enumerate(mf.SEQ_LENS):
        p = mf.PROMPT_LENS[b]
        row = ids[b : b + 1, :n]
        one = torch.ones_like(row)
        logp = float(logp_of(mf.load_fp32(path), row, one)[0, p:n].sum())
        score.append({"prompt_ids": ids[b, :p].tolist(), "completion_ids": ids[b, p:n].tolist(),
                      "logp": logp, "tokens": n - p, "mean_logp": logp / (n - p)})
    ref = {"model": name, "transformers_version": transformers.__version__,
           "torch_version": torch.__version__, "input_ids": ids.tolist(),
           "attention_mask": mask.tolist(), "token_logp": lp.tolist(),
           "logits_check": {"batch": 1, "t0": 2, "t1": 5, "values": logits[1, 2:5].tolist()},
           "score": score}
    with open(os.path.join(path, "reference.json"), "w") as f:
        f.write(json.dumps(ref, separators=(",", ":")) + "\n")
    with open(os.path.join(path, "score.jsonl"), "w") as f:
        for s in score:
            f.write(json.dumps({"prompt_ids": s["prompt_ids"], "completion_ids": s["completion_ids"]}) + "\n")
    grads.write_grads(path)
    write_bf16_reference(path)


def write_v4_config(path):
    """config_v4.json: gemma3_tiny's config.json in the Hub checkpoints' keys; transformers must read
    both into the same RoPE parameters and layer types."""
    v5 = json.loads((pathlib.Path(path) / "config.json").read_text())
    v4 = dict(v5)
    rp = v4.pop("rope_parameters")
    full, sliding = rp["full_attention"], rp["sliding_attention"]
    v4["rope_theta"] = full["rope_theta"]
    v4["rope_local_base_freq"] = sliding["rope_theta"]
    scaling = {k: v for k, v in full.items() if k != "rope_theta"}
    v4["rope_scaling"] = None if scaling.get("rope_type") == "default" else scaling
    types = v4.pop("layer_types")
    pattern = next(i + 1 for i, t in enumerate(types) if t == "full_attention")
    v4["sliding_window_pattern"] = pattern
    v4["torch_dtype"] = v4.pop("dtype")
    out = pathlib.Path(path) / "config_v4.json"
    out.write_text(json.dumps(v4, indent=2) + "\n")
    a = Gemma3TextConfig(**{k: v for k, v in v4.items() if k not in ("architectures", "model_type")})
    b = Gemma3TextConfig.from_pretrained(path)
    assert a.rope_parameters == b.rope_parameters, (a.rope_parameters, b.rope_parameters)
    assert a.layer_types == b.layer_types == types, (a.layer_types, b.layer_types)
    print(f"    config_v4.json: rope {a.rope_parameters}, layer_types {a.layer_types}")


def build_example_model():
    src = os.path.join(mf.REPO, "models", "tiny-arith")
    path = os.path.join(mf.REPO, "models", "tiny-arith-gemma2")
    config = Gemma2Config(vocab_size=335, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                          query_pre_attn_scalar=16, sliding_window=16, max_position_embeddings=512,
                          tie_word_embeddings=True, bos_token_id=None, eos_token_id=0, pad_token_id=None)
    torch.manual_seed(1234)
    model = mf.make_model(Gemma2ForCausalLM, config)
    mf.clean_dir(path)
    model.save_pretrained(path, safe_serialization=True)
    mf.prune_saved_files(path)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(os.path.join(src, f), os.path.join(path, f))
        os.chmod(os.path.join(path, f), 0o644)
    print(f"tiny-arith-gemma2: {mf.dir_size(path)} bytes")


def build_example_model3():
    src = os.path.join(mf.REPO, "models", "tiny-arith")
    path = os.path.join(mf.REPO, "models", "tiny-arith-gemma3")
    config = Gemma3TextConfig(vocab_size=335, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                              query_pre_attn_scalar=16, sliding_window=16, sliding_window_pattern=2,
                              max_position_embeddings=512, tie_word_embeddings=True, bos_token_id=None,
                              eos_token_id=0, pad_token_id=None)
    torch.manual_seed(1235)
    model = mf.make_model(Gemma3ForCausalLM, config)
    mf.clean_dir(path)
    model.save_pretrained(path, safe_serialization=True)
    mf.prune_saved_files(path)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(os.path.join(src, f), os.path.join(path, f))
        os.chmod(os.path.join(path, f), 0o644)
    print(f"tiny-arith-gemma3: {mf.dir_size(path)} bytes")


def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    which = sys.argv[1:] or ["gemma2", "gemma3"]
    if "gemma2" in which:
        build()
        phi3.generate_fixture(20, NAME)
        build_example_model()
    if "gemma3" in which:
        build(NAME3, Gemma3ForCausalLM, gemma3, FEATURES_OFF3, seed=1300)
        write_v4_config(os.path.join(mf.FIXTURES, NAME3))
        phi3.generate_fixture(21, NAME3)
        build_example_model3()


if __name__ == "__main__":
    main()
