#!/usr/bin/env bash
# The report room end to end, for ctest (tests/CMakeLists.txt):
#   run_report_tests.sh plot    SOURCE_DIR BUILD_DIR PY   `rlhf plot` on a DPO and a GRPO run: valid
#                                                      PNG and SVG of the expected size, and two
#                                                      different runs give different images
#   run_report_tests.sh readers SOURCE_DIR BUILD_DIR PY   a DPO run with use_tensorboard and W&B
#                                                      (WANDB_MODE=offline): TensorBoard's own
#                                                      EventAccumulator and wandb's own reader of
#                                                      offline run files find every scalar of
#                                                      metrics.jsonl at its step (report_readers.py)
# PY: the libpython the build embeds (its path), or "none". The venv must be made by a python3 of
# that same installation: the embedded interpreter takes the venv's standard library from there.
# readers installs tensorboard and wandb from PyPI into BUILD_DIR/report-venv (kept for the next
# run); it is skipped (exit 77) only when PyPI cannot be reached. In a build without Python it
# checks the event files and the one warning W&B gives. plot is skipped in a build without cairo.
set -euo pipefail
mode=$1 src=$(cd "$2" && pwd) bin=$(cd "$3" && pwd) python=${4:-none}
rlhf=$bin/rlhf
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

# A tiny run of method NAME (dpo or grpo) into $work/NAME, with extra config lines in $2.
train() {
    local name=$1 extra=$2 cfg=$work/$1.yaml
    case $name in
    dpo*) cat > "$cfg" <<YAML
base_model: $src/models/tiny-arith
rl: dpo
datasets:
  - path: $src/examples/data/arith_pref_intel.jsonl
    type: chatml.intel
val_set_size: 16
eval_steps: 3
sequence_len: 64
micro_batch_size: 8
max_steps: 6
learning_rate: 2e-3
output_dir: $work/$name
YAML
    ;;
    grpo*) cat > "$cfg" <<YAML
base_model: $src/models/tiny-arith
rl: grpo
trl:
  num_generations: 8
  max_completion_length: 6
  reward_funcs: [rewards.closeness]
datasets:
  - path: $src/examples/data/arith_pref_intel.jsonl
    type: rewards.arithmetic_transform
micro_batch_size: 16
max_steps: 4
learning_rate: 3e-4
output_dir: $work/$name
YAML
    cp "$src/examples/rewards.py" "$work/"
    ;;
    esac
    printf '%s\n' "$extra" >> "$cfg" # a key given twice keeps its last value
    (cd "$work" && "$rlhf" train "$cfg" > "$work/$name.log" 2>&1) || {
        cat "$work/$name.log"
        echo "FAILED: training $name"
        exit 1
    }
}

case $mode in
plot)
    out=$("$rlhf" plot "$work/none" 2>&1) && { echo "FAILED: plot of a missing run succeeded"; exit 1; }
    if grep -q "has no cairo" <<< "$out"; then
        echo "SKIPPED: this build has no cairo (libcairo2-dev), which rlhf plot draws with: $out"
        exit 77
    fi
    grep -q "$work/none/metrics.jsonl: cannot open" <<< "$out" || { echo "FAILED: $out"; exit 1; }
    has_python=1
    train dpo_a "learning_rate: 2e-3"
    train dpo_b "learning_rate: 5e-4"
    # GRPO's reward is a Python function: only with Python in the build
    if [ "$python" != none ]; then train grpo "learning_rate: 3e-4"; else has_python=0; fi
    # the same file name for both DPO runs, so only their curves can make the images differ
    mkdir -p "$work/same"
    cp "$work/dpo_a/metrics.jsonl" "$work/same/metrics.jsonl"
    "$rlhf" plot "$work/same/metrics.jsonl" --out "$work/a.png" > /dev/null
    "$rlhf" plot "$work/same/metrics.jsonl" --out "$work/a.svg" > /dev/null
    cp "$work/dpo_b/metrics.jsonl" "$work/same/metrics.jsonl"
    "$rlhf" plot "$work/same/metrics.jsonl" --out "$work/b.png" > /dev/null
    "$rlhf" plot "$work/dpo_a" | grep -q "wrote $work/dpo_a/metrics.png"
    images=("$work/a.png" "$work/b.png" "$work/dpo_a/metrics.png")
    if [ $has_python = 1 ]; then
        "$rlhf" plot "$work/grpo" --out "$work/grpo.png" > /dev/null
        images+=("$work/grpo.png")
    fi
    python3 "$src/tests/report_images.py" "$work/a.svg" 6 "${images[@]}"
    ;;
readers)
    # Without Python in the build only TensorBoard is checked (W&B runs in the embedded
    # interpreter, whose absence gives one warning, checked too); the readers then run in a venv
    # of any python3.
    libpython=none
    [ "$python" = none ] || libpython=$(readlink -f "$python")
    venv=$bin/report-venv
    # wandb 0.22.3: the last release whose Python package still reads offline run files
    # (wandb.sdk.internal.datastore); later ones moved that reader into their Go core.
    pins="tensorboard==2.21.0 wandb==0.22.3"
    stamp="$pins for $libpython"
    if [ "$(cat "$venv/.pins" 2> /dev/null)" != "$stamp" ]; then
        rm -rf "$venv"
        py=""
        for cand in "$(dirname "$(dirname "$(dirname "$libpython")")")/bin/python3" /usr/bin/python3 python3; do
            if command -v "$cand" > /dev/null && "$cand" -c "import os, sys, sysconfig, venv, ensurepip
v = sysconfig.get_config_var
assert '$libpython' == 'none' or any(
    os.path.realpath(os.path.join(v('LIBDIR'), n or '')) == '$libpython'
    for n in (v('LDLIBRARY'), v('INSTSONAME')))" 2> /dev/null; then
                py=$cand
                break
            fi
        done
        [ -n "$py" ] || { echo "FAILED: no python3 with venv for $libpython (apt-get install python3-venv)"; exit 1; }
        "$py" -m venv "$venv"
        if ! "$venv/bin/pip" install -q $pins > "$work/pip.log" 2>&1; then
            if ! "$py" -c "import socket; socket.create_connection(('pypi.org', 443), 10)" 2> /dev/null; then
                echo "SKIPPED: PyPI cannot be reached to install $pins"
                exit 77
            fi
            cat "$work/pip.log"
            echo "FAILED: pip install $pins"
            exit 1
        fi
        echo "$stamp" > "$venv/.pins"
    fi
    # As an activated venv: the embedded interpreter finds it through PATH (python/py_embed.h)
    export VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH WANDB_MODE=offline WANDB_DIR=$work
    export WANDB_SILENT=true
    train dpo "use_tensorboard: true
wandb_project: rlhf-test
wandb_name: tiny-dpo"
    warnings=$(grep -c "^warning:" "$work/dpo.log" || true)
    if [ "$python" = none ]; then
        # one warning, naming what is missing; the event files are still checked
        if [ "$warnings" != 1 ] || ! grep -q "^warning: wandb: .*has no Python" "$work/dpo.log"; then
            cat "$work/dpo.log"
            echo "FAILED: without Python, wandb_project should give one warning saying so"
            exit 1
        fi
        "$venv/bin/python" "$src/tests/report_readers.py" "$work/dpo" -
        echo "readers: ok (TensorBoard only: no Python in this build)"
        exit 0
    fi
    if [ "$warnings" != 0 ]; then
        cat "$work/dpo.log"
        echo "FAILED: a reporter warned"
        exit 1
    fi
    "$venv/bin/python" "$src/tests/report_readers.py" "$work/dpo" "$work"
    # A reporter that cannot start warns once and the run goes on (and still writes its files).
    TENSORBOARD_LOGGING_DIR=/dev/null/tb WANDB_MODE=bogus train dpo_broken "use_tensorboard: true
wandb_project: rlhf-test"
    n=$(grep -c "^warning: " "$work/dpo_broken.log" || true)
    if [ "$n" != 2 ] || ! grep -q "warning: tensorboard: .*/dev/null/tb" "$work/dpo_broken.log" ||
        [ ! -s "$work/dpo_broken/metrics.jsonl" ] || [ ! -f "$work/dpo_broken/model.safetensors" ]; then
        cat "$work/dpo_broken.log"
        echo "FAILED: broken reporters should warn once each (got $n warnings) and the run finish"
        exit 1
    fi
    echo "readers: ok"
    ;;
*)
    echo "usage: run_report_tests.sh plot|readers SOURCE_DIR BUILD_DIR PYTHON_VERSION" >&2
    exit 2
    ;;
esac
