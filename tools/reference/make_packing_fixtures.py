#!/usr/bin/env python3
"""Sample-packing fixture: Axolotl's multipack bins and the packed SFT loss and gradient.

Axolotl's own code makes the reference, not a re-implementation of it: the script loads
`axolotl/utils/samplers/multipack.py` (MultipackBatchSampler, numba's first-fit / next-fit) and
`axolotl/utils/collators/batching.py` (V2BatchSamplerDataCollatorForSeq2Seq) from the axolotl
wheel (downloaded once with `pip download --no-deps`, never installed: its dependency pins would
replace the venv's torch), with the two helpers multipack.py imports from the rest of axolotl
(a logger, a one-process reduce_and_broadcast) stubbed.

On 24 random examples of the tiny tests/fixtures/models/llama_text model (half with a masked
prompt, half trained on every token as `type: completion` is, so that some examples' first token
is a label), it writes tests/fixtures/packing/multipack.json with:

  examples           ids and label masks (1: trained on), sequence_len, micro_batch_size
  order              the sampler order the bins are packed from
  cases[]            MultipackBatchSampler's bins (batch_size 1, batch_max_len =
                     micro_batch_size x sequence_len: Axolotl's default with varlen attention)
                     for first-fit, bin_size 3, group_size 7, and sample_packing_sequentially
  real_batches       multipack_real_batches: MultipackBatchSampler's batches of micro_batch_size
                     bins of sequence_len, and the first batch as one micro-batch of 2 rows
                     (loss, num_items_in_batch, grad_norm as for the window); eval_bins /
                     eval_loss: the dataset-order bins in batches of micro_batch_size rows
                     through HF's evaluation loop
  evaluation         the first-fit bins of the examples in dataset order (Axolotl's eval
                     sampler) and HF's eval_loss over them: the mean of the rows' losses
  window             one optimizer window of the first-fit case's first 2 bins (gradient
                     accumulation 2), as HF's Trainer runs it on Axolotl's sdpa/eager path:
                     the collator's rows with the attention mask dropped (Axolotl's
                     sample_packing_drop_attention_mask), so transformers finds the packed
                     sequences from the reset position_ids and attends block-diagonally;
                     num_items_in_batch = labels[..., 1:] != -100 over the window; loss = sum of
                     the micro-batches' model(labels=..., num_items_in_batch=N).loss; grad_norm =
                     the total L2 norm of the accumulated gradient (before clipping).

The script checks itself: every packed example's logits equal that example run alone, and the
same rows with an explicit block-diagonal 4D mask give the same loss.

    /work/venv-ref/bin/pip install numba      # multipack.py's @numba.njit
    /work/venv-ref/bin/python tools/reference/make_packing_fixtures.py
"""
import glob
import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
import types
import zipfile

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

AXOLOTL_VERSION = "0.19.0"
CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache", "axolotl")
OUT = os.path.join(mf.REPO, "tests", "fixtures", "packing")
MODEL = "llama_text"
N_EXAMPLES, SEQ_LEN, MICRO_BATCH = 24, 24, 2
CASES = [
    dict(name="first_fit", bin_size=200, group_size=100000, sequential=False),
    dict(name="bin_size_3", bin_size=3, group_size=100000, sequential=False),
    dict(name="group_size_7", bin_size=200, group_size=7, sequential=False),
    dict(name="sequential", bin_size=200, group_size=100000, sequential=True),
]


def axolotl_modules():
    """multipack.py and batching.py of the axolotl wheel, imported on their own."""
    wheels = glob.glob(os.path.join(CACHE, f"axolotl-{AXOLOTL_VERSION}-*.whl"))
    if not wheels:
        os.makedirs(CACHE, exist_ok=True)
        subprocess.check_call([sys.executable, "-m", "pip", "download", "--no-deps", "-d", CACHE,
                               f"axolotl=={AXOLOTL_VERSION}"])
        wheels = glob.glob(os.path.join(CACHE, f"axolotl-{AXOLOTL_VERSION}-*.whl"))
    src = os.path.join(CACHE, "src")
    with zipfile.ZipFile(wheels[0]) as z:
        for name in ("axolotl/utils/samplers/multipack.py", "axolotl/utils/collators/batching.py"):
            z.extract(name, src)
    # the two names multipack.py imports from the rest of axolotl
    for pkg in ("axolotl", "axolotl.utils"):
        sys.modules.setdefault(pkg, types.ModuleType(pkg))
    dist = types.ModuleType("axolotl.utils.distributed")
    dist.reduce_and_broadcast = lambda fn, reduce: reduce([fn()])  # one process
    sys.modules["axolotl.utils.distributed"] = dist
    log = types.ModuleType("axolotl.utils.logging")
    log.get_logger = logging.getLogger
    sys.modules["axolotl.utils.logging"] = log

    def load(rel, name):
        spec = importlib.util.spec_from_file_location(name, os.path.join(src, rel))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    return (load("axolotl/utils/samplers/multipack.py", "multipack"),
            load("axolotl/utils/collators/batching.py", "batching"))


def make_examples(vocab):
    g = torch.Generator().manual_seed(11)
    examples = []
    for i in range(N_EXAMPLES):
        n = int(torch.randint(3, SEQ_LEN + 1, (1,), generator=g))
        ids = torch.randint(0, vocab, (n,), generator=g).tolist()
        if i % 2 == 0:  # a prompt not trained on, then the response
            p = int(torch.randint(1, n - 1, (1,), generator=g))
            labels = [0] * p + [1] * (n - p)
        else:  # type: completion: every token, the first included
            labels = [1] * n
        examples.append({"input_ids": ids, "label_mask": labels})
    return examples


def pack(multipack, examples, order, case):
    lengths = np.array([len(e["input_ids"]) for e in examples])
    sampler = multipack.MultipackBatchSampler(
        order, batch_size=1, batch_max_len=MICRO_BATCH * SEQ_LEN, lengths=lengths,
        bin_size=case["bin_size"], group_size=case["group_size"], sequential=case["sequential"],
        drop_last=True, num_processes=1)
    return [batch[0] for batch in sampler.generate_batches()]


def feature(e):
    ids = e["input_ids"]
    return {"input_ids": ids, "attention_mask": [1] * len(ids),
            "labels": [t if m else -100 for t, m in zip(ids, e["label_mask"])],
            "position_ids": list(range(len(ids)))}


def block_mask(position_ids):
    """(B, 1, T, T) additive mask: causal within each run of positions counting up from 0."""
    B, T = position_ids.shape
    seq = (torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1) != 1).cumsum(-1)
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    allowed = (seq[:, :, None] == seq[:, None, :]) & causal
    return torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[:, None]


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    multipack, batching = axolotl_modules()
    model_dir = os.path.join(mf.FIXTURES, MODEL)
    model = mf.load_fp32(model_dir)
    # as Axolotl's loader does for training; with a KV cache transformers looks for no packing
    model.config.use_cache = False
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    examples = make_examples(model.config.vocab_size)
    order = torch.randperm(N_EXAMPLES, generator=torch.Generator().manual_seed(5)).tolist()
    cases = []
    for case in CASES:
        bins = pack(multipack, examples, order, case)
        assert sorted(i for b in bins for i in b) == sorted(order), case["name"]
        cases.append(dict(case, bins=bins))
        print(case["name"], [len(b) for b in bins])

    # Axolotl's collator as its trainer builds it with sample_packing (pad_to_sequence_len true)
    collator = batching.V2BatchSamplerDataCollatorForSeq2Seq(
        tok, padding=True, pad_to_multiple_of=64 * math.ceil(SEQ_LEN / 64), return_tensors="pt")
    window_bins = cases[0]["bins"][:2]
    rows = []
    for b in window_bins:
        batch = collator([[feature(examples[i]) for i in b]])
        del batch["attention_mask"]  # sample_packing_drop_attention_mask (sdpa / eager)
        rows.append(batch)
    n_items = int(sum((r["labels"][..., 1:] != -100).sum() for r in rows))

    # self-check 1: a packed example's logits are those of the example alone
    with torch.no_grad():
        for b, r in zip(window_bins, rows):
            logits = model(input_ids=r["input_ids"], position_ids=r["position_ids"]).logits[0]
            at = 0
            for i in b:
                ids = torch.tensor([examples[i]["input_ids"]])
                alone = model(input_ids=ids).logits[0]
                assert torch.allclose(logits[at:at + ids.shape[1]], alone, atol=1e-5), "leak"
                at += ids.shape[1]

    params = [p for _, p in model.named_parameters()]
    losses = []
    for r in rows:
        out = model(input_ids=r["input_ids"], position_ids=r["position_ids"], labels=r["labels"],
                    num_items_in_batch=torch.tensor(n_items))
        out.loss.backward()
        losses.append(float(out.loss.detach()))
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, float("inf")))
    # self-check 2: the explicit block-diagonal mask gives the same loss
    with torch.no_grad():
        check = sum(float(model(input_ids=r["input_ids"], position_ids=r["position_ids"],
                                attention_mask=block_mask(r["position_ids"]), labels=r["labels"],
                                num_items_in_batch=torch.tensor(n_items)).loss) for r in rows)
    assert abs(check - sum(losses)) <= 1e-6 * abs(check), (check, sum(losses))
    boundary = sum(int(examples[i]["label_mask"][0]) for b in window_bins for i in b[1:])
    print(f"window: rows {[int(r['input_ids'].shape[1]) for r in rows]}, {n_items} label tokens "
          f"({boundary} predicted across a boundary), loss {sum(losses):.6f}, grad_norm {grad_norm:.6f}")
    assert boundary > 0, "the window should score an example's first token across a boundary"

    # evaluation (eval_sample_packing): Axolotl's eval sampler packs the SequentialSampler's
    # order; HF's evaluation loop takes each row's loss (no num_items_in_batch: the mean over
    # the row's labels) and averages over rows
    eval_bins = pack(multipack, examples, list(range(N_EXAMPLES)), CASES[0])
    eval_losses = []
    with torch.no_grad():
        for b in eval_bins:
            r = collator([[feature(examples[i]) for i in b]])
            del r["attention_mask"]
            eval_losses.append(float(model(input_ids=r["input_ids"], position_ids=r["position_ids"],
                                           labels=r["labels"]).loss))
    eval_loss = float(np.mean(eval_losses))
    print(f"evaluation: {len(eval_bins)} rows, eval_loss {eval_loss:.6f}")

    # multipack_real_batches (Axolotl's layout with sdpa/eager): micro_batch_size bins of
    # sequence_len tokens per micro-batch; the first batch as one micro-batch of 2 rows
    real = multipack.MultipackBatchSampler(
        order, batch_size=MICRO_BATCH, batch_max_len=SEQ_LEN,
        lengths=np.array([len(e["input_ids"]) for e in examples]), bin_size=200,
        group_size=100000, sequential=False, drop_last=True, num_processes=1).generate_batches()
    model.zero_grad()
    batch = collator([[feature(examples[i]) for i in b] for b in real[0]])
    del batch["attention_mask"]
    real_items = int((batch["labels"][..., 1:] != -100).sum())
    out = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                labels=batch["labels"], num_items_in_batch=torch.tensor(real_items))
    out.loss.backward()
    real_norm = float(torch.nn.utils.clip_grad_norm_(params, float("inf")))
    # its evaluation: every bin of the dataset order (Axolotl's pack_parallel, which the sampler
    # calls; rlhf.c keeps the incomplete last batch the sampler would drop), batches of
    # micro_batch_size rows, HF's loop: each batch's loss repeated batch-size times, averaged
    lengths = np.array([len(e["input_ids"]) for e in examples])
    real_eval_bins = [[int(i) for i in b] for b in multipack.pack_parallel(
        lengths, bin_capacity=SEQ_LEN, group_size=100000, bin_size=200, num_processes=1)]
    repeated = []
    with torch.no_grad():
        for k in range(0, len(real_eval_bins), MICRO_BATCH):
            rows = real_eval_bins[k:k + MICRO_BATCH]
            r = collator([[feature(examples[i]) for i in b] for b in rows])
            del r["attention_mask"]
            loss = float(model(input_ids=r["input_ids"], position_ids=r["position_ids"],
                               labels=r["labels"]).loss)
            repeated += [loss] * len(rows)
    real_window = dict(batches=real, num_items_in_batch=real_items, loss=float(out.loss.detach()),
                       grad_norm=real_norm, eval_bins=real_eval_bins,
                       eval_loss=float(np.mean(repeated)))
    print(f"real batches: {[len(b) for b in real]} bins per batch; first batch loss "
          f"{real_window['loss']:.6f} grad_norm {real_norm:.6f}")

    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "multipack.json"), "w") as f:
        json.dump(dict(model=MODEL, sequence_len=SEQ_LEN, micro_batch_size=MICRO_BATCH,
                       examples=examples, order=order, cases=cases,
                       window=dict(bins=window_bins, num_items_in_batch=n_items,
                                   micro_batch_losses=losses, loss=sum(losses),
                                   grad_norm=grad_norm),
                       evaluation=dict(bins=eval_bins, row_losses=eval_losses, eval_loss=eval_loss),
                       real_batches=real_window,
                       axolotl_version=AXOLOTL_VERSION, torch_version=torch.__version__,
                       transformers_version=transformers.__version__),
                  f, separators=(",", ":"))
    os.chmod(os.path.join(OUT, "multipack.json"), 0o644)


if __name__ == "__main__":
    main()
