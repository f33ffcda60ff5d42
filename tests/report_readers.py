"""Reads a run's TensorBoard event files and W&B offline run back with the packages' own readers
(tensorboard's EventAccumulator, wandb's DataStore and its Record protobuf) and checks that every
scalar of the run's metrics.jsonl is there under HF's tag (rewrite_logs) at its step.

    python report_readers.py OUTPUT_DIR WANDB_DIR   (WANDB_DIR: the run's $WANDB_DIR; "-": no W&B)
"""
import glob
import json
import math
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def hf_tag(key):
    """transformers.integrations.integration_utils.rewrite_logs, one key."""
    for prefix in ("eval_", "test_"):
        if key.startswith(prefix):
            return prefix[:-1] + "/" + key[len(prefix):]
    return "train/" + key


def scalars(metrics_path):
    """(tag, step, value) of every number of metrics.jsonl but the step itself."""
    out = []
    with open(metrics_path) as f:
        for line in f:
            entry = json.loads(line)
            for k, v in entry.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    out.append((hf_tag(k), entry["step"], v))
    return out


def tensorboard_values(out_dir):
    runs = glob.glob(out_dir + "/runs/*/")
    assert len(runs) == 1, f"expected one run directory under {out_dir}/runs: {runs}"
    acc = EventAccumulator(runs[0], size_guidance={"scalars": 0})
    acc.Reload()
    got = {}
    for tag in acc.Tags()["scalars"]:
        for ev in acc.Scalars(tag):
            got.setdefault((tag, ev.step), []).append(ev.value)
    return got


def wandb_values(wandb_dir):
    from wandb.proto import wandb_internal_pb2
    from wandb.sdk.internal import datastore

    files = glob.glob(wandb_dir + "/wandb/offline-run-*/run-*.wandb")
    assert len(files) == 1, f"expected one offline run under {wandb_dir}/wandb: {files}"
    store = datastore.DataStore()
    store.open_for_scan(files[0])
    got = {}
    while True:
        data = store.scan_data()
        if data is None:
            break
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") != "history":
            continue
        row = {(i.key or "/".join(i.nested_key)): json.loads(i.value_json) for i in rec.history.item}
        step = row.get("train/global_step")
        for tag, v in row.items():
            got.setdefault((tag, step), []).append(v)
    return got


def check(name, got, want, rel):
    missing = [(t, s, v) for t, s, v in want
               if not any(math.isclose(g, v, rel_tol=rel, abs_tol=1e-30) for g in got.get((t, s), []))]
    assert not missing, f"{name}: {len(missing)} of {len(want)} scalars missing, e.g. {missing[:5]}"
    print(f"{name}: all {len(want)} scalars of metrics.jsonl found at their steps")


def main():
    out_dir, wandb_dir = sys.argv[1], sys.argv[2]
    want = scalars(out_dir + "/metrics.jsonl")
    assert any(t == "train/loss" for t, _, _ in want) and any(t.startswith("eval/") for t, _, _ in want)
    check("tensorboard", tensorboard_values(out_dir), want, 1e-6)  # simple_value is a float32
    # metrics.jsonl keeps 7 significant digits (JSON_REAL_PRECISION(7)); wandb gets the double
    if wandb_dir != "-":
        check("wandb", wandb_values(wandb_dir), want, 1e-6)


if __name__ == "__main__":
    main()
