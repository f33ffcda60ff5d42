#!/usr/bin/env python3
"""Preference-loss fixtures for tests/test_pref_losses.c, computed by TRL's own trainers.

TRL writes its losses inline in the trainers (DPOTrainer._compute_loss, KTOTrainer._compute_loss,
ORPOTrainer.get_batch_loss_metrics, CPOTrainer.get_batch_loss_metrics), so this script builds a
real trainer for every case (TRL's own config validation and __init__ run) on the tiny
tests/fixtures/models/llama_text model, and then calls that loss method with a stand-in model
whose forward returns stored logits: a float64 leaf tensor with requires_grad. The per-sequence
log-prob sums are therefore whatever TRL's own code derives from those logits (shift,
selective_log_softmax, completion masks), and after loss.backward() the gradient TRL produces is
d loss / d logits.

Each fixture file holds one "scene" (token ids, masks, logits, precomputed reference sums) and
the cases run on it: the options, TRL's loss, d loss / d logits and TRL's logged metrics. The C
test recomputes the per-token log-probs from the logits, calls the C loss on the per-sequence
sums, spreads the gradient over the tokens as the trainer will (pref_loss.h), maps it through
the softmax to d loss / d logits and compares. Reference log-probs are given as numbers: the
trainer's precompute_ref_logps flag is switched on after __init__, so _compute_loss takes its own
branch that reads ref_chosen_logps / ref_rejected_logps (KTO: ref_logps / ref_KL_logps) from the
batch, as it does with precompute_ref_log_probs=True.

Float64 logits: every TRL operation then runs in double, so the fixture pins TRL's formulas,
not float32 rounding (except where TRL itself casts to float32: ORPO's odds ratio).

    tools/reference/.venv/bin/python tools/reference/make_pref_loss_fixtures.py   # ~20 s

Deterministic: the scenes come from fixed torch.Generator seeds; two runs write identical files.
"""
import json
import logging
import os
import sys
import types
import warnings

import torch
import transformers
import trl
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer
from trl.experimental.cpo import CPOConfig, CPOTrainer
from trl.experimental.orpo import ORPOConfig, ORPOTrainer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL_DIR = os.path.join(REPO, "tests", "fixtures", "models", "llama_text")
OUT = os.path.join(REPO, "tests", "fixtures", "pref_losses")
WORK = "/tmp/rlhf_pref_loss_fixtures"
VOCAB = 5


class StoredLogits(torch.nn.Module):
    """Stands in for the policy: returns the stored logits of the row block it is given."""

    def __init__(self, blocks):
        super().__init__()
        self.blocks = blocks  # list of (input_ids, logits)

    def forward(self, input_ids=None, **kwargs):
        for ids, logits in self.blocks:
            if ids.shape == input_ids.shape and torch.equal(ids, input_ids):
                return types.SimpleNamespace(logits=logits, aux_loss=None)
        raise KeyError("no stored logits for these input ids")


def pair_scene(seed, prompt_lens, chosen_lens, rejected_lens):
    """2B right-padded rows, chosen first then rejected (TRL's layout), pair i sharing a prompt."""
    g = torch.Generator().manual_seed(seed)
    B = len(prompt_lens)
    T = max(p + max(c, r) for p, c, r in zip(prompt_lens, chosen_lens, rejected_lens))
    ids = torch.zeros(2 * B, T, dtype=torch.long)
    attn = torch.zeros(2 * B, T, dtype=torch.long)
    comp = torch.zeros(2 * B, T, dtype=torch.long)
    for i, p in enumerate(prompt_lens):
        prompt = torch.randint(1, VOCAB, (p,), generator=g)
        for row, n in ((i, chosen_lens[i]), (B + i, rejected_lens[i])):
            ids[row, :p] = prompt
            ids[row, p:p + n] = torch.randint(1, VOCAB, (n,), generator=g)
            attn[row, :p + n] = 1
            comp[row, p:p + n] = 1
    logits = 1.5 * torch.randn(2 * B, T, VOCAB, generator=g, dtype=torch.float64)
    return g, ids, attn, comp, logits


def completion_sums(ids, comp, logits):
    """Σ over completion tokens of log softmax(logits[t-1])[ids[t]] (for choosing reference sums)."""
    lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]
    return (lp * comp[:, 1:]).sum(1)


def leaf(logits):
    return logits.detach().clone().requires_grad_(True)


def flat(t):
    return [float(x) for x in t.detach().reshape(-1).tolist()]


def scene_json(ids, attn, comp, logits, **extra):
    d = {"rows": ids.shape[0], "t_len": ids.shape[1], "vocab": VOCAB, "input_ids": ids.tolist(),
         "attention_mask": attn.tolist(), "completion_mask": comp.tolist(), "logits": flat(logits)}
    d.update(extra)
    return d


def quiet():
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    import datasets
    datasets.disable_progress_bars()


def base_args(cls, name, **kw):
    return cls(output_dir=os.path.join(WORK, name), report_to=[], use_cpu=True, bf16=False,
               gradient_checkpointing=False, per_device_train_batch_size=2, **kw)


# ---------------------------------------------------------------- DPO

DPO_CASES = [
    # name, loss_type, loss_weights, beta, label_smoothing, extra config
    ("sigmoid", ["sigmoid"], None, 0.3, 0.0, {}),
    ("sigmoid_ignores_label_smoothing", ["sigmoid"], None, 0.3, 0.2, {}),
    ("hinge", ["hinge"], None, 2.0, 0.0, {}),
    ("ipo", ["ipo"], None, 0.2, 0.0, {}),
    ("exo_pair", ["exo_pair"], None, 0.3, 1e-3, {}),
    ("exo_pair_eps", ["exo_pair"], None, 0.3, 0.2, {}),
    ("nca_pair", ["nca_pair"], None, 0.3, 0.0, {}),
    ("robust", ["robust"], None, 0.3, 0.2, {}),
    ("bco_pair", ["bco_pair"], None, 0.3, 0.0, {}),
    ("sppo_hard", ["sppo_hard"], None, 0.4, 0.0, {}),
    ("aot", ["aot"], None, 0.3, 0.1, {}),
    ("aot_unpaired", ["aot_unpaired"], None, 0.3, 0.1, {}),
    ("apo_zero", ["apo_zero"], None, 0.3, 0.0, {}),
    ("apo_down", ["apo_down"], None, 0.3, 0.0, {}),
    ("discopop", ["discopop"], None, 0.02, 0.0, {}),
    ("discopop_tau", ["discopop"], None, 0.3, 0.0, {"discopop_tau": 0.4}),
    ("sft", ["sft"], None, 0.3, 0.0, {}),
    ("sigmoid_norm", ["sigmoid_norm"], None, 0.5, 0.0, {}),
    ("mpo", ["sigmoid", "bco_pair", "sft"], [0.8, 0.2, 1.0], 0.1, 0.0, {}),
    ("rpo", ["sigmoid", "sft"], [1.0, 0.7], 0.3, 0.0, {}),
]

# Legacy (TRL <= 0.28) cDPO + rpo_alpha, which TRL 1.9 no longer has, written as a TRL 1.9
# multi-loss with the same value and gradient:
#   -(1-e)·logσ(z) - e·logσ(-z) + a·NLL
#     = 2(1-e)·sigmoid - (1-2e)·robust + a·sft,  robust = [-(1-e)logσ(z) + e·logσ(-z)]/(1-2e).
LEGACY_EPS, LEGACY_RPO = 0.2, 0.5
DPO_CASES.append(("legacy_cdpo_rpo", ["sigmoid", "robust", "sft"],
                  [2 * (1 - LEGACY_EPS), -(1 - 2 * LEGACY_EPS), LEGACY_RPO], 0.3, LEGACY_EPS,
                  {"rlhf": {"legacy_compat": True, "loss_type": ["sigmoid"], "loss_weights": [1.0],
                            "label_smoothing": LEGACY_EPS, "rpo_alpha": LEGACY_RPO}}))


def make_dpo(model, tok):
    B = 4
    g, ids, attn, comp, logits = pair_scene(20, [2, 3, 1, 2], [3, 1, 4, 2], [2, 4, 2, 1])
    sums = completion_sums(ids, comp, logits)
    ref = sums + torch.randn(2 * B, generator=g, dtype=torch.float64) * 1.5
    ref_c, ref_r = ref[:B].clone(), ref[B:].clone()
    ds = Dataset.from_dict({"prompt": ["a b"] * 2, "chosen": [" c"] * 2, "rejected": [" d"] * 2})
    cases = []
    for name, lt, lw, beta, eps, extra in DPO_CASES:
        cfg = {k: v for k, v in extra.items() if k != "rlhf"}
        args = base_args(DPOConfig, "dpo", beta=beta, loss_type=lt, loss_weights=lw,
                         label_smoothing=eps, **cfg)
        tr = DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
        tr.precompute_ref_logps = True  # read ref_chosen_logps / ref_rejected_logps from the batch
        tr.model.train()
        lg = leaf(logits)
        inputs = {"input_ids": ids, "attention_mask": attn, "completion_mask": comp,
                  "ref_chosen_logps": ref_c, "ref_rejected_logps": ref_r}
        loss = tr._compute_loss(StoredLogits([(ids, lg)]), inputs, return_outputs=False)
        loss.backward()
        metrics = {k: v[-1] for k, v in tr._metrics["train"].items()}
        case = {"name": name, "loss_type": lt, "loss_weights": lw or [1.0] * len(lt), "beta": beta,
                "label_smoothing": eps, "discopop_tau": args.discopop_tau, "loss": loss.item(),
                "d_logits": flat(lg.grad), "metrics": metrics}
        if "rlhf" in extra:
            case["rlhf_options"] = extra["rlhf"]
        cases.append(case)
        print(f"dpo {name}: loss {loss.item():.6f}")
    # hinge: the scene must have pairs on both sides of the kink
    z = 2.0 * ((sums[:B] - ref_c) - (sums[B:] - ref_r))  # the hinge case's beta
    assert (z < 0.9).any() and (z > 1.1).any(), z
    # aot: the two sorts must permute differently, or the permutation is not exercised
    u, v = sums[:B] - sums[B:], ref_c - ref_r
    assert not torch.equal(torch.argsort(u), torch.argsort(v))
    hc, hr = sums[:B] - ref_c, sums[B:] - ref_r
    assert not torch.equal(torch.argsort(hc), torch.argsort(hr))
    return {"scene": scene_json(ids, attn, comp, logits, ref_chosen_logps=flat(ref_c),
                                ref_rejected_logps=flat(ref_r)), "cases": cases}


# ---------------------------------------------------------------- KTO

def kto_scene(seed, n):
    """n unpaired rows and their KL rows (row i's prompt with row i-1's completion, TRL's pairing)."""
    g = torch.Generator().manual_seed(seed)
    plen = torch.randint(1, 4, (n,), generator=g).tolist()
    clen = torch.randint(1, 5, (n,), generator=g).tolist()
    prompts = [torch.randint(1, VOCAB, (p,), generator=g) for p in plen]
    comps = [torch.randint(1, VOCAB, (c,), generator=g) for c in clen]

    def rows(pairs):
        T = max(len(p) + len(c) for p, c in pairs)
        ids = torch.zeros(n, T, dtype=torch.long)
        attn = torch.zeros(n, T, dtype=torch.long)
        cm = torch.zeros(n, T, dtype=torch.long)
        for i, (p, c) in enumerate(pairs):
            ids[i, :len(p)], ids[i, len(p):len(p) + len(c)] = p, c
            attn[i, :len(p) + len(c)] = 1
            cm[i, len(p):len(p) + len(c)] = 1
        return ids, attn, cm

    ids, attn, cm = rows(list(zip(prompts, comps)))
    kl_ids, kl_attn, kl_cm = rows([(prompts[i], comps[i - 1]) for i in range(n)])
    logits = 1.5 * torch.randn(*ids.shape, VOCAB, generator=g, dtype=torch.float64)
    kl_logits = 1.5 * torch.randn(*kl_ids.shape, VOCAB, generator=g, dtype=torch.float64)
    return g, (ids, attn, cm, logits), (kl_ids, kl_attn, kl_cm, kl_logits)


KTO_CASES = [
    # name, loss_type, beta, desirable_weight, undesirable_weight, labels, kl shift
    ("kto_mixed", "kto", 0.3, 1.5, 0.7, [True, False, False, True, False], 0.8),
    ("kto_kl_clamped", "kto", 0.3, 1.0, 1.0, [True, False, True, True, False], -2.0),
    ("kto_all_desirable", "kto", 0.2, 1.3, 1.0, [True] * 5, 0.5),
    ("kto_all_undesirable", "kto", 0.2, 1.0, 0.6, [False] * 5, 0.5),
    ("apo_zero_unpaired", "apo_zero_unpaired", 0.3, 0.8, 1.4, [True, False, False, True, False], 0.0),
]


def make_kto(model, tok):
    n = 5
    g, (ids, attn, cm, logits), (kl_ids, kl_attn, kl_cm, kl_logits) = kto_scene(23, n)
    sums = completion_sums(ids, cm, logits)
    ref = sums + torch.randn(n, generator=g, dtype=torch.float64) * 1.5
    kl_sums = completion_sums(kl_ids, kl_cm, kl_logits)
    noise = torch.randn(n, generator=g, dtype=torch.float64)
    ds = Dataset.from_dict({"prompt": ["a b"] * 4, "completion": [" c"] * 4,
                            "label": [True, False, True, False]})
    cases = []
    for name, lt, beta, wd, wu, labels, shift in KTO_CASES:
        # ref_KL such that mean(π_KL − ref_KL) ≈ shift: the clamp at 0 is exercised by a negative one
        ref_kl = kl_sums - shift + noise
        args = base_args(KTOConfig, "kto", beta=beta, loss_type=lt, desirable_weight=wd,
                         undesirable_weight=wu)
        tr = KTOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
        tr.precompute_ref_logps = True  # read ref_logps / ref_KL_logps from the batch
        tr.model.train()
        lg, kl_lg = leaf(logits), leaf(kl_logits)
        batch = {"input_ids": ids, "attention_mask": attn, "completion_mask": cm,
                 "label": torch.tensor(labels), "ref_logps": ref.clone()}
        if lt == "kto":
            batch.update({"KL_input_ids": kl_ids, "KL_attention_mask": kl_attn,
                          "KL_completion_mask": kl_cm, "ref_KL_logps": ref_kl.clone()})
        loss = tr._compute_loss(StoredLogits([(ids, lg), (kl_ids, kl_lg)]), batch, return_outputs=False)
        loss.backward()
        assert kl_lg.grad is None  # the KL term is detached
        metrics = {k: v[-1] for k, v in tr._metrics["train"].items()}
        cases.append({"name": name, "loss_type": lt, "beta": beta, "desirable_weight": wd,
                      "undesirable_weight": wu, "label": labels, "ref_KL_logps": flat(ref_kl),
                      "loss": loss.item(), "d_logits": flat(lg.grad), "metrics": metrics})
        print(f"kto {name}: loss {loss.item():.6f} kl {metrics['kl']:.4f}")
    kl_scene = scene_json(kl_ids, kl_attn, kl_cm, kl_logits)
    return {"scene": scene_json(ids, attn, cm, logits, ref_logps=flat(ref), kl=kl_scene),
            "cases": cases}


# ---------------------------------------------------------------- ORPO / CPO

def odds_batch(ids, attn, comp, B):
    """The batch ORPOTrainer / CPOTrainer collate: *_labels = ids with prompt and padding at -100."""
    labels = torch.where(comp == 1, ids, torch.full_like(ids, -100))
    batch = {}
    for half, sl in (("chosen", slice(0, B)), ("rejected", slice(B, 2 * B))):
        batch[f"{half}_input_ids"] = ids[sl]
        batch[f"{half}_attention_mask"] = attn[sl]
        batch[f"{half}_labels"] = labels[sl]
    return batch


ORPO_CASES = [("orpo", 0.1), ("orpo_beta", 0.7)]

CPO_CASES = [
    # name, config
    ("sigmoid", dict(loss_type="sigmoid", beta=0.05, cpo_alpha=1.0)),
    ("sigmoid_label_smoothing", dict(loss_type="sigmoid", beta=0.05, cpo_alpha=0.5, label_smoothing=0.2)),
    ("hinge", dict(loss_type="hinge", beta=0.15, cpo_alpha=1.0)),
    ("ipo_ignores_label_smoothing", dict(loss_type="ipo", beta=0.4, cpo_alpha=0.3, label_smoothing=0.3)),
    ("hinge_alpha", dict(loss_type="hinge", beta=0.15, alpha=0.05, cpo_alpha=0.0, label_smoothing=0.2)),
    ("simpo", dict(loss_type="simpo", beta=2.0, simpo_gamma=0.5, cpo_alpha=0.0)),
    ("cpo_simpo", dict(loss_type="simpo", beta=2.0, simpo_gamma=0.8, cpo_alpha=0.7, label_smoothing=0.1)),
    ("alphapo", dict(loss_type="alphapo", beta=2.0, simpo_gamma=0.5, alpha=0.3, cpo_alpha=1.0)),
    ("sigmoid_alpha", dict(loss_type="sigmoid", beta=0.05, alpha=-0.1, cpo_alpha=1.0)),
]


def make_odds(model, tok, which):
    B = 4
    seed = 31 if which == "orpo" else 37
    _, ids, attn, comp, logits = pair_scene(seed, [2, 3, 1, 2], [3, 1, 4, 2], [2, 4, 2, 1])
    ds = Dataset.from_dict({"prompt": ["a b"] * 2, "chosen": [" c"] * 2, "rejected": [" d"] * 2})
    cases = []
    for name, cfg in (ORPO_CASES if which == "orpo" else CPO_CASES):
        if which == "orpo":
            cfg = {"beta": cfg}
            args = base_args(ORPOConfig, "orpo", **cfg)
            tr = ORPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
        else:
            args = base_args(CPOConfig, "cpo", **cfg)
            tr = CPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
        tr.model.train()
        lg = leaf(logits)
        loss, metrics = tr.get_batch_loss_metrics(StoredLogits([(ids, lg)]), odds_batch(ids, attn, comp, B))
        loss.backward()
        case = {"name": name, "config": cfg, "beta": args.beta}
        if which == "cpo":  # what CPOConfig made of the config (alphapo: simpo with cpo_alpha 0)
            case.update(loss_type=args.loss_type, cpo_alpha=args.cpo_alpha, simpo_gamma=args.simpo_gamma,
                        label_smoothing=args.label_smoothing, alpha=args.alpha)
        case.update(loss=loss.item(), d_logits=flat(lg.grad), metrics=metrics)
        cases.append(case)
        print(f"{which} {name}: loss {loss.item():.6f}")
    return {"scene": scene_json(ids, attn, comp, logits), "cases": cases}


def main():
    quiet()
    torch.manual_seed(0)
    os.makedirs(OUT, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32)
    versions = {"trl_version": trl.__version__, "torch_version": torch.__version__,
                "transformers_version": transformers.__version__}
    for name, make in (("dpo", make_dpo), ("kto", make_kto),
                       ("orpo", lambda m, t: make_odds(m, t, "orpo")),
                       ("cpo", lambda m, t: make_odds(m, t, "cpo"))):
        data = dict(versions, **make(model, tok))
        with open(os.path.join(OUT, f"{name}.json"), "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
