#!/usr/bin/env python3
"""How save_pretrained splits a model into shards when a tensor is larger than max_shard_size:
saves the llama_tied fixture's weights with max_shard_size="10KB" (its 16 KB embedding exceeds it)
and keeps only model.safetensors.index.json, as tests/fixtures/shards/llama_tied_10KB.index.json.

The model is built fresh from its config and given the weights with load_state_dict, so the split
follows the model's state-dict (module registration) order -- huggingface_hub's algorithm. A model
that came from from_pretrained is split differently by transformers 5.23: save_pretrained's
revert_weight_conversion rebuilds its state dict in the key order of the checkpoint it was loaded
from (alphabetical for a single-file checkpoint), so which shard a tensor lands in depends on how
the model was loaded. rlhf.c uses the state-dict order; any split loads the same.

    tools/reference/.venv/bin/python tools/reference/make_shard_fixtures.py
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402


def main():
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    path = os.path.join(mf.FIXTURES, "llama_tied")
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=torch.float32)
    model.load_state_dict(mf.load_fp32(path).state_dict())
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True, max_shard_size="10KB")
        out = os.path.join(mf.REPO, "tests", "fixtures", "shards", "llama_tied_10KB.index.json")
        shutil.copy(os.path.join(tmp, "model.safetensors.index.json"), out)
        os.chmod(out, 0o644)
        print(sorted(f for f in os.listdir(tmp) if f.endswith(".safetensors")))


if __name__ == "__main__":
    main()
