#!/usr/bin/env bash
# Prepares, on this machine, what scripts/gpu-check.sh runs on a lent GPU machine (issue 29).
#
# Why a bundle: the device machine (the `device` tool's nvidia-h100-x1 / nvidia-h200) has CUDA
# 13.0, cmake and ninja but reaches no package registry, so the Debian libraries rlhf.c links
# (jansson, libyaml, pcre2, utf8proc, OpenBLAS, protobuf-c, ISA-L) may be missing there. This
# script builds the CUDA build here (nvcc 13.0, the device's version), portable (no
# -march=native: the device's CPU is another), without the optional parts that would drag large
# libraries along (Python, cairo, libmicrohttpd, MPI, libcurl), and copies beside it every
# shared library its binaries need that is not the C runtime, the C++ runtime, CUDA's own or NCCL
# (the device has them: NCCL in PyTorch's nvidia-nccl wheel, 218 MB unpacked; libmvec is glibc's).
# The run tool carries the result, packed: `run(command="bash scripts/gpu-check.sh",
# carry=["build-gpu/bundle.tar.xz"])`; the working tree and what is carried travel within 64 MiB,
# which this script checks.
#
# Usage: bash scripts/gpu-bundle.sh [BUILD_DIR]   (default build-gpu; ignored by git); the bundle
# is BUILD_DIR/bundle, packed as BUILD_DIR/bundle.tar.xz, carried as
# `carry=["build-gpu/bundle.tar.xz"]`.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}

mkdir -p "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DRLHF_CUDA=ON -DRLHF_NATIVE=OFF \
    -DRLHF_PYTHON=OFF -DRLHF_CAIRO=OFF -DRLHF_MICROHTTPD=OFF -DRLHF_MPI=OFF -DRLHF_CURL=OFF > "$build/configure.log"
cmake --build "$build" -j "$(nproc)"

# What travels: bin/ (rlhf and the device tests), lib/ (their shared libraries but the C/C++
# runtime and CUDA's, which the device has) and tests.txt ("label name binary args..." lines,
# binaries as bin/NAME), so gpu-check.sh needs neither ctest nor this machine's paths.
bundle="$build/bundle"
rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib"
list="$bundle/tests.txt"
: > "$list"
for label in gpu gpu-emu; do
    (cd "$build" && ctest -L "^$label\$" --show-only=json-v1) | python3 -c '
import json, os, shutil, sys
label, bindir = sys.argv[1], sys.argv[2]
for t in json.load(sys.stdin).get("tests", []):
    cmd = t.get("command") or []
    if not cmd:
        continue
    shutil.copy2(cmd[0], bindir)
    print(label, t["name"], "bin/" + os.path.basename(cmd[0]), *cmd[1:])
' "$label" "$bundle/bin" >> "$list"
done
# rlhf itself and bench/gpu_step.sh's program
cp "$build/rlhf" "$build/bench/bench_backend_step_cuda" "$bundle/bin/"
echo "gpu-bundle: $(wc -l < "$list") device tests listed in $list"

skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas|libnccl\.|libmvec\.)'
for bin in "$bundle"/bin/*; do
    ldd "$bin" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
        [[ $name =~ $skip ]] || cp -L -n "$path" "$bundle/lib/$name"
    done
done
# What travels is the working tree plus what is carried, 64 MiB together: the bundle goes
# compressed (OpenBLAS alone is 35 MiB), and gpu-check.sh unpacks it.
tar -C "$build" -cJf "$bundle.tar.xz" bundle
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
packed=$(stat -c %s "$bundle.tar.xz")
total=$(((tree + packed) / 1048576))
echo "gpu-bundle: $bundle.tar.xz is $((packed / 1048576)) MiB ($(du -sm "$bundle" | cut -f1) MiB unpacked); with the working tree $total MiB travel (limit 64 MiB); libraries: $(ls "$bundle/lib" | tr '\n' ' ')"
echo "gpu-bundle: run(command=\"bash scripts/gpu-check.sh\", carry=[\"$bundle.tar.xz\"], timeout_s=...)"
[ "$total" -lt 62 ] || { echo "gpu-bundle: too large to carry" >&2; exit 1; }
