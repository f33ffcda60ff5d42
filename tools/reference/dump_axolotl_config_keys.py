#!/usr/bin/env python3
"""Writes tests/fixtures/config_keys/axolotl_keys.txt: every key Axolotl's config schema
documents, one "scope key" line each, for test_config_keys (every one must have a row in
src/config/key_status.c, the table of what rlhf.c does with each key).

Axolotl's config reference is generated from its pydantic schema (src/axolotl/utils/schemas/);
this script reads the same classes from Axolotl's source with Python's `ast` module (importing
Axolotl would pull torch and CUDA packages in), following each class's bases as pydantic does,
and records each field under its alias when it has one (`model_type` for `type_of_model`):

    python3 tools/reference/dump_axolotl_config_keys.py AXOLOTL_CHECKOUT [COMMIT]

Scopes: top (AxolotlInputConfig), trl (TRLConfig), vllm (VllmConfig), dataset (the union of
SFTDataset, DPODataset and KTODataset: the entries of datasets: and test_datasets:), dataset_type
(the user-defined formats given as a mapping under an entry's type:). Never run by CI; rerun
when moving to a newer Axolotl.
"""
import ast
import glob
import os
import sys

SCOPES = [("top", ["AxolotlInputConfig"]), ("trl", ["TRLConfig"]), ("vllm", ["VllmConfig"]),
          ("dataset", ["SFTDataset", "DPODataset", "KTODataset"]),
          ("dataset_type", ["UserDefinedDPOType", "UserDefinedKTOType", "UserDefinedPrompterType"])]


def read_classes(schema_dir):
    classes = {}
    for path in sorted(glob.glob(os.path.join(schema_dir, "*.py"))):
        with open(path) as f:
            tree = ast.parse(f.read())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            fields = []
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    alias = None
                    if isinstance(st.value, ast.Call):
                        for kw in st.value.keywords:
                            if kw.arg == "alias":
                                alias = ast.literal_eval(kw.value)
                    if not st.target.id.startswith("_"):
                        fields.append(alias or st.target.id)
            classes[node.name] = ([ast.unparse(b) for b in node.bases], fields)
    return classes


def fields_of(classes, name):
    if name not in classes:
        return []
    bases, fields = classes[name]
    out = []
    for b in bases:
        out += fields_of(classes, b)
    return out + fields


def main():
    checkout = sys.argv[1]
    commit = sys.argv[2] if len(sys.argv) > 2 else "unknown"
    classes = read_classes(os.path.join(checkout, "src", "axolotl", "utils", "schemas"))
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(here, "..", "..", "tests", "fixtures", "config_keys", "axolotl_keys.txt")
    lines = [f"# Axolotl config schema keys (axolotl-ai-cloud/axolotl {commit}),",
             "# written by tools/reference/dump_axolotl_config_keys.py: scope key"]
    for scope, names in SCOPES:
        seen = set()
        for n in names:
            for key in fields_of(classes, n):
                if key not in seen:
                    seen.add(key)
                    lines.append(f"{scope} {key}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines) - 2} keys -> {out}")


if __name__ == "__main__":
    main()
