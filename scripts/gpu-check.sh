#!/usr/bin/env bash
# One command for a lent H100/H200 (issue 29): what the machine is, whether the project builds
# there, the device tests twice, compute-sanitizer on them, then one summary table, last (the run
# tool returns the end of the output). Full logs go to $OUT (the run tool's folder) or
# ./gpu-check-logs. Runs in well under 10 minutes.
#
# Prepared on the CPU machine first: `bash scripts/gpu-bundle.sh` builds the CUDA build there and
# packs its binaries and libraries into build-gpu/bundle, then
#   run(command="bash scripts/gpu-check.sh", carry=["build-gpu/bundle"], timeout_s=590)
# The device reaches no package registry, so the bundle is what runs when the project's Debian
# libraries are missing there; where they are present, this script also builds the tree there
# with ninja and runs the fresh build's device tests instead.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=${OUT:-$root/gpu-check-logs}
mkdir -p "$logs"
bundle=${RLHF_GPU_BUNDLE:-build-gpu/bundle}
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

# cuBLASLt: the CUDA toolkit's, else the pip wheel's (nvidia-cublas, which PyTorch brings).
cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libcublasLt.so" ] || compgen -G "$d/libcublasLt.so.*" > /dev/null && cuda_lib=$d && break
done
pip_cublas=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null || true)
echo "cuBLASLt: toolkit ${cuda_lib:-none}; pip wheel ${pip_cublas:-none}"
note "cublasLt" "${cuda_lib:-${pip_cublas:-not found}}"

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
export LD_LIBRARY_PATH="$root/$bundle/lib:${cuda_lib}:${pip_cublas}:${LD_LIBRARY_PATH:-}"
export RLHF_TEST_SOURCE_DIR=$root RLHF_TEST_BINARY_DIR=$root/$bindir
echo "$(wc -l < "$tests") device tests"

section "device tests, twice"
failed=0
while read -r label name bin args; do
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

section "compute-sanitizer (memcheck, racecheck) on the gpu tests"
if command -v compute-sanitizer > /dev/null; then
    while read -r label name bin args; do
        [ "$label" = gpu ] || continue
        for tool in memcheck racecheck; do
            timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin" $args \
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

section "benchmarks"
# bench/gpu_*.sh, each printing its own table (none yet: the CUDA Backend is still to come).
ran=0
for b in bench/gpu_*.sh; do
    [ -e "$b" ] || continue
    timeout 240 bash "$b" "$bindir" 2>&1 | tee "$logs/$(basename "$b").log" | tail -20
    ran=$((ran + 1))
done
note "benchmarks" "$ran run"

printf '\n==== summary ====\n'
printf '%s\n' "${summary[@]}"
echo "failures: $failed (logs in $logs)"
[ "$failed" -eq 0 ]
