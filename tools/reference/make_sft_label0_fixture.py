#!/usr/bin/env python3
"""SFT on `type: completion`-like rows whose first label (the BOS) is not -100, through the real
transformers Trainer: one optimizer window of 2 micro-batches x 2 right-padded rows.

What it pins down (issue 33 follow-up): Trainer._get_num_items_in_batch counts labels[..., 1:]
for a causal LM (ForCausalLMLoss shifts the labels, so position 0 is never a target), and the
model's loss is sum / num_items_in_batch. The window is run with Trainer.training_step (the loss
the model computes, the backward Trainer does), then clip_grad_norm_ as Trainer does; writes the
window's logged loss (sum of training_step's returns), grad_norm, and num_items_in_batch, and
the eval_loss of all its rows as one evaluation batch (Trainer.prediction_step: the mean over
labels[..., 1:]) to tests/fixtures/training/sft_label0.json.

It also runs the real Trainer.evaluate on the same rows with per_device_eval_batch_size
EVAL_BATCH (batches of 3 and 1 rows: unequal label counts, a last partial batch): the evaluation
loop repeats each batch's mean loss batch-size times and takes the mean over rows
(trainer.py evaluation_loop, `losses.repeat(batch_size)` ... `losses.mean()`), written as
eval_loss_batched; eval_loss_token_mean (all label tokens as one mean) is written beside it to
show the two differ.

    /work/venv-ref/bin/python tools/reference/make_sft_label0_fixture.py
"""
import json
import os
import sys
import tempfile

import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "training")
MODEL = "llama_text"
ACCUM, BATCH = 2, 2
EVAL_BATCH = 3


def make_micro_batches(vocab, bos, seed=11):
    """Rows start with BOS and every real token is a label, BOS included (completion data);
    the last row of each micro-batch masks a prompt instead, so both kinds mix."""
    g = torch.Generator().manual_seed(seed)
    mbs = []
    for _ in range(ACCUM):
        lens = torch.randint(4, 10, (BATCH,), generator=g).tolist()
        T = max(lens)
        ids, attn, labels = [], [], []
        for r, n in enumerate(lens):
            row = [bos] + torch.randint(3, vocab, (n - 1,), generator=g).tolist()
            p = 0 if r < BATCH - 1 else 2
            ids.append(row + [0] * (T - n))
            attn.append([1] * n + [0] * (T - n))
            labels.append([0] * p + [1] * (n - p) + [0] * (T - n))
        mbs.append({"input_ids": ids, "attention_mask": attn, "label_mask": labels})
    return mbs


def main():
    torch.manual_seed(0)
    model = mf.load_fp32(os.path.join(mf.FIXTURES, MODEL))
    mbs = make_micro_batches(model.config.vocab_size, model.config.bos_token_id)
    batches = []
    for mb in mbs:
        ids = torch.tensor(mb["input_ids"])
        lab = torch.where(torch.tensor(mb["label_mask"]).bool(), ids, torch.tensor(-100))
        batches.append({"input_ids": ids, "attention_mask": torch.tensor(mb["attention_mask"]),
                        "labels": lab})
    with tempfile.TemporaryDirectory() as tmp:
        args = transformers.TrainingArguments(output_dir=tmp, report_to=[], use_cpu=True,
                                              gradient_accumulation_steps=ACCUM,
                                              per_device_train_batch_size=BATCH)
        trainer = transformers.Trainer(model=model, args=args)
        n_items = int(trainer._get_num_items_in_batch(batches, torch.device("cpu")))
        all_labels = sum(int(b["labels"].ne(-100).sum()) for b in batches)
        assert n_items == all_labels - (BATCH - 1) * ACCUM, (n_items, all_labels)  # one BOS label a micro-batch
        loss = 0.0
        for b in batches:
            loss += float(trainer.training_step(model, dict(b), n_items))
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        # eval_loss of the same rows as one evaluation batch, after the window (no optimizer step
        # was taken): the loss Trainer's evaluation loop takes from prediction_step
        T = max(len(b["input_ids"][0]) for b in batches)
        pad = lambda x, v: torch.nn.functional.pad(x, (0, T - x.shape[1]), value=v)  # noqa: E731
        all_rows = {k: torch.cat([pad(b[k], -100 if k == "labels" else 0) for b in batches])
                    for k in batches[0]}
        eval_loss = float(trainer.prediction_step(model, all_rows, prediction_loss_only=True)[0])
        # the same rows through Trainer.evaluate, EVAL_BATCH rows an eval batch, right-padded
        rows = []
        for k in range(all_rows["input_ids"].shape[0]):
            n = int(all_rows["attention_mask"][k].sum())
            rows.append({key: all_rows[key][k, :n] for key in all_rows})

        def collate(feats):
            t = max(len(f["input_ids"]) for f in feats)
            return {key: torch.stack([torch.nn.functional.pad(f[key], (0, t - len(f[key])),
                                                              value=-100 if key == "labels" else 0)
                                      for f in feats]) for key in feats[0]}

        trainer.args.per_device_eval_batch_size = EVAL_BATCH
        trainer.data_collator = collate
        eval_loss_batched = float(trainer.evaluate(eval_dataset=rows)["eval_loss"])
        # the old rule for contrast: one mean over every shifted label token
        eval_loss_token_mean = eval_loss
        assert abs(eval_loss_batched - eval_loss_token_mean) > 1e-3, (eval_loss_batched, eval_loss)
    print(f"num_items_in_batch {n_items} (labels incl. position 0: {all_labels}) "
          f"loss {loss:.6f} grad_norm {grad_norm:.6f} eval_loss {eval_loss:.6f} "
          f"eval_loss_batched {eval_loss_batched:.6f}")
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "sft_label0.json")
    with open(path, "w") as f:
        json.dump(dict(model=MODEL, accumulation=ACCUM, micro_batches=mbs,
                       num_items_in_batch=n_items, labels_with_position0=all_labels,
                       loss=loss, grad_norm=grad_norm, eval_loss=eval_loss, eval_batch_size=EVAL_BATCH,
                       eval_loss_batched=eval_loss_batched, eval_loss_token_mean=eval_loss_token_mean,
                       torch_version=torch.__version__,
                       transformers_version=transformers.__version__), f, separators=(",", ":"))
    os.chmod(path, 0o644)


if __name__ == "__main__":
    main()
