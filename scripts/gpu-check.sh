#!/usr/bin/env bash
# One command for a lent H100/H200 (issue 29): what the machine is, whether the project builds
# there, the device tests twice, compute-sanitizer on them, then one summary table, last (the run
# tool returns the end of the output). Full logs go to $OUT (the run tool's folder) or
# ./gpu-check-logs. Runs in well under 10 minutes.
#
# Prepared on the CPU machine first: `bash scripts/gpu-bundle.sh` builds the CUDA build there and
# packs its binaries and libraries into build-gpu/bundle, then
#   run(command="bash scripts/gpu-check.sh", carry=["build-gpu/bundle.tar.xz"], timeout_s=...)
# The device reaches no package registry, so the bundle is what runs when the project's Debian
# libraries are missing there; where they are present, this script also builds the tree there
# with ninja and runs the fresh build's device tests instead.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=${OUT:-$root/gpu-check-logs}
mkdir -p "$logs"
bundle=${RLHF_GPU_BUNDLE:-build-gpu/bundle}
# carried packed (gpu-bundle.sh): unpacked beside itself
[ -d "$bundle" ] || [ ! -f "$bundle.tar.xz" ] || tar -C "$(dirname "$bundle")" -xJf "$bundle.tar.xz"
summary=()
note() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }

section() { printf '\n==== %s ====\n' "$1"; }

section "machine"
date -u
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
    --format=csv,noheader 2> /dev/null | tee "$logs/gpu.txt"
gpu=$(head -1 "$logs/gpu.txt")
note "gpu" "${gpu:-none found}"
nvcc --version 2>&1 | tail -1
note "nvcc" "$(nvcc --version 2>/dev/null | tail -1 | sed 's/^Build //' || echo missing)"
lscpu 2>/dev/null | grep -E '^(Model name|CPU\(s\)):' | sed 's/  */ /g'

# cuBLASLt and the CUDA runtime: the toolkit's, else the pip wheels' (nvidia-cublas,
# nvidia-cuda-runtime, which PyTorch brings), every folder that holds one.
export PATH=$PATH:/usr/local/cuda/bin
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    compgen -G "$d/libcublasLt.so*" > /dev/null && cuda_lib=$d && break
done
pip_cuda=$(python3 -c '
import os, nvidia
dirs = {root for base in nvidia.__path__ for root, _, files in os.walk(base)
        if any(f.startswith(("libcudart.so", "libcublasLt.so", "libcublas.so", "libnccl.so")) for f in files)}
print(":".join(sorted(dirs)))' 2> /dev/null || true)
echo "cuBLASLt: toolkit ${cuda_lib:-none}; pip wheels ${pip_cuda:-none}"
note "cublasLt" "${cuda_lib:-${pip_cuda:-not found}}"

section "build here (ninja)"
built=""
if [ -n "${RLHF_GPU_CHECK_NO_BUILD:-}" ]; then
    note "build on the device" "skipped (RLHF_GPU_CHECK_NO_BUILD)"
elif cmake -G Ninja -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DRLHF_CUDA=ON \
        -DRLHF_PYTHON=OFF -DRLHF_MPI=OFF > "$logs/configure.log" 2>&1 &&
    timeout 300 cmake --build build-dev > "$logs/build.log" 2>&1; then
    built=build-dev
    note "build on the device" "ok (ninja, build-dev)"
else
    tail -3 "$logs/configure.log" "$logs/build.log" 2>/dev/null
    note "build on the device" "failed (see configure.log/build.log); using the bundle"
fi

# The test list: the fresh build's (ctest knows it) or the bundle's tests.txt.
tests="$logs/tests.txt"
if [ -n "$built" ]; then
    for label in gpu gpu-emu; do
        (cd "$built" && ctest -L "^$label\$" --show-only=json-v1) | python3 -c '
import json, os, sys
label, root = sys.argv[1], sys.argv[2]
for t in json.load(sys.stdin).get("tests", []):
    cmd = t.get("command") or []
    if cmd:
        print(label, t["name"], *[os.path.relpath(c, root) if c.startswith(root) else c for c in cmd])
' "$label" "$root"
    done > "$tests"
    bindir=$built
elif [ -f "$bundle/tests.txt" ]; then
    sed "s| bin/| $bundle/bin/|" "$bundle/tests.txt" > "$tests"
    bindir=$bundle/bin
else
    echo "no build and no bundle ($bundle): run scripts/gpu-bundle.sh here first" >&2
    note "tests" "none: no build, no bundle"
    printf '\n==== summary ====\n'; printf '%s\n' "${summary[@]}"
    exit 1
fi
export LD_LIBRARY_PATH="$root/$bundle/lib:${cuda_lib}:${pip_cuda}:${LD_LIBRARY_PATH:-}"
for b in "$bindir"/*; do # a library the binaries cannot find, named before anything runs
    [ -f "$b" ] && [ -x "$b" ] && ldd "$b" 2>&1 | grep 'not found' | sed "s|^|$(basename "$b"): |"
done | sort -u | head -5
export RLHF_TEST_SOURCE_DIR=$root RLHF_TEST_BINARY_DIR=$root/$bindir
echo "$(wc -l < "$tests") device tests"

section "device tests, twice"
failed=0
while read -r label name bin args; do
    # the gpu-emu tests run in every CI run; on the device only when asked (their CPU time
    # buys nothing there)
    [ "$label" = gpu ] || [ -n "${RLHF_GPU_CHECK_EMU:-}" ] || continue
    for run in 1 2; do
        start=$(date +%s%N)
        timeout 120 "$bin" $args > "$logs/$name.$run.log" 2>&1
        rc=$?
        ms=$((($(date +%s%N) - start) / 1000000))
        printf '%-8s %-28s run %d: rc %d, %d ms\n' "$label" "$name" "$run" "$rc" "$ms"
        # 77 is a skip in ctest, but here a device test that finds no device is a failure
        [ "$rc" -eq 0 ] || { failed=$((failed + 1)); tail -5 "$logs/$name.$run.log"; }
    done
    note "$name ($label)" "$(tail -1 "$logs/$name.1.log" | cut -c1-60) / rc $rc"
done < "$tests"

section "benchmarks"
# bench/gpu_*.sh, each printing its own table (bench/gpu_step.sh: DPO and GRPO steps and decoding
# beside PyTorch eager; its three tables take ~35 lines). Before the sanitizers: the figures matter
# more when the lease runs short.
ran=0
for b in bench/gpu_*.sh; do
    [ -e "$b" ] || continue
    timeout 300 bash "$b" "$bindir" 2>&1 | tee "$logs/$(basename "$b").log" | tail -45
    ran=$((ran + 1))
done
note "benchmarks" "$ran run"

section "compute-sanitizer (memcheck, racecheck) on the gpu tests"
if command -v compute-sanitizer > /dev/null; then
    while read -r label name bin args; do
        [ "$label" = gpu ] || continue
        # racecheck (shared-memory hazards) on the kernels' own test only: the model steps
        # launch the same kernels, and racecheck is the slow tool
        tools=memcheck
        [ "$name" = test_backend_ops_cuda ] && tools="memcheck racecheck"
        for tool in $tools; do
            timeout 90 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" $args \
                > "$logs/$name.$tool.log" 2>&1
            rc=$?
            echo "$name $tool: rc $rc ($(grep -c 'ERROR SUMMARY: 0 errors' "$logs/$name.$tool.log") clean summaries)"
            note "$name $tool" "rc $rc"
            [ "$rc" -eq 0 ] || failed=$((failed + 1))
        done
    done < "$tests"
else
    note "compute-sanitizer" "not on PATH"
fi

printf '\n==== summary ====\n'
printf '%s\n' "${summary[@]}"
echo "failures: $failed (logs in $logs)"
[ "$failed" -eq 0 ]
