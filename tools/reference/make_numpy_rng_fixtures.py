#!/usr/bin/env python3
"""NumPy's default generator and the shuffles HF `datasets` and Axolotl make with it, for
src/common/numpy_pcg64.c and the dataset shuffle of train/data_order.c (issue 34).

Writes tests/fixtures/numpy_rng/numpy_rng.json:
  "raw":          per seed, np.random.default_rng(seed).bit_generator.random_raw(8) (as decimal
                  strings: JSON integers above 2^63 do not survive every reader);
  "permutation":  per (seed, n), np.random.default_rng(seed).permutation(n), n = 0, 1, 2, ...;
  "interval":     per (seed, [max, ...]), the values NumPy's own C random_interval() returns for
                  that sequence of bounds from one default_rng(seed) (bounds at and around 2^32,
                  where it switches from 32-bit to 64-bit draws, and a pending 32-bit half across
                  the switch). random_interval is what Generator.shuffle calls per swap; no
                  permutation short of 2^32 + 2 elements reaches the 64-bit path, so it is called
                  directly: numpy/random/lib/libnpyrandom.a (shipped in NumPy's wheel) is linked
                  into a throwaway shared library with gcc and called on the generator's bitgen_t;
  "datasets":     `datasets` 5.x's own Dataset.shuffle(seed) and train_test_split(test_size,
                  seed, shuffle=True/False) on a small dataset whose rows carry their index, as
                  the row indices they return; and Axolotl 0.19's path for rl: (utils/data/rl.py
                  _load_split -> shared.py merge_datasets -> create_train_validation_split):
                  concatenate_datasets of two files, .shuffle(seed=cfg.seed), then
                  train_test_split(test_size=val_set_size, shuffle=False, seed=cfg.seed);
  "loaders":      Axolotl's order for the files tests/test_dataset_order.c writes, per path
                  (rl: drop long rows per file, then merge and shuffle; sft: merge and shuffle,
                  then drop; grpo: nothing dropped), as row ids of its train and eval splits.

    /work/venv-ref/bin/python tools/reference/make_numpy_rng_fixtures.py   # from the repo root, ~2 s
"""
import ctypes
import glob
import json
import os
import subprocess
import tempfile

import datasets
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "tests", "fixtures", "numpy_rng", "numpy_rng.json")

LONG = {2, 9, 15}  # the rows test_dataset_order.c makes longer than sequence_len
SEEDS = [0, 1, 42, 1234, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]


def numpy_random_interval_lib():
    """NumPy's random_interval from its own static library, callable through ctypes."""
    lib_a = glob.glob(os.path.join(os.path.dirname(np.random.__file__), "lib", "libnpyrandom.a"))
    if not lib_a:
        raise SystemExit("numpy/random/lib/libnpyrandom.a not found in this NumPy wheel")
    tmp = tempfile.mkdtemp()
    so = os.path.join(tmp, "npyrandom.so")
    subprocess.run(["gcc", "-shared", "-o", so, "-Wl,--whole-archive", lib_a[0],
                    "-Wl,--no-whole-archive", "-lm"], check=True)
    lib = ctypes.CDLL(so)
    lib.random_interval.restype = ctypes.c_uint64
    lib.random_interval.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
    return lib


def interval_case(lib, seed, bounds):
    bitgen = np.random.PCG64(np.random.SeedSequence(seed))
    ptr = bitgen.ctypes.bit_generator.value
    return {"seed": str(seed), "max": [str(b) for b in bounds],
            "values": [str(lib.random_interval(ptr, b)) for b in bounds]}


def rows(ids):
    return datasets.Dataset.from_dict({"idx": list(ids)})


def main():
    assert np.random.default_rng(5).permutation(10).tolist() == \
        np.random.Generator(np.random.PCG64(np.random.SeedSequence(5))).permutation(10).tolist()
    raw = [{"seed": str(s), "raw": [str(int(v)) for v in
                                    np.random.default_rng(s).bit_generator.random_raw(8)]}
           for s in SEEDS]
    perms = [{"seed": str(s), "n": n, "perm": np.random.default_rng(s).permutation(n).tolist()}
             for s in SEEDS for n in (0, 1, 2, 3, 10, 100, 1000)]
    lib = numpy_random_interval_lib()
    edge = [2**32 - 2, 2**32 - 1, 2**32, 2**32 + 1, 2**33 + 5, 2**63, 2**64 - 1]
    intervals = [interval_case(lib, s, [7] + edge + [1, 2**40, 3, 2**32 - 1, 5])
                 for s in (0, 42, 2**64 - 1)]
    # random_interval over a shuffle's bounds must be the permutation NumPy makes
    check = np.arange(50)
    bitgen = np.random.PCG64(np.random.SeedSequence(42))
    ptr = bitgen.ctypes.bit_generator.value
    for i in reversed(range(1, 50)):
        j = lib.random_interval(ptr, i)
        check[i], check[j] = check[j], check[i]
    assert check.tolist() == np.random.default_rng(42).permutation(50).tolist()

    ds_cases = []
    for seed, n in ((42, 23), (7, 10), (0, 1)):
        ds = rows(range(n))
        case = {"seed": seed, "n": n, "shuffle": list(ds.shuffle(seed=seed)["idx"]), "splits": []}
        for test_size in (0.2, 3, 0.5):
            if isinstance(test_size, int) and test_size >= n:
                continue
            for shuffle in (True, False):
                try:
                    sp = ds.train_test_split(test_size=test_size, shuffle=shuffle, seed=seed)
                except ValueError:
                    continue
                case["splits"].append({"test_size": test_size, "shuffle": shuffle,
                                       "train": list(sp["train"]["idx"]), "test": list(sp["test"]["idx"])})
        ds_cases.append(case)

    # Axolotl's rl: path, two files merged (rows 0..12 then 13..20), seed 42, val_set_size 0.25
    merged = datasets.concatenate_datasets([rows(range(0, 13)), rows(range(13, 21))])
    shuffled = merged.shuffle(seed=42)
    split = shuffled.train_test_split(test_size=0.25, shuffle=False, seed=42)
    axolotl_rl = {"seed": 42, "files": [13, 8], "val_set_size": 0.25,
                  "train": list(split["train"]["idx"]), "eval": list(split["test"]["idx"])}

    # The loaders end to end (tests/test_dataset_order.c writes the files): two files of 13 and
    # 8 rows (ids 0..12, 13..20), rows LONG too long for sequence_len, seed 42, val_set_size
    # 0.25. Axolotl 0.19's order for each path, as row ids:
    #   rl (utils/data/rl.py _load_split): per file drop long, merge_datasets, split;
    #   sft (utils/data/sft.py _load_raw_datasets): merge_datasets, then drop long, split;
    #   grpo: rl's path, whose length filter keeps every row.
    # merge_datasets (shared.py): shuffle each file first if shuffle_before_merging_datasets,
    # concatenate, shuffle if shuffle_merged_datasets; create_train_validation_split:
    # train_test_split(test_size, shuffle=False).
    def axolotl(files, seed, drop_before, drop_after, before_merging, merged=True):
        parts = [rows(f) for f in files]
        if drop_before:
            parts = [p.filter(lambda r: r["idx"] not in LONG) for p in parts]
        if before_merging:
            parts = [p.shuffle(seed=seed) for p in parts]
        ds = datasets.concatenate_datasets(parts)
        if merged:
            ds = ds.shuffle(seed=seed)
        if drop_after:
            ds = ds.filter(lambda r: r["idx"] not in LONG)
        sp = ds.train_test_split(test_size=0.25, shuffle=False, seed=seed)
        return {"train": list(sp["train"]["idx"]), "eval": list(sp["test"]["idx"])}

    files = [range(0, 13), range(13, 21)]
    loaders = {"files": [13, 8], "long": sorted(LONG), "seed": 42, "val_set_size": 0.25,
               "rl": axolotl(files, 42, True, False, False),
               "rl_before_merging": axolotl(files, 42, True, False, True),
               "rl_unshuffled": axolotl(files, 42, True, False, False, merged=False),
               "sft": axolotl(files, 42, False, True, False),
               "grpo": axolotl(files, 42, False, False, False)}

    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"numpy": np.__version__, "datasets": datasets.__version__, "raw": raw,
                   "permutation": perms, "interval": intervals, "datasets_cases": ds_cases,
                   "axolotl_rl": axolotl_rl, "loaders": loaders}, f)
        f.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
