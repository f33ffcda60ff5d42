#!/usr/bin/env bash
# Runs the README's shell snippets as a new user would, so that the landing page never shows a
# command that does not work: every ```sh block of README.md, line by line, in a scratch copy of
# the tree (examples/, models/, tests/fixtures/), with `build/` meaning this build directory.
#  - A block after the comment "<!-- not run by tests/test_readme.sh: WHY -->" is skipped (it
#    needs a model or data the user downloads) and listed.
#  - `make quickstart` / `make test` are CI's own commands: for the first, the Makefile's
#    quickstart recipe is run (read from the Makefile); `make test` is what is running this.
#  - `build/rlhf train ...` runs 5 optimizer steps (--max_steps 5): the examples' full runs, and
#    that they learn, are test_examples' to check; here the commands must work as written.
# Each command must exit 0. Usage: tests/test_readme.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src=$(cd "$1" && pwd) bin=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/rlhf-readme.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -a "$src/examples" "$src/models" "$work/"
mkdir -p "$work/tests" && cp -a "$src/tests/fixtures" "$work/tests/"
ln -s "$bin" "$work/build"

# the quickstart recipe: the line after "quickstart:" in the Makefile, $(BUILD) -> build
quickstart=$(awk '/^quickstart:/ {getline; sub(/^\t/, ""); print; exit}' "$src/Makefile" |
    sed 's/\$(BUILD)/build/g')
[ -n "$quickstart" ] || { echo "FAIL: no quickstart recipe in the Makefile"; exit 1; }

commands=$(awk '
    /<!-- not run by tests\/test_readme.sh/ { skip = 1; next }
    /^```sh/ { inblock = 1; next }
    /^```/ && inblock { inblock = 0; skip = 0; next }
    inblock && skip { print "#SKIP " $0; next }
    inblock { print }
' "$src/README.md")

passed=0 failed=0 skipped=0
while IFS= read -r line; do
    case "$line" in
    "#SKIP "*) echo "skipped (needs a download): ${line#\#SKIP }"; skipped=$((skipped + 1)); continue ;;
    "" | "#"*) continue ;;
    esac
    cmd=${line%%  #*} # the comment after a command
    cmd=${cmd%% # *}
    case "$cmd" in
    "make test"*) echo "not run here (it is the suite running this): $cmd"; continue ;;
    "make quickstart"*) cmd=$quickstart ;;
    esac
    case "$cmd" in
    "build/rlhf train "*) cmd="$cmd --max_steps 5" ;;
    esac
    echo "\$ $cmd"
    if (cd "$work" && bash -c "$cmd") > "$work/out.txt" 2>&1; then
        passed=$((passed + 1))
    else
        echo "FAIL (exit $?): $cmd"
        tail -n 20 "$work/out.txt"
        failed=$((failed + 1))
    fi
done <<< "$commands"
[ $((passed + failed)) -gt 0 ] || { echo "FAIL: no command found in README.md"; exit 1; }
echo "test_readme: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
