"""Reference for the bf16 weight storage (bf16: true keeps a frozen model's weights in bf16 and
computes in fp32): for every model fixture, transformers' forward with each weight rounded to
bf16 (`param.to(torch.bfloat16).to(torch.float32)`, round to nearest even) and fp32 arithmetic,
on the same batch as reference.json. Writes tests/fixtures/models/<name>/reference_bf16.json:

  token_logp [B][T]  log_softmax(logits[b, t-1])[input_ids[b][t]] in float64, as reference.json
  logits_check       {"batch", "t0", "t1", "values"}: the same rows as reference.json's
  max_rel_vs_fp32    the largest relative change of a real token's log-prob from reference.json
                     (what the rounding alone does to this model)

Run with the reference venv: tools/reference/.venv/bin/python tools/reference/make_bf16_weight_fixtures.py
"""
import json
import pathlib

import torch

from make_model_fixtures import forward_logits, load_fp32, token_logp_from_logits

ROOT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "models"


def write_bf16_reference(ref_path):
    """reference_bf16.json next to the reference.json at ref_path (a pathlib.Path)."""
    torch.manual_seed(0)
    ref = json.loads(ref_path.read_text())
    model = load_fp32(str(ref_path.parent))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    ids = torch.tensor(ref["input_ids"])
    mask = torch.tensor(ref["attention_mask"])
    logits = forward_logits(model, ids, mask)
    lp = token_logp_from_logits(logits, ids, mask)
    fp32 = torch.tensor(ref["token_logp"], dtype=torch.float64)
    real = (mask.bool() & (fp32 != 0))
    rel = ((lp - fp32).abs() / fp32.abs())[real].max().item()
    lc = ref["logits_check"]
    out = {
        "model": ref["model"],
        "transformers_version": ref["transformers_version"],
        "torch_version": torch.__version__,
        "token_logp": lp.tolist(),
        "logits_check": {
            "batch": lc["batch"], "t0": lc["t0"], "t1": lc["t1"],
            "values": logits[lc["batch"], lc["t0"]:lc["t1"]].tolist(),
        },
        "max_rel_vs_fp32": rel,
    }
    (ref_path.parent / "reference_bf16.json").write_text(json.dumps(out) + "\n")
    print(f"{ref['model']}: max relative change of a token log-prob from fp32 {rel:.3g}")


def main():
    for ref_path in sorted(ROOT.glob("*/reference.json")):
        write_bf16_reference(ref_path)


if __name__ == "__main__":
    main()
