#!/usr/bin/env bash
# Installs the Debian packages the build needs, only when one is missing.
# Run as root it installs them; otherwise it prints the apt line and fails.
set -euo pipefail

packages=(build-essential cmake pkg-config libjansson-dev libyaml-dev libpcre2-dev
          libutf8proc-dev libopenblas-openmp-dev
          # TensorBoard event files: protobuf-c (Event messages) and ISA-L (CRC-32C)
          libprotobuf-c-dev protobuf-c-compiler libisal-dev
          # `rlhf plot` (optional to CMake, -DRLHF_CAIRO): PNG and SVG
          libcairo2-dev
          # `rlhf serve` (optional to CMake, -DRLHF_MICROHTTPD): its HTTP server
          libmicrohttpd-dev
          # GRPO generating on a server (`vllm_mode: server`, optional to CMake, -DRLHF_CURL):
          # its HTTP client
          libcurl4-openssl-dev
          # embedded CPython for users' rewards.py (optional to CMake, -DRLHF_PYTHON; a normal
          # build has it)
          libpython3-dev
          # the Python API's tests (python/): pytest over librlhf.so, `pip install ./python`
          python3-numpy python3-pytest python3-pip python3-venv python3-setuptools python3-wheel
          # multi-process training (`rlhf train --nproc N`, mpirun): Open MPI and its launcher
          libopenmpi-dev openmpi-bin
          # `make fuzz`: clang, libFuzzer (libclang_rt.fuzzer in libclang-rt-14-dev), clang's OpenMP
          clang libclang-rt-14-dev libomp-dev)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

line="apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
    echo "rlhf.c needs these Debian packages; run as root:" >&2
    echo "  apt-get update && $line" >&2
    exit 1
fi
echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
$line
