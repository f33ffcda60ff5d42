#!/usr/bin/env bash
# Runs every libFuzzer target (build-fuzz/fuzz_*, from `make fuzz`) for FUZZ_SECONDS each on
# its seed corpus and prints the executions; fails on the first crash, leak, UB or timeout.
# Usage: scripts/fuzz.sh BUILD_DIR [TARGET...]   (FUZZ_SECONDS, default 60; FUZZ_SEED, default 1:
# a fixed seed makes a short CI run replay a prefix of the inputs a local run already went
# through, so CI fails on a regression, not on the luck of the draw; 0 = random)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/fuzz.sh BUILD_DIR [TARGET...]}
shift
seconds=${FUZZ_SECONDS:-60}
seed=${FUZZ_SEED:-1}
"$build/fuzz_make_corpus" "$build/corpus" > /dev/null
if [ $# -eq 0 ]; then
    set -- $(ls "$build"/fuzz_* | sed -n 's|.*/fuzz_||p' | grep -vx make_corpus)
fi
mkdir -p "$build/fuzz-logs" "$build/fuzz-artifacts"
status=0
for t in "$@"; do
    dict=()
    [ -f "fuzz/dict/$t.dict" ] && dict=(-dict="fuzz/dict/$t.dict")
    log="$build/fuzz-logs/$t.log"
    # Crash inputs land in fuzz-artifacts/ (copy one to tests/fixtures/fuzz_regressions/$t/
    # once fixed). One process, one core: the fuzzer itself is single-threaded.
    if "$build/fuzz_$t" "${dict[@]}" -max_total_time="$seconds" -seed="$seed" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/$t-" \
        "$build/corpus/$t" > "$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz_$t: ok, ${runs:-?} executions in ${seconds}s"
    else
        echo "fuzz_$t: FAILED (log: $log)" >&2
        grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$log" | head -5 >&2 || true
        status=1
    fi
done
exit $status
