#!/usr/bin/env bash
# Datasets through `datasets` and the user's activated Python environment, for ctest:
#   run_dataset_tests.sh SOURCE_DIR BUILD_DIR
# 1. A venv of the Python rlhf embeds (BUILD_DIR/python_executable, else pythonX.Y), cached in
#    BUILD_DIR/test-venvs/datasets, with datasets, pyarrow and tests/fixtures/datasets/venv_probe
#    from PyPI. Without network (and no cached venv): exit 77 with a line saying so.
# 2. The same preference rows (tests/fixtures/datasets/pref_rows.jsonl) written with pyarrow and
#    datasets as parquet, CSV, Arrow, parquet shards in a directory and a saved DatasetDict, and
#    served as the Hub dataset org/tiny by tests/hf_dataset_server.py on 127.0.0.1 (HF_ENDPOINT).
# 3. dataset_sources_check online, then offline (HF_DATASETS_OFFLINE=1, server stopped): every
#    source gives the JSONL file's tokenised pairs; bad inputs give clear messages; the cache key
#    follows the Hub commit.
# 4. `rlhf train` with bad datasets (split test, a wrong column, a Hub id missing offline): one
#    clear message, exit non-zero, no output_dir and no prepared dataset written.
# 5. A GRPO reward function importing ssl and rlhf_venv_probe (installed only in the venv) runs
#    with the venv activated; an activated venv of another Python version is refused naming both.
set -euo pipefail
src=$(cd "$1" && pwd) bin=$(cd "$2" && pwd)
want=$(cat "$bin/python_version" 2>/dev/null || true)
if [ -z "$want" ]; then
    echo "SKIPPED: $bin has no embedded Python (RLHF_PYTHON=OFF or no libpython found)"
    exit 77
fi
py=$(cat "$bin/python_executable" 2>/dev/null || true)
[ -n "$py" ] && [ -x "$py" ] || py=$(command -v "python$want" || true)
if [ -z "$py" ]; then
    echo "FAILED: no python$want interpreter to make the test venv with (the embedded Python is $want)"
    exit 1
fi

venv=$bin/test-venvs/datasets
if [ ! -f "$venv/.ready" ]; then
    rm -rf "$venv"
    "$py" -m venv "$venv"
    # the probe is built from a copy: setuptools writes build/ and *.egg-info beside its source
    rm -rf "$bin/test-venvs/venv_probe"
    cp -r "$src/tests/fixtures/datasets/venv_probe" "$bin/test-venvs/venv_probe"
    if ! "$venv/bin/pip" install -q --disable-pip-version-check "datasets>=3" pyarrow \
        "$bin/test-venvs/venv_probe" > "$bin/test-venvs/datasets-pip.log" 2>&1; then
        if ! "$venv/bin/python" -c "import socket; socket.create_connection(('pypi.org', 443), 5)" \
            > /dev/null 2>&1; then
            echo "SKIPPED: pip cannot reach PyPI (no network) to install datasets and pyarrow"
            rm -rf "$venv"
            exit 77
        fi
        cat "$bin/test-venvs/datasets-pip.log"
        echo "FAILED: pip install datasets pyarrow into $venv"
        exit 1
    fi
    touch "$venv/.ready"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rlhf-datasets-XXXXXX")
server_pid=""
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2> /dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
# Everything the libraries cache goes under $work: nothing outside is read or written.
export HF_HOME=$work/hf HF_HUB_DISABLE_TELEMETRY=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1
export OMP_NUM_THREADS=1
unset HF_DATASETS_OFFLINE HF_HUB_OFFLINE HF_TOKEN PYTHONHOME PYTHONPATH CONDA_PREFIX || true

cp "$src/tests/fixtures/datasets/pref_rows.jsonl" "$work/rows.jsonl"
"$venv/bin/python" - "$work" << 'EOF'
import json, os, shutil, sys
import datasets, pyarrow as pa, pyarrow.csv as pacsv, pyarrow.parquet as pq
work = sys.argv[1]
rows = [json.loads(line) for line in open(os.path.join(work, "rows.jsonl"))]
table = pa.Table.from_pylist(rows)
pq.write_table(table, os.path.join(work, "rows.parquet"))
shutil.copy(os.path.join(work, "rows.parquet"), os.path.join(work, "rows.data"))
pacsv.write_csv(table, os.path.join(work, "rows.csv"))
with pa.ipc.new_stream(os.path.join(work, "rows.arrow"), table.schema) as w:
    w.write_table(table)
os.makedirs(os.path.join(work, "shards"))
half = len(rows) // 2
pq.write_table(table.slice(0, half), os.path.join(work, "shards", "train-00000-of-00002.parquet"))
pq.write_table(table.slice(half), os.path.join(work, "shards", "train-00001-of-00002.parquet"))
datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(
    os.path.join(work, "saved"))
pq.write_table(pa.Table.from_pylist([{"prompt": r["question"], "chosen": r["chosen"],
                                      "rejected": r["rejected"]} for r in rows]),
               os.path.join(work, "wrong.parquet"))
hub = os.path.join(work, "hub", "org", "tiny", "data")
os.makedirs(hub)
pq.write_table(table, os.path.join(hub, "train-00000-of-00001.parquet"))
EOF

"$venv/bin/python" "$src/tests/hf_dataset_server.py" "$work/hub" "$work/port" "$work/requests.log" &
server_pid=$!
for _ in $(seq 100); do [ -f "$work/port" ] && break; sleep 0.1; done
export HF_ENDPOINT=http://127.0.0.1:$(cat "$work/port")

# The venv, activated as bin/activate does it.
activate() { export VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH; }
(activate && "$bin/tests/dataset_sources_check" "$work" online "$work/hub")
grep -q "resolve/.*/data/train-00000-of-00001.parquet" "$work/requests.log" || {
    echo "FAILED: the Hub dataset was not downloaded from the local endpoint"
    exit 1
}
kill "$server_pid"
wait "$server_pid" 2> /dev/null || true
server_pid=""
(activate && HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 "$bin/tests/dataset_sources_check" "$work" offline "$work/hub")

# 4. bad datasets through the CLI: one message, nothing written
fails=0
bad_run() { # NAME ENTRY WANT: `rlhf train` must fail with WANT in its message and write nothing
    local name=$1 entry=$2 wanted=$3
    mkdir -p "$work/cli"
    cat > "$work/cli/$name.yaml" << EOF
base_model: $src/models/tiny-arith
rl: dpo
learning_rate: 1e-3
max_steps: 1
output_dir: $work/cli/out-$name
dataset_prepared_path: $work/cli/prepared-$name
datasets:
  - $entry
    type: chatml.intel
EOF
    local out rc=0
    out=$(cd "$work" && activate && HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 \
        "$bin/rlhf" train "$work/cli/$name.yaml" 2>&1) || rc=$?
    local msg
    msg=$(printf '%s\n' "$out" | grep "rlhf: error" || true)
    if [ "$rc" = 0 ] || [[ "$msg" != *"$wanted"* ]] || [ "$(printf '%s\n' "$msg" | grep -c .)" != 1 ]; then
        echo "FAILED: $name: exit $rc, want one error containing '$wanted'; got:"
        printf '%s\n' "$out"
        fails=$((fails + 1))
    fi
    if [ -e "$work/cli/out-$name" ] || [ -e "$work/cli/prepared-$name" ]; then
        echo "FAILED: $name: something was written"
        fails=$((fails + 1))
    fi
}
bad_run split_test "path: $work/rows.jsonl
    split: test" 'split: "test": local files'
bad_run split_hub "path: org/tiny
    split: test" 'Unknown split "test"'
bad_run wrong_column "path: $work/wrong.parquet" 'wrong.parquet: row 0: missing field "question"'
bad_run missing_offline "path: org/missing" 'org/missing'

# 5. the user's venv: a reward function importing ssl and a package only the venv has
if "$py" -c "import rlhf_venv_probe" > /dev/null 2>&1; then
    echo "FAILED: $py itself imports rlhf_venv_probe: the check below would prove nothing"
    exit 1
fi
cat > "$work/venv_rewards.py" << 'EOF'
import ssl  # the stdlib's compiled _ssl: of the embedded libpython's own installation
import rlhf_venv_probe  # only in the activated venv


def probe(completions, **kwargs):
    return [rlhf_venv_probe.SCORE for _ in completions]
EOF
printf '{"prompt": "What is 1 + 2?"}\n{"prompt": "What is 3 + 4?"}\n' > "$work/prompts.jsonl"
cat > "$work/grpo.yaml" << EOF
base_model: $src/models/tiny-arith
rl: grpo
trl:
  num_generations: 4
  max_completion_length: 4
  reward_funcs: [venv_rewards.probe]
datasets:
  - path: $work/prompts.jsonl
micro_batch_size: 4
gradient_accumulation_steps: 1
max_steps: 1
learning_rate: 1e-4
output_dir: $work/grpo-out
EOF
if ! out=$(cd "$work" && activate && "$bin/rlhf" train grpo.yaml 2>&1); then
    printf '%s\n' "$out"
    echo "FAILED: a reward function importing a venv-only package did not run"
    fails=$((fails + 1))
elif ! grep -q '"rewards/probe/mean":0.625' "$work/grpo-out/metrics.jsonl"; then
    echo "FAILED: the venv reward's score is not in metrics.jsonl"
    fails=$((fails + 1))
fi
mkdir -p "$work/venv-other/lib/python3.99/site-packages"
printf 'home = /nowhere\nversion = 3.99.1\n' > "$work/venv-other/pyvenv.cfg"
out=$(cd "$work" && VIRTUAL_ENV=$work/venv-other "$bin/rlhf" train grpo.yaml --output_dir "$work/grpo-other" 2>&1) && {
    echo "FAILED: a Python 3.99 venv was accepted"
    fails=$((fails + 1))
}
if [[ "$out" != *"is Python 3.99, but this rlhf embeds Python $want"* ]]; then
    printf '%s\n' "$out"
    echo "FAILED: the version mismatch message does not name both versions"
    fails=$((fails + 1))
fi

# py_env.h invariant 1: a venv made from another installation of the same version (here or on
# a machine with both Debian's and a pyenv/conda Python X.Y) still gets the stdlib of the
# embedded libpython's own installation (a foreign _ssl failed with `undefined symbol`), and the
# venv's site-packages.
home=$(cat "$bin/python_home" 2>/dev/null || true)
foreign=""
if [ -n "$home" ]; then
    for cand in $(which -a "python$want" 2> /dev/null) "/usr/bin/python$want"; do
        [ -x "$cand" ] || continue
        base=$("$cand" -c "import os, sys; print(os.path.realpath(sys.base_prefix))" 2> /dev/null) || continue
        if [ "$base" != "$(realpath "$home")" ]; then
            foreign=$cand
            break
        fi
    done
fi
if [ -z "$foreign" ]; then
    echo "note: no second Python $want installation here; the foreign-venv stdlib check is not run"
else
    "$foreign" -m venv --without-pip "$work/venv-foreign"
    site=$work/venv-foreign/lib/python$want/site-packages
    echo "PROBE = 1" > "$site/rlhf_foreign_probe.py"
    cat > "$work/foreign_rewards.py" << 'EOF'
import os
import ssl

import rlhf_foreign_probe  # only in the foreign venv

HOME = os.path.realpath(os.environ["RLHF_TEST_PYTHON_HOME"]) + os.sep


def stdlib_home(completions, **kwargs):
    own = all(os.path.realpath(m.__file__).startswith(HOME) for m in (os, ssl, ssl._ssl))
    return [float(own and rlhf_foreign_probe.PROBE == 1) for _ in completions]
EOF
    sed -e 's/venv_rewards.probe/foreign_rewards.stdlib_home/' -e "s#grpo-out#grpo-foreign#" \
        "$work/grpo.yaml" > "$work/grpo-foreign.yaml"
    if ! out=$(cd "$work" && VIRTUAL_ENV=$work/venv-foreign PATH=$work/venv-foreign/bin:$PATH \
        RLHF_TEST_PYTHON_HOME=$home \
        "$bin/rlhf" train grpo-foreign.yaml 2>&1); then
        printf '%s\n' "$out"
        echo "FAILED: a reward in a venv of $foreign did not run"
        fails=$((fails + 1))
    elif ! grep -q '"rewards/stdlib_home/mean":1.0' "$work/grpo-foreign/metrics.jsonl"; then
        echo "FAILED: with a venv of $foreign, the stdlib did not come from $home"
        fails=$((fails + 1))
    fi
fi

[ "$fails" = 0 ] || exit 1
echo "run_dataset_tests: all passed"
