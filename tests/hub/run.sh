#!/usr/bin/env bash
# ctest's hub_download_push: tests/hub/test_hub.py (the real huggingface_hub client against a
# Hub served on 127.0.0.1) in a virtual environment of the Python version rlhf embeds, made once
# in the build directory with huggingface_hub pinned (pip, from PyPI).
#
# usage: run.sh RLHF_BINARY SOURCE_DIR BUILD_DIR PYTHON_VERSION [LIBRLHF]
# PYTHON_VERSION is "MAJOR.MINOR" of the embedded libpython, empty for a build without Python:
# then downloads and uploads are refused by design and the test is skipped (exit 77). Without a
# Python of that version, or with no way to reach PyPI at all, it is skipped too, saying why; a
# pip failure while PyPI answers is a failure. LIBRLHF (librlhf.so) adds the Python API's part;
# the environment sees the system's site-packages (numpy, which the Python API imports).
set -euo pipefail
rlhf=$1 src=$2 bin=$3 want=${4:-}
export RLHF_HUB_LIBRARY=${5:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
pin="huggingface_hub==2.4.0"
if [ -z "$want" ]; then
    echo "SKIPPED: this build has no Python: Hub downloads and uploads need huggingface_hub in" \
        "the embedded interpreter (the HF cache is read without it)"
    exit 77
fi
venv=$bin/hub-venv
if ! "$venv/bin/python" -c "import huggingface_hub" > /dev/null 2>&1; then
    py=""
    for cand in ${RLHF_TEST_PYTHON:-} /usr/bin/python3 python3; do
        command -v "$cand" > /dev/null 2>&1 || continue
        if "$cand" -c "import sys, venv, numpy; assert '%d.%d' % sys.version_info[:2] == '$want'" \
            > /dev/null 2>&1; then
            py=$cand
            break
        fi
    done
    if [ -z "$py" ]; then
        echo "SKIPPED: no Python $want with venv and numpy (the version rlhf embeds); Debian:" \
            "apt-get install python3-venv python3-numpy, or set RLHF_TEST_PYTHON"
        exit 77
    fi
    rm -rf "$venv"
    "$py" -m venv --system-site-packages "$venv"
    if ! "$venv/bin/pip" install -q --disable-pip-version-check "$pin"; then
        if ! "$venv/bin/python" -c "import socket; socket.create_connection(('pypi.org', 443), 10)" \
            > /dev/null 2>&1; then
            rm -rf "$venv"
            echo "SKIPPED: PyPI cannot be reached to install $pin into $venv"
            exit 77
        fi
        echo "pip install $pin failed while PyPI answers"
        exit 1
    fi
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
exec "$venv/bin/python" "$src/tests/hub/test_hub.py" "$rlhf" "$src" "$bin/hub-test" "$site"
