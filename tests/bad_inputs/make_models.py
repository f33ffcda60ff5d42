#!/usr/bin/env python3
"""Writes the model files of the bad-input suite (tests/bad_inputs/): one small, valid Llama
model (model/) and broken variants of it, each in the case directory that uses it.

Standard library only, deterministic: rerunning it rewrites the same bytes. The text files of
each case (args, expected, configs, datasets) are written by hand; this script makes only what
is awkward to write by hand: safetensors files and configs derived from the good model.

    python3 tests/bad_inputs/make_models.py
"""
import json
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 16,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
}


def tensor_shapes(cfg):
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    head = h // cfg["num_attention_heads"]
    kv = head * cfg["num_key_value_heads"]
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": [h],
            p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [h, h],
            p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h],
            p + "self_attn.o_proj.weight": [h, h],
            p + "mlp.gate_proj.weight": [f, h],
            p + "mlp.up_proj.weight": [f, h],
            p + "mlp.down_proj.weight": [h, f],
        })
    return shapes


def values(n, seed):
    """n floats in [-0.5, 0.5) from a 32-bit LCG (norm weights are set to 1 by the caller)."""
    out, x = [], seed
    for _ in range(n):
        x = (1664525 * x + 1013904223) & 0xFFFFFFFF
        out.append(x / 2**32 - 0.5)
    return out


def safetensors_bytes(tensors):
    """tensors: {name: (dtype, shape, raw bytes)} in the order given."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def good_tensors():
    tensors = {}
    for k, (name, shape) in enumerate(tensor_shapes(CONFIG).items()):
        n = math.prod(shape)
        vals = [1.0] * n if name.endswith("norm.weight") else values(n, k + 1)
        tensors[name] = ("F32", shape, struct.pack(f"<{n}f", *vals))
    return tensors


def write(case, name, data):
    path = os.path.join(HERE, case, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def config_text(cfg):
    return json.dumps(cfg, indent=2) + "\n"


def main():
    good = safetensors_bytes(good_tensors())
    write("model", "config.json", config_text(CONFIG))
    write("model", "model.safetensors", good)

    def broken_model(case, weights=good, config=None):
        write(case, "model/config.json", config if config is not None else config_text(CONFIG))
        write(case, "model/model.safetensors", weights)

    broken_model("model-truncated-safetensors", weights=good[: len(good) - 100])
    broken_model("model-huge-header-length", weights=struct.pack("<Q", 1 << 62) + good[8:])
    broken_model("model-header-not-json", weights=struct.pack("<Q", 16) + b"{\"a\": [1, 2, 3 " + good[24:])

    t = good_tensors()
    dtype, shape, raw = t["model.layers.0.mlp.up_proj.weight"]
    t["model.layers.0.mlp.up_proj.weight"] = (dtype, [12, 8], raw[: 12 * 8 * 4])
    broken_model("model-wrong-shape", weights=safetensors_bytes(t))

    t = good_tensors()
    dtype, shape, raw = t["model.layers.0.self_attn.v_proj.weight"]
    raw = bytearray(raw)
    raw[4 * 5: 4 * 6] = struct.pack("<f", float("nan"))
    t["model.layers.0.self_attn.v_proj.weight"] = (dtype, shape, bytes(raw))
    broken_model("model-nan-weight", weights=safetensors_bytes(t))

    t = good_tensors()
    dtype, shape, raw = t["model.embed_tokens.weight"]
    t["model.embed_tokens.weight"] = ("I32", shape, raw)
    broken_model("model-integer-dtype", weights=safetensors_bytes(t))

    # A shape whose element count overflows 64 bits: must not wrap to a small size.
    t = good_tensors()
    dtype, shape, raw = t["model.norm.weight"]
    t["model.norm.weight"] = (dtype, [1 << 33, 1 << 33, 1 << 33], raw)
    broken_model("model-huge-shape", weights=safetensors_bytes(t))

    cfg = dict(CONFIG, hidden_size="8")
    broken_model("model-config-wrong-type", config=config_text(cfg))
    broken_model("model-config-truncated", config=config_text(CONFIG)[:60])
    text = config_text(CONFIG).replace('"llama"', '"ll\xffama"').encode("latin-1")
    broken_model("model-config-invalid-utf8", config=text)

    # PEFT adapters for the good model: rank 2 on q_proj and v_proj.
    def adapter(case, config, a_shape=(2, 8)):
        prefix = "base_model.model.model.layers.0.self_attn."
        t = {}
        for k, module in enumerate(["q_proj", "v_proj"]):
            rows = 8 if module == "q_proj" else 4
            for part, shape in (("lora_A", list(a_shape)), ("lora_B", [rows, 2])):
                n = math.prod(shape)
                t[f"{prefix}{module}.{part}.weight"] = ("F32", shape, struct.pack(f"<{n}f", *values(n, 50 + k)))
        write(case, "adapter/adapter_config.json", json.dumps(config, indent=2) + "\n")
        write(case, "adapter/adapter_model.safetensors", safetensors_bytes(t))

    lora = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "lora_dropout": 0.0, "bias": "none",
            "target_modules": ["q_proj", "v_proj"], "task_type": "CAUSAL_LM"}
    adapter("adapter-wrong-shape", lora, a_shape=(2, 6))
    adapter("adapter-config-wrong-type", dict(lora, r="two"))


if __name__ == "__main__":
    main()
