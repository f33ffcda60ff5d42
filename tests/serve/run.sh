#!/usr/bin/env bash
# `rlhf serve` and `rlhf chat` end to end, for ctest (tests/CMakeLists.txt):
#   run.sh RLHF SOURCE_DIR BUILD_DIR
# The official openai client (pip-installed once into BUILD_DIR/serve-venv, kept for the next run)
# against `rlhf serve models/tiny-arith --port 0` on 127.0.0.1 (serve_client.py: completions,
# chat, streaming, n > 1, stop strings, errors, a load test, `rlhf chat` through a pipe, each
# compared with `rlhf generate`); then SIGTERM must end the server with exit status 0 within
# seconds. vllm_client.py replays TRL's VLLMClient (requests) against the same server, and
# serve_logprobs.py checks top-N log-probabilities against transformers'. Skipped (77)
# only when PyPI cannot be reached.
set -euo pipefail
rlhf=$1 src=$(cd "$2" && pwd) bin=$(cd "$3" && pwd)
work=$(mktemp -d)
server=
cleanup() {
    [ -n "$server" ] && kill -KILL "$server" 2> /dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

pins="openai==3.57.0 requests==2.32.3"
venv=$bin/serve-venv
if [ "$(cat "$venv/.pins" 2> /dev/null)" != "$pins" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    if ! "$venv/bin/pip" install -q $pins > "$work/pip.log" 2>&1; then
        if grep -qiE "connection|resolve|network|unreachable|timed out" "$work/pip.log"; then
            echo "SKIPPED: PyPI cannot be reached to install $pins"
            rm -rf "$venv"
            exit 77
        fi
        cat "$work/pip.log"
        echo "FAILED: pip install $pins"
        exit 1
    fi
    echo "$pins" > "$venv/.pins"
fi

model=$src/models/tiny-arith
: > "$work/serve.out" # (before the server opens it: the loop below reads it at once)
"$rlhf" serve "$model" --port 0 --served-model-name tiny-arith > "$work/serve.out" 2> "$work/serve.err" &
server=$!
port=
for _ in $(seq 200); do
    port=$(sed -n 's|^rlhf serve: listening on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$work/serve.out")
    [ -n "$port" ] && break
    kill -0 "$server" 2> /dev/null || { cat "$work/serve.err"; echo "FAILED: rlhf serve exited"; exit 1; }
    sleep 0.1
done
[ -n "$port" ] || { echo "FAILED: rlhf serve printed no port"; exit 1; }
echo "rlhf serve on port $port"

status=0
"$venv/bin/python" "$src/tests/serve/serve_client.py" "$rlhf" "$model" \
    "http://127.0.0.1:$port/v1" tiny-arith "$work" || status=1
# TRL's vLLM server protocol, as VLLMClient calls it (vllm_client.py)
"$venv/bin/python" "$src/tests/serve/vllm_client.py" "$rlhf" "$model" \
    "http://127.0.0.1:$port" "$work" || status=1
# top-N log-probabilities against transformers' (serve_logprobs.py, tests/fixtures/serve)
"$venv/bin/python" "$src/tests/serve/serve_logprobs.py" "http://127.0.0.1:$port" tiny-arith \
    "$src/tests/fixtures/serve/logprobs.json" || status=1

# SIGTERM: a clean stop, exit status 0, within seconds
kill -TERM "$server"
for _ in $(seq 100); do
    kill -0 "$server" 2> /dev/null || break
    sleep 0.1
done
if kill -0 "$server" 2> /dev/null; then
    echo "FAILED: rlhf serve still running 10 s after SIGTERM"
    exit 1
fi
rc=0
wait "$server" || rc=$?
server=
[ "$rc" -eq 0 ] || { cat "$work/serve.err"; echo "FAILED: rlhf serve exited $rc after SIGTERM"; exit 1; }
echo "SIGTERM: rlhf serve exited 0"

# A long streamed request in progress: SIGTERM, then a second SIGTERM, ends it at once (exit 0)
: > "$work/serve2.out"
"$rlhf" serve "$model" --port 0 > "$work/serve2.out" 2> "$work/serve2.err" &
server=$!
port=
for _ in $(seq 200); do
    port=$(sed -n 's|^rlhf serve: listening on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$work/serve2.out")
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { cat "$work/serve2.err"; echo "FAILED: the second rlhf serve printed no port"; exit 1; }
"$venv/bin/python" - "$port" "$model" > /dev/null 2>&1 <<'PY' &
import json, sys, urllib.request
body = json.dumps({"model": sys.argv[2], "prompt": "1", "temperature": 5, "top_k": 0, "n": 16,
                   "max_tokens": 500, "stream": True}).encode()
try:
    url = f"http://127.0.0.1:{sys.argv[1]}/v1/completions"
    urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=30).read()
except Exception:
    pass
PY
client=$!
sleep 0.5
kill -TERM "$server"
sleep 0.2
kill -TERM "$server" 2> /dev/null || true
for _ in $(seq 50); do
    kill -0 "$server" 2> /dev/null || break
    sleep 0.1
done
if kill -0 "$server" 2> /dev/null; then
    echo "FAILED: rlhf serve still running 5 s after a second SIGTERM"
    exit 1
fi
rc=0
wait "$server" || rc=$?
server=
wait "$client" || true
[ "$rc" -eq 0 ] || { cat "$work/serve2.err"; echo "FAILED: rlhf serve exited $rc after two SIGTERMs"; exit 1; }
echo "second SIGTERM: rlhf serve exited 0 ($(tail -1 "$work/serve2.err"))"
exit $status
