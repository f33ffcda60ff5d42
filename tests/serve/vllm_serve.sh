#!/usr/bin/env bash
# `rlhf vllm-serve CONFIG.yaml` (Axolotl's two-terminal recipe), for ctest:
#   vllm_serve.sh RLHF SOURCE_DIR
# 1. One GRPO YAML with a vllm: block (host 127.0.0.1, a free port, dtype, max_model_len) and
#    trl.use_vllm: true, vllm_mode: server naming that port: `rlhf vllm-serve` on it answers
#    /health/ on vllm.port, and `rlhf train` on the same file generates on it for 2 steps, with
#    the completions of an in-process run of the same config.
# 2. vllm.max_model_len is what the server enforces (prompt + max_tokens above it: 400).
# 3. Refusals naming the key, before any port is opened: vllm.tensor_parallel_size: 2,
#    vllm.dtype: float16, a port that is not a number.
# 4. Axolotl's command-line options (--port, --max-model-len, --gpu-memory-utilization,
#    --no-enable-prefix-caching) over the file's vllm: keys: the server listens on the option's
#    port with the option's max_model_len and names the no-ops as options; the same refusals as
#    the keys, naming the option.
set -euo pipefail
rlhf=$1 src=$(cd "$2" && pwd)
. "$src/tests/serve/grpo_common.sh"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)

vllm_block="vllm:
  host: 127.0.0.1
  port: $port
  dtype: auto
  max_model_len: 64
  gpu_memory_utilization: 0.85
  tensor_parallel_size: 1"
config grpo "  use_vllm: true
  vllm_mode: server
  vllm_server_host: 127.0.0.1
  vllm_server_port: $port
  vllm_server_timeout: 30" "$vllm_block"
config local "" ""

# 1. the server from the YAML, on vllm.host:vllm.port
"$rlhf" vllm-serve "$work/grpo.yaml" > "$work/serve.out" 2> "$work/serve.err" &
server=$!
pids+=("$server")
for _ in $(seq 300); do
    grep -q "listening on http://127.0.0.1:$port " "$work/serve.out" && break
    kill -0 "$server" 2> /dev/null || { cat "$work/serve.err"; fail "rlhf vllm-serve exited"; }
    sleep 0.1
done
grep -q "listening on http://127.0.0.1:$port " "$work/serve.out" ||
    { cat "$work/serve.out" "$work/serve.err"; fail "not listening on vllm.port $port"; }
grep -qF "vllm.gpu_memory_utilization has no effect: vLLM's share of GPU memory" "$work/serve.err" ||
    { cat "$work/serve.err"; fail "vllm.gpu_memory_utilization is not named as a no-op"; }
python3 - "$port" << 'EOF'
import json, sys, urllib.request
r = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health/")
body = json.load(r)
if r.status != 200 or body != {"status": "ok"}: sys.exit(f"FAILED: /health/: {r.status} {body}")
EOF
echo "ok: rlhf vllm-serve listens on vllm.host:vllm.port and answers /health/"

"$rlhf" train "$work/grpo.yaml" --output_dir "$work/out-server" > "$work/server.log" 2>&1 ||
    { cat "$work/server.log"; fail "GRPO against rlhf vllm-serve"; }
grep -q "generation: on the server at http://127.0.0.1:$port" "$work/server.log" ||
    fail "the run does not say it generates on the server"
"$rlhf" train "$work/local.yaml" --output_dir "$work/out-local" > "$work/local.log" 2>&1 ||
    { cat "$work/local.log"; fail "in-process run"; }
[ "$(wc -l < "$work/out-server/completions.jsonl")" -eq 16 ] || fail "16 completions expected"
cmp "$work/out-local/completions.jsonl" "$work/out-server/completions.jsonl" ||
    fail "the completions from rlhf vllm-serve differ from in-process generation's"
echo "ok: 2 GRPO steps on rlhf vllm-serve: the in-process run's completions"

# 2. max_model_len 64: a prompt with max_tokens past it is refused as vLLM refuses it
python3 - "$port" << 'EOF'
import json, sys, urllib.request, urllib.error
body = json.dumps({"prompts": ["Q1: add 1 and 2"], "max_tokens": 64}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/generate/", data=body,
                             headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(req)
    sys.exit("FAILED: max_tokens 64 past max_model_len 64 was answered")
except urllib.error.HTTPError as e:
    msg = e.read().decode()
    if e.code != 400 or "maximum context length is 64 tokens" not in msg:
        sys.exit(f"FAILED: expected a 400 naming 64 tokens, got {e.code} {msg}")
EOF
echo "ok: vllm.max_model_len 64 is the server's context"
kill -TERM "$server"
rc=0
wait "$server" || rc=$?
pids=() # it has exited: nothing left to kill at exit
[ "$rc" -eq 0 ] || { cat "$work/serve.err"; fail "rlhf vllm-serve exited $rc after SIGTERM"; }

# 3. refusals naming the key; nothing listens
expect_error() { # expect_error WANT EXTRA_ARGS...
    local want=$1
    shift
    if timeout 60 "$rlhf" vllm-serve "$work/grpo.yaml" "$@" > "$work/bad.log" 2>&1; then
        fail "$*: should be refused"
    fi
    grep -qF -- "$want" "$work/bad.log" || { cat "$work/bad.log"; fail "$*: no \"$want\""; }
    ! grep -q "listening" "$work/bad.log" || fail "$*: the server started"
    echo "ok: $* refused: $(grep -F -- "$want" "$work/bad.log" | head -1 | cut -c1-200)"
}
expect_error "grpo.yaml: key 'vllm.tensor_parallel_size': 2 is not supported: rlhf serve runs one engine" \
    --vllm.tensor_parallel_size 2
expect_error "key 'vllm.dtype': float16 is not supported" --vllm.dtype float16
expect_error "key 'vllm.port': expected a port number" --vllm.port 70000

# 4. Axolotl's options: --port and --max-model-len over the file's vllm.port and max_model_len
port2=$(free_port)
"$rlhf" vllm-serve "$work/grpo.yaml" --port "$port2" --max-model-len=32 \
    --gpu-memory-utilization 0.5 --no-enable-prefix-caching > "$work/serve2.out" 2> "$work/serve2.err" &
server=$!
pids+=("$server")
for _ in $(seq 300); do
    grep -q "listening on http://127.0.0.1:$port2 " "$work/serve2.out" && break
    kill -0 "$server" 2> /dev/null || { cat "$work/serve2.err"; fail "rlhf vllm-serve --port exited"; }
    sleep 0.1
done
grep -q "listening on http://127.0.0.1:$port2 " "$work/serve2.out" ||
    { cat "$work/serve2.out" "$work/serve2.err"; fail "not listening on --port $port2"; }
for want in "option --gpu-memory-utilization (vllm.gpu_memory_utilization) has no effect" \
    "option --no-enable-prefix-caching (vllm.enable_prefix_caching) has no effect"; do
    grep -qF "$want" "$work/serve2.err" || { cat "$work/serve2.err"; fail "no \"$want\""; }
done
python3 - "$port2" << 'EOF'
import json, sys, urllib.request, urllib.error
url = f"http://127.0.0.1:{sys.argv[1]}/generate/"
def post(max_tokens):
    body = json.dumps({"prompts": ["Q1: add 1 and 2"], "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        return 200, json.load(urllib.request.urlopen(req))
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
status, out = post(4)
if status != 200: sys.exit(f"FAILED: /generate/ on --port: {status} {out}")
status, msg = post(32)
if status != 400 or "maximum context length is 32 tokens" not in msg:
    sys.exit(f"FAILED: --max-model-len=32 not enforced: {status} {msg}")
EOF
echo "ok: --port, --max-model-len=32 over the file's vllm: keys; GPU-only options named as no-ops"
kill -TERM "$server"
rc=0
wait "$server" || rc=$?
pids=()
[ "$rc" -eq 0 ] || { cat "$work/serve2.err"; fail "rlhf vllm-serve --port exited $rc after SIGTERM"; }
expect_error "option --tensor-parallel-size (vllm.tensor_parallel_size): 2 is not supported" \
    --tensor-parallel-size 2
expect_error "option --dtype (vllm.dtype): half is not supported" --dtype=half
expect_error "option --port (vllm.port): expected a port number" --port eighty
expect_error "option --port needs a value" --port
