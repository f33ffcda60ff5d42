#!/bin/sh
# Installs the Python stack the benchmarks compare against (torch, transformers, TRL, peft) from
# PyPI into a virtualenv, at the versions of bench/requirements.txt. The same environment serves
# the fixture scripts of tools/reference/.
#
#   bench/setup_python.sh [--8bit] [VENV]     # VENV: tools/reference/.venv (git-ignored)
#
# --8bit also installs bitsandbytes, for the --adamw-8bit runs of dpo_step_bench.py.
# PyPI's torch brings its CUDA libraries (a few GB): install once per machine.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
extra=""
if [ "${1:-}" = "--8bit" ]; then
    extra="bitsandbytes==0.50.2"
    shift
fi
venv=${1:-$root/tools/reference/.venv}
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" || {
        echo "setup_python.sh: could not create a virtualenv at $venv" \
            "(on Debian: apt-get install python3-venv)" >&2
        exit 1
    }
fi
"$venv/bin/pip" install --upgrade pip
# shellcheck disable=SC2086  # $extra is empty or one requirement
"$venv/bin/pip" install -r "$root/bench/requirements.txt" $extra
"$venv/bin/python" -c "import torch, transformers, trl, peft; print('installed: torch', torch.__version__,
'transformers', transformers.__version__, 'trl', trl.__version__, 'peft', peft.__version__)"
echo "run the benchmarks with $venv/bin/python bench/<name>_bench.py"
