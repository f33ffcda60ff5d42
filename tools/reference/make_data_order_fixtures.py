#!/usr/bin/env python3
"""The order HF's Trainer (what TRL's SFT, DPO, ORPO, CPO/SimPO and reward trainers inherit)
feeds the training examples in, recorded from a real Trainer.train(): a model that only writes
down the example indices each forward sees, over 2 epochs. Default arguments otherwise:
RandomSampler, accelerate's SeedableRandomSampler (use_seedable_sampler=True, data_seed None, so
its seed is torch.initial_seed(), i.e. `seed` after Trainer's set_seed), one process.

Also TRL's RepeatSampler (GRPO, RLOO: a generator seeded once, one randperm per epoch), iterated
for 2 epochs as the GRPO dataloader iterates it.

Writes tests/fixtures/data_order/trainer_order.json: "cases", per case {seed, n, batch_size,
epochs, grad_accum, batches: [[idx, ...], ...]} in the order forward saw them; "repeat_sampler",
per case {seed, n, batch_size, epochs: [[idx, ...] per epoch]}.

    /work/venv-ref/bin/python tools/reference/make_data_order_fixtures.py   # from the repo root, ~5 s
"""
import json
import os
import tempfile

import datasets
import torch
import transformers
from transformers import Trainer, TrainingArguments

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures",
                   "data_order", "trainer_order.json")


class Recorder(torch.nn.Module):
    """Writes down each batch's example indices; its loss trains one weight by nothing."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen = []

    def forward(self, idx=None, **kwargs):
        self.seen.append(idx.tolist())
        return {"loss": self.w.sum() * 0.0}


def run(seed, n, batch_size, epochs, grad_accum):
    ds = datasets.Dataset.from_dict({"idx": list(range(n))})
    model = Recorder()
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, seed=seed, per_device_train_batch_size=batch_size,
                                 gradient_accumulation_steps=grad_accum, num_train_epochs=epochs,
                                 report_to=[], save_strategy="no", logging_strategy="no",
                                 use_cpu=True, dataloader_num_workers=0, disable_tqdm=True)
        Trainer(model=model, args=args, train_dataset=ds).train()
    return {"seed": seed, "n": n, "batch_size": batch_size, "epochs": epochs,
            "grad_accum": grad_accum, "batches": model.seen}


def repeat_sampler(seed, n, batch_size):
    from trl.trainer.utils import RepeatSampler
    sampler = RepeatSampler(list(range(n)), mini_repeat_count=1, batch_size=batch_size,
                            repeat_count=1, shuffle=True, seed=seed)
    return {"seed": seed, "n": n, "batch_size": batch_size,
            "epochs": [list(sampler), list(sampler)]}


def main():
    torch.set_num_threads(2)
    cases = [run(42, 10, 3, 2, 1), run(7, 13, 2, 2, 2), run(1234, 5, 5, 2, 1), run(0, 37, 4, 2, 1)]
    import trl
    repeat = [repeat_sampler(42, 12, 4), repeat_sampler(3, 11, 3)]
    doc = {"transformers": transformers.__version__, "trl": trl.__version__,
           "torch": torch.__version__, "cases": cases, "repeat_sampler": repeat}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
