#!/usr/bin/env python3
"""Phi-3 fixtures (issue 34) and the dynamic-RoPE batched-generation fixtures (issue 34 item 8).

Run from the repository root with the reference venv:

    tools/reference/.venv/bin/python tools/reference/make_phi3_fixtures.py

Model fixtures, made with transformers' own Phi3Config / Phi3ForCausalLM and random weights
(make_model_fixtures.py's sizes, batch, weight scales and reference.json / score.jsonl format;
then grads.* and reference_bf16.json as make_grad_fixtures.py and make_bf16_weight_fixtures.py
write them):

  tests/fixtures/models/phi3_longrope   fused qkv_proj / gate_up_proj, `longrope` RoPE with
                                        original_max_position_embeddings 16 and max 64, so the
                                        batch of T = 20 uses the long factors and the rows scored
                                        alone (13 and 7 tokens) the short ones; attention factor
                                        sqrt(1 + ln 4 / ln 16) on cos/sin
  tests/fixtures/models/phi3_window     fused weights, default RoPE, sliding_window 6
  tests/fixtures/models/phi4_mini_partial  Phi-4-mini's RoPE shape: partial_rotary_factor 0.75
                                        (6 of head_dim 8 rotated), longrope as phi3_longrope
                                        with 3 factors, tied embeddings

Score entries are each row alone on a fresh model (what `rlhf score` does); for phi3_longrope that
differs from the batch (short vs long factors), as for llama_rope_dynamic.

Generation fixtures, tests/fixtures/generate/<model>.json in make_generate_fixtures.py's format
(transformers' batched greedy generate, left-padded prompts of 3, 7, 12 and 5 tokens, 12 new
tokens), for phi3_longrope, phi3_window, llama_rope_dynamic and phi4_mini_partial. The eos id is the LONGEST prompt's
second greedy token, so that row stops early; transformers keeps feeding it (pad tokens) and its
positions keep counting in max(position_ids) + 1, the seq_len that picks dynamic-NTK's base and
longrope's factor set for every row. Each generate call runs on a freshly loaded model: dynamic
RoPE keeps the longest seq_len it has seen between calls.
"""

import json
import os
import shutil
import sys

import torch
import transformers
from transformers import Phi3Config, Phi3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bf16_weight_fixtures as bf  # noqa: E402
import make_generate_fixtures as gen  # noqa: E402
import make_grad_fixtures as grads  # noqa: E402
import make_model_fixtures as mf  # noqa: E402

# head_dim 8: 4 frequencies, each with its own short and long factor
SHORT_FACTOR = [1.0, 1.25, 1.5, 2.0]
LONG_FACTOR = [1.0, 2.0, 4.0, 8.0]


def phi3(**kw):
    c = dict(mf.BASE, rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_act="silu",
             pad_token_id=0, bos_token_id=1, eos_token_id=2)
    c.update(kw)
    return Phi3Config(**c)


def specs():
    longrope = {"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": SHORT_FACTOR,
                "long_factor": LONG_FACTOR}
    return [
        ("phi3_longrope", phi3(max_position_embeddings=64, original_max_position_embeddings=16,
                               rope_parameters=longrope),
         phi3(max_position_embeddings=64, original_max_position_embeddings=16)),
        ("phi3_window", phi3(max_position_embeddings=64, sliding_window=6), phi3(max_position_embeddings=64)),
        # Phi-4-mini's shape of RoPE: partial_rotary_factor 0.75 (6 of hd 8 rotated, 3 factors
        # each), longrope, tied embeddings
        ("phi4_mini_partial",
         phi3(max_position_embeddings=64, original_max_position_embeddings=16, partial_rotary_factor=0.75,
              tie_word_embeddings=True,
              rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                               "short_factor": SHORT_FACTOR[:3], "long_factor": LONG_FACTOR[:3]}),
         phi3(max_position_embeddings=64, original_max_position_embeddings=16, tie_word_embeddings=True)),
    ]


def build(idx, name, config, baseline, model_cls=Phi3ForCausalLM, seed_base=1100):
    """One model fixture of `model_cls` (make_smollm3_fixtures.py calls it too): random weights
    seeded seed_base + idx, reference.json, score.jsonl, grads and the bf16 reference; `baseline`
    is the config without the feature under test, which must change the log-probs."""
    path = os.path.join(mf.FIXTURES, name)
    print(f"\n[{idx}] {name}")
    seed = seed_base + idx
    torch.manual_seed(seed)
    model = mf.make_model(model_cls, config)
    mf.reinit_weights(model, seed)
    model.eval()
    names = list(model.state_dict())
    print("    state dict:", names[:7])
    mf.clean_dir(path)
    model.save_pretrained(path, safe_serialization=True)
    mf.prune_saved_files(path)

    ref_model = mf.load_fp32(path)
    ids, mask = mf.make_batch(seed=2100 + idx, vocab=config.vocab_size)
    logits = mf.forward_logits(ref_model, ids, mask)
    lp = mf.token_logp_from_logits(logits, ids, mask)

    # the feature under test must matter: the same weights without it give other log-probs
    base = mf.make_model(model_cls, baseline)
    base.load_state_dict(ref_model.state_dict())
    base.eval()
    d = (lp - mf.token_logp_from_logits(mf.forward_logits(base, ids, mask), ids, mask)).abs().max().item()
    print(f"    sensitivity: max|token_logp - token_logp(feature off)| = {d:.4g}")
    assert d > 1e-3, d

    score = []
    for b, n in enumerate(mf.SEQ_LENS):
        p = mf.PROMPT_LENS[b]
        row = ids[b : b + 1, :n]
        one = torch.ones_like(row)
        lp1 = mf.token_logp_from_logits(mf.forward_logits(mf.load_fp32(path), row, one), row, one)
        logp = float(lp1[0, p:n].sum())
        print(f"    row {b} (n={n}): alone {logp:.6f}, inside the batch {float(lp[b, p:n].sum()):.6f}")
        score.append({"prompt_ids": ids[b, :p].tolist(), "completion_ids": ids[b, p:n].tolist(),
                      "logp": logp, "tokens": n - p, "mean_logp": logp / (n - p)})
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
    grads.write_grads(path)
    bf.write_bf16_reference(bf.ROOT / name / "reference.json")


def generate_fixture(idx, name):
    path = os.path.join(mf.FIXTURES, name)
    g = torch.Generator().manual_seed(3100 + idx)
    V = json.load(open(os.path.join(path, "config.json")))["vocab_size"]
    prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in gen.PROMPT_LENS]
    longest = max(range(len(prompts)), key=lambda b: len(prompts[b]))
    free = gen.generate(mf.load_fp32(path), prompts, eos=None)
    eos = free[longest][1]
    comps = gen.generate(mf.load_fp32(path), prompts, eos=eos)
    lens = [len(c) for c in comps]
    assert len(comps[longest]) < gen.MAX_NEW and max(lens) == gen.MAX_NEW, (name, lens)
    out = os.path.join(gen.OUT, f"{name}.json")
    with open(out, "w") as f:
        json.dump({"model": name, "prompts": prompts, "eos_token_id": eos, "max_new_tokens": gen.MAX_NEW,
                   "completions": comps}, f)
    os.chmod(out, 0o644)
    print(f"{name}: eos {eos}, completion lengths {lens} (prompt {longest}, the longest, stops early)")


def build_text_model():
    """tests/fixtures/models/phi3_text: llama_text's tokenizer (and its vocabulary of 3021) on a
    Phi-3 with fused weights, tied embeddings and random weights, for the TRL training fixtures
    (make_pref_train_fixtures.py's *_phi3 cases, make_rlhf_adapter_fixtures.py's rlhf_phi3_*)."""
    src = os.path.join(mf.FIXTURES, "llama_text")
    path = os.path.join(mf.FIXTURES, "phi3_text")
    config = Phi3Config(**dict(mf.BASE, vocab_size=3021), rms_norm_eps=1e-5, tie_word_embeddings=True,
                        hidden_act="silu", bos_token_id=1, eos_token_id=2, pad_token_id=None,
                        max_position_embeddings=2048)
    torch.manual_seed(1199)
    model = mf.make_model(Phi3ForCausalLM, config)
    mf.reinit_weights(model, 1199)
    mf.clean_dir(path)
    model.save_pretrained(path, safe_serialization=True)
    mf.prune_saved_files(path)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), os.path.join(path, f))
        os.chmod(os.path.join(path, f), 0o644)
    print(f"phi3_text: {mf.dir_size(path)} bytes")


def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for i, (name, config, baseline) in enumerate(specs(), start=1):
        build(i, name, config, baseline)
    build_text_model()
    for i, name in enumerate(["phi3_longrope", "phi3_window", "llama_rope_dynamic", "phi4_mini_partial"]):
        generate_fixture(i, name)


if __name__ == "__main__":
    main()
