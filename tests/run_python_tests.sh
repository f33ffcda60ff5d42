#!/usr/bin/env bash
# The Python API's tests, for ctest and `make test`:
#   run_python_tests.sh pytest SOURCE_DIR BUILD_DIR   pytest python/tests against BUILD_DIR/librlhf.so
#   run_python_tests.sh pip    SOURCE_DIR BUILD_DIR   `pip install ./python` into a fresh virtual
#                                                     environment (reusing BUILD_DIR's library), then
#                                                     a one-step training from outside the tree
#   run_python_tests.sh check  SOURCE_DIR BUILD_DIR   says which Python will run them, or why none
# The interpreter must be the Python version librlhf.so embeds (BUILD_DIR/python_version, written
# by CMake; empty: a build without Python, skipped), with numpy and pytest (pip: also venv, setuptools, wheel). Tried in order:
# $RLHF_TEST_PYTHON, python3, /usr/bin/python3. None suitable: exit 77, which ctest reports as
# "Skipped", after one line saying what is missing.
set -euo pipefail
mode=$1 src=$(cd "$2" && pwd) bin=$(cd "$3" && pwd)
want=$(cat "$bin/python_version")
if [ -z "$want" ]; then
    echo "SKIPPED: $bin was configured without Python (RLHF_PYTHON=OFF, or no libpython found):" \
        "the Python API needs a librlhf.so that embeds the Python running it."
    exit 77
fi

case $mode in
pip) modules="numpy, pytest, venv, setuptools, wheel" ;;
*) modules="numpy, pytest" ;;
esac

py=""
tried=()
for cand in ${RLHF_TEST_PYTHON:-} python3 /usr/bin/python3; do
    command -v "$cand" > /dev/null 2>&1 || continue
    tried+=("$cand")
    if "$cand" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$want'; import $modules" \
        > /dev/null 2>&1; then
        py=$cand
        break
    fi
done
if [ -z "$py" ]; then
    echo "SKIPPED: the Python API tests need Python $want (the libpython librlhf.so is built" \
        "against) with $modules; tried: ${tried[*]:-none}. Debian: apt-get install" \
        "python3-numpy python3-pytest python3-venv python3-setuptools python3-wheel" \
        "(scripts/setup-deps.sh), or set RLHF_TEST_PYTHON."
    exit 77
fi

# One thread per process: the tests are many short runs on a shared machine (the thread count
# changes the speed, not what is checked).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

case $mode in
check)
    echo "Python API tests: $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
    ;;
pytest)
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cd "$work"
    RLHF_LIBRARY="$bin/librlhf.so" RLHF_CLI="$bin/rlhf" PYTHONPATH="$src/python:$src/python/tests" \
        "$py" -m pytest -q -p no:cacheprovider -rs "$src/python/tests"
    ;;
pip)
    # pip builds in the directory it is given: a copy keeps the source tree clean. With
    # RLHF_BUILD_DIR the package takes the library already built rather than building another.
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    cp -r "$src/python" "$work/python"
    rm -rf "$work/python/build" "$work/python/"*.egg-info
    "$py" -m venv --system-site-packages "$work/venv"
    RLHF_BUILD_DIR="$bin" "$work/venv/bin/python" -m pip install -q --no-build-isolation \
        --no-deps --no-index "$work/python"
    cd "$work"
    env -u RLHF_LIBRARY "$work/venv/bin/python" - "$src/models/tiny-arith" <<'PY'
import os, sys
import rlhf
from rlhf import _lib
from rlhf import SFTConfig, SFTTrainer
here = os.path.dirname(rlhf.__file__)
assert here.startswith(os.path.join(os.getcwd(), "venv")), here
assert _lib.library_path() == os.path.join(here, "librlhf.so"), _lib.library_path()
args = SFTConfig(output_dir="out", max_steps=1, per_device_train_batch_size=2)
out = SFTTrainer(model=sys.argv[1], args=args,
                 train_dataset=[{"text": "1 + 1 = 2"}, {"text": "2 + 2 = 4"}]).train()
assert out.global_step == 1, out
print("installed package at", here, "trained one step: loss", out.training_loss)
PY
    ;;
*)
    echo "usage: $0 pytest|pip|check SOURCE_DIR BUILD_DIR" >&2
    exit 2
    ;;
esac
