#!/usr/bin/env bash
# Runs the bad-input suite: every directory here with an `args` file is one case.
#
#   args      the arguments to rlhf, one per line, run with the case directory as working
#             directory (paths in the case are relative to it)
#   expected  first line "exit N", then the exact text rlhf must print on stderr (where the
#             case directory's absolute path appears, it is written <case>)
#   expected.no-python   the same for a build without Python, when RLHF_BAD_INPUTS_NO_PYTHON=1
#             (CMake sets it there): a case whose reward function is Python is refused for that
#
# Each case runs in a copy of this folder (so nothing lands in the source tree) and must
# print exactly the expected text, exit with exactly that status, and leave every file that
# was there before untouched and no new file behind. Paths such as ../model (the good model
# the broken ones are made from) and ../../../models/tiny-arith (the embedded model) resolve in
# the copy as in the source tree.
#
# Usage: tests/bad_inputs/run.sh RLHF_BINARY [CASE...]
#        RLHF_BAD_INPUTS_RECORD=1 tests/bad_inputs/run.sh ... writes each case's `expected` from
#        what rlhf printed (for a new case: read every line before committing it)
set -uo pipefail
rlhf=$(realpath "${1:?usage: run.sh RLHF_BINARY [CASE...]}")
shift
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/rlhf-bad-inputs.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tests"
cp -a "$src" "$work/tests/bad_inputs"
ln -s "$(realpath "$src/../../models")" "$work/models"

if [ $# -eq 0 ]; then
    set -- $(cd "$src" && for d in */; do [ -f "$d/args" ] && echo "${d%/}"; done)
fi
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum); }

failed=0
for case in "$@"; do
    dir="$work/tests/bad_inputs/$case"
    mapfile -t args < "$dir/args"
    expected=expected
    [ -n "${RLHF_BAD_INPUTS_NO_PYTHON:-}" ] && [ -f "$dir/expected.no-python" ] &&
        expected=expected.no-python
    want_exit=$(head -n 1 "$dir/$expected" | sed -n 's/^exit \([0-9]*\)$/\1/p')
    tail -n +2 "$dir/$expected" > "$work/want.txt"
    before=$(snapshot "$dir")
    (cd "$dir" && "$rlhf" "${args[@]}" > /dev/null 2> "$work/stderr.txt")
    got_exit=$?
    # the copy's absolute path (Python tracebacks name files by it) is written <case>
    sed "s|$dir|<case>|g" "$work/stderr.txt" > "$work/got.txt"
    after=$(snapshot "$dir")
    if [ -n "${RLHF_BAD_INPUTS_RECORD:-}" ]; then
        { echo "exit $got_exit"; cat "$work/got.txt"; } > "$src/$case/$expected"
        echo "recorded $case/$expected (exit $got_exit)"
        continue
    fi
    problem=""
    [ -n "$want_exit" ] || problem="expected: first line must be \"exit N\""
    [ -z "$problem" ] && [ "$got_exit" != "$want_exit" ] &&
        problem="exit status $got_exit, expected $want_exit"
    [ -z "$problem" ] && ! cmp -s "$work/want.txt" "$work/got.txt" &&
        problem="stderr differs (< expected, > got):
$(diff "$work/want.txt" "$work/got.txt" | sed 's/^/    /')"
    [ -z "$problem" ] && [ "$before" != "$after" ] &&
        problem="files changed (< before, > after):
$(diff <(echo "$before") <(echo "$after") | sed 's/^/    /')"
    if [ -n "$problem" ]; then
        echo "FAIL $case: $problem"
        failed=$((failed + 1))
    else
        echo "ok   $case"
    fi
done
echo "$# cases, $failed failed"
[ "$failed" -eq 0 ]
