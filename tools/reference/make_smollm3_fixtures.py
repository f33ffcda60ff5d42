#!/usr/bin/env python3
"""SmolLM3 fixtures (issue 34): layers without RoPE.

Run from the repository root with the reference venv:

    tools/reference/.venv/bin/python tools/reference/make_smollm3_fixtures.py

Model fixtures, made with transformers' own SmolLM3Config / SmolLM3ForCausalLM and random weights,
through make_phi3_fixtures.build (make_model_fixtures.py's sizes, batch and weight scales;
reference.json, score.jsonl, grads.* and reference_bf16.json), 4 layers each:

  tests/fixtures/models/smollm3_nope     no_rope_layer_interval 2 (config.json also carries the
                                         no_rope_layers [1, 0, 1, 0] transformers derives from it):
                                         layers 1 and 3 apply no RoPE; tied embeddings (SmolLM3's
                                         default); baseline: RoPE on every layer
  tests/fixtures/models/smollm3_window   the same NoPE layers, use_sliding_window with window 6, which
                                         SmolLM3Config gives to the NoPE layers only; attention and
                                         MLP biases, untied lm_head; baseline: no window
  tests/fixtures/models/smollm3_text     llama_text's tokenizer (vocabulary 3021) on a SmolLM3 with
                                         NoPE layers 1 and 3 and random weights: the model the
                                         DPO example and make_rlhf_adapter_fixtures.py's
                                         rlhf_smollm3_* train

Generation fixtures, tests/fixtures/generate/<model>.json in make_generate_fixtures.py's format
(transformers' batched greedy generate, left-padded prompts, 12 new tokens, one row stopping
early on an eos its own greedy output reaches), for smollm3_nope and smollm3_window.
"""

import json
import os
import shutil
import sys

import torch
import transformers
from transformers import SmolLM3Config, SmolLM3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_generate_fixtures as gen  # noqa: E402
import make_model_fixtures as mf  # noqa: E402
import make_phi3_fixtures as phi3  # noqa: E402

L = 4


def smollm3(**kw):
    # pad_token_id: SmolLM3Config's default 128004 lies outside these vocabularies
    c = dict(mf.BASE, num_hidden_layers=L, rms_norm_eps=1e-5, hidden_act="silu", pad_token_id=0,
             bos_token_id=1, eos_token_id=2, max_position_embeddings=64, no_rope_layer_interval=2)
    c.update(kw)
    return SmolLM3Config(**c)


def specs():
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    all_rope = [1] * L
    return [
        ("smollm3_nope", smollm3(rope_parameters=rope), smollm3(rope_parameters=rope, no_rope_layers=all_rope)),
        ("smollm3_window",
         smollm3(use_sliding_window=True, sliding_window=6, attention_bias=True, mlp_bias=True,
                 tie_word_embeddings=False),
         smollm3(attention_bias=True, mlp_bias=True, tie_word_embeddings=False)),
    ]


def generate_fixture(idx, name):
    path = os.path.join(mf.FIXTURES, name)
    g = torch.Generator().manual_seed(3200 + idx)
    V = json.load(open(os.path.join(path, "config.json")))["vocab_size"]
    prompts = [torch.randint(1, V, (n,), generator=g).tolist() for n in gen.PROMPT_LENS]
    free = gen.generate(mf.load_fp32(path), prompts, eos=None)
    eos = free[1][4]  # as make_generate_fixtures.py: an id row 1 emits at its step 4
    comps = gen.generate(mf.load_fp32(path), prompts, eos=eos)
    lens = [len(c) for c in comps]
    assert min(lens) < gen.MAX_NEW and max(lens) == gen.MAX_NEW, (name, lens)
    out = os.path.join(gen.OUT, f"{name}.json")
    with open(out, "w") as f:
        json.dump({"model": name, "prompts": prompts, "eos_token_id": eos, "max_new_tokens": gen.MAX_NEW,
                   "completions": comps}, f)
    os.chmod(out, 0o644)
    print(f"{name}: eos {eos}, completion lengths {lens}")


def build_text_model():
    src = os.path.join(mf.FIXTURES, "llama_text")
    path = os.path.join(mf.FIXTURES, "smollm3_text")
    config = smollm3(vocab_size=3021, pad_token_id=None, max_position_embeddings=2048)
    torch.manual_seed(1299)
    model = mf.make_model(SmolLM3ForCausalLM, config)
    mf.reinit_weights(model, 1299)
    mf.clean_dir(path)
    model.save_pretrained(path, safe_serialization=True)
    mf.prune_saved_files(path)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src, f), os.path.join(path, f))
        os.chmod(os.path.join(path, f), 0o644)
    print(f"smollm3_text: {mf.dir_size(path)} bytes")


def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for i, (name, config, baseline) in enumerate(specs(), start=1):
        assert config.no_rope_layers == [1, 0, 1, 0], config.no_rope_layers
        phi3.build(i, name, config, baseline, model_cls=SmolLM3ForCausalLM, seed_base=1200)
    build_text_model()
    for i, (name, _, _) in enumerate(specs()):
        generate_fixture(i, name)


if __name__ == "__main__":
    main()
