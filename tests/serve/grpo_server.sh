#!/usr/bin/env bash
# GRPO generating on `rlhf serve` (use_vllm: true, vllm_mode: server), for ctest:
#   grpo_server.sh RLHF SOURCE_DIR [PYTHON: ON (default) or OFF, the build's embedded Python]
# 1. Two steps of GRPO on the llama_text fixture with completions sampled (temperature 0.9,
#    top_k 20), once in-process and once against `rlhf serve` on 127.0.0.1: the completions of
#    both steps (completions.jsonl) and the trained weights must be byte-identical. Step 2's
#    completions come from the weights the trainer pushed after step 1: a server left on the
#    base weights samples other completions and the weights part. Then the same with a LoRA
#    adapter (its merged weights pushed).
# 2. Refusals, each naming the key: no server within vllm_server_timeout; a server that does not
#    take weights over HTTP (a stand-in for vLLM: /health/ and /get_world_size/ only); an unknown
#    vllm_mode.
# 3. A rollout function generating on the server (trainer.model.generate and
#    trainer.vllm_client.generate) trains what it trains in-process (builds with Python).
# 4. The server refuses a bad weights body (not safetensors, an unknown tensor, a wrong shape)
#    with a 400 naming it, changes nothing and keeps serving.
# 5. /generate/ takes vLLM's stop_token_ids and ignore_eos.
set -euo pipefail
rlhf=$1 src=$(cd "$2" && pwd) with_python=${3:-ON}
. "$src/tests/serve/grpo_common.sh"

# `rlhf serve` on a free port, started from this shell (so that `wait` has its exit status):
# sets $server (its pid) and $port
start_server() {
    local out=$work/serve.out
    : > "$out"
    "$rlhf" serve "$model" --port 0 > "$out" 2> "$work/serve.err" &
    server=$!
    pids+=("$server")
    port=
    for _ in $(seq 300); do
        port=$(sed -n 's|^rlhf serve: listening on http://127.0.0.1:\([0-9]*\) .*|\1|p' "$out")
        [ -n "$port" ] && break
        kill -0 "$server" 2> /dev/null || { cat "$work/serve.err"; fail "rlhf serve exited"; }
        sleep 0.1
    done
    [ -n "$port" ] || fail "rlhf serve printed no port"
}

start_server
echo "rlhf serve on port $port"
server_keys="  use_vllm: true
  vllm_mode: server
  vllm_server_host: 127.0.0.1
  vllm_server_port: $port
  vllm_server_timeout: 30"

# 1. in-process and on the server: the same completions, the same weights
config local ""
config server "$server_keys"
"$rlhf" train "$work/local.yaml" --output_dir "$work/out-local" > "$work/local.log" 2>&1 ||
    { cat "$work/local.log"; fail "in-process run"; }
"$rlhf" train "$work/server.yaml" --output_dir "$work/out-server" > "$work/server.log" 2>&1 ||
    { cat "$work/server.log"; fail "server run"; }
grep -q "generation: on the server at http://127.0.0.1:$port" "$work/server.log" ||
    fail "the server run does not say it generates on the server"
[ "$(wc -l < "$work/out-local/completions.jsonl")" -eq 16 ] || fail "16 completions expected"
cmp "$work/out-local/completions.jsonl" "$work/out-server/completions.jsonl" ||
    fail "the server's completions differ from in-process generation's"
cmp "$work/out-local/model.safetensors" "$work/out-server/model.safetensors" ||
    fail "the trained weights differ"
echo "ok: 2 steps on the server: completions and weights byte-identical to in-process"

# the same with a LoRA adapter: the server gets base + adapter merged (W + s B A); the merged
# product rounds differently from the adapter applied beside W, so a sampled token could flip
# where a draw falls within ~1e-7 of a boundary: none does in these 128 tokens
lora="adapter: lora
lora_r: 4
lora_alpha: 16
lora_target_modules: [q_proj, v_proj, up_proj]"
config lora-local "" "$lora"
config lora-server "$server_keys" "$lora"
sed -i 's/^learning_rate: .*/learning_rate: 0.2/' "$work/lora-local.yaml" "$work/lora-server.yaml"
"$rlhf" train "$work/lora-local.yaml" --output_dir "$work/out-lora-local" > "$work/lora-local.log" 2>&1 ||
    { cat "$work/lora-local.log"; fail "in-process LoRA run"; }
"$rlhf" train "$work/lora-server.yaml" --output_dir "$work/out-lora-server" > "$work/lora-server.log" 2>&1 ||
    { cat "$work/lora-server.log"; fail "LoRA server run"; }
cmp "$work/out-lora-local/completions.jsonl" "$work/out-lora-server/completions.jsonl" ||
    fail "LoRA: the server's completions differ from in-process generation's"
cmp "$work/out-lora-local/adapter_model.safetensors" "$work/out-lora-server/adapter_model.safetensors" ||
    fail "LoRA: the trained adapters differ"
echo "ok: LoRA on the server (merged weights pushed): completions and adapter byte-identical"

# 2. refusals naming the key
expect_error() { # expect_error NAME WANT
    if "$rlhf" train "$work/$1.yaml" --output_dir "$work/out-$1" > "$work/$1.log" 2>&1; then
        fail "$1: the run should fail"
    fi
    grep -qF -- "$2" "$work/$1.log" || { cat "$work/$1.log"; fail "$1: no \"$2\""; }
    [ ! -e "$work/out-$1/model.safetensors" ] || fail "$1: a model was written"
    echo "ok: $1 refused: $(grep -F -- "$2" "$work/$1.log" | head -1 | cut -c1-160)"
}
closed=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
config noserver "  use_vllm: true
  vllm_mode: server
  vllm_server_base_url: http://127.0.0.1:$closed/
  vllm_server_timeout: 1"
expect_error noserver "key 'trl.vllm_mode': server: the generation server at http://127.0.0.1:$closed did not answer within 1 s"

# Axolotl: use_vllm without vllm_mode is server mode, with Axolotl's warning
config nomode "  use_vllm: true
  vllm_server_host: 127.0.0.1
  vllm_server_port: $closed
  vllm_server_timeout: 1"
expect_error nomode "key 'trl.vllm_mode': server: the generation server at http://127.0.0.1:$closed did not answer"
grep -qF "vllm_mode must be set to either \`server\` or \`colocate\` when using vllm, using default value \`server\`" \
    "$work/nomode.log" || fail "nomode: no warning that vllm_mode defaults to server"

# a vLLM stand-in: health and world size as vllm-serve answers them, no HTTP weight endpoint
cat > "$work/fake_vllm.py" << 'EOF'
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/health/": return self.answer(200, {"status": "ok"})
        if self.path == "/get_world_size/": return self.answer(200, {"world_size": 1})
        self.answer(404, {"detail": "Not Found"})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer(404, {"detail": "Not Found"})
    def log_message(self, *args): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
EOF
python3 "$work/fake_vllm.py" > "$work/fake.port" &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/fake.port" ] && break; sleep 0.1; done
config vllm "  use_vllm: true
  vllm_mode: server
  vllm_server_base_url: http://127.0.0.1:$(cat "$work/fake.port")"
expect_error vllm "does not take weights over HTTP (POST /update_safetensors/ answered 404: Not Found). rlhf.c pushes the policy's weights to \`rlhf serve\` only; a vLLM server's NCCL weight sync (init_communicator, update_named_param) is not supported"
config mode "  use_vllm: true
  vllm_mode: remote"
expect_error mode "key 'trl.vllm_mode': expected server or colocate"

# 3. a rollout function (TRL's contract) on the server: its generation goes there, through a
#    recording proxy (tests/serve/record_proxy.py) that shows what was asked. Three runs train
#    the same completions and weights, byte for byte: in-process with trainer.model.generate (one
#    call per completion row), on the server with the same calls (each a /generate/ of one
#    prompt, drawing from stream first_stream = its row), and on the server with
#    trainer.vllm_client.generate (TRL's VLLMClient; two calls per batch, the second from
#    first_stream 4). In-process, the trainer has no vllm_client (as TRL's outside server mode).
if [ "$with_python" = ON ]; then
    python3 "$src/tests/serve/record_proxy.py" "$port" "$work/requests.jsonl" > "$work/proxy.port" &
    pids+=($!)
    for _ in $(seq 100); do [ -s "$work/proxy.port" ] && break; sleep 0.1; done
    cat > "$work/env.py" << 'EOF_ENV'
import os


def rollout(prompts, trainer):
    tok = trainer.processing_class
    rows = [tok.encode(p) for p in prompts]
    if os.environ.get("ROLLOUT_VIA") == "client":
        half = len(rows) // 2
        ids, logprobs = [], []
        for part in (rows[:half], rows[half:]):
            out = trainer.vllm_client.generate(part, n=1, temperature=0.9, top_k=20, max_tokens=8)
            ids += out["completion_ids"]
            logprobs += [[lp[0] for lp in row] for row in out["logprobs"]]
    else:
        ids, logprobs = [], None
        for row in rows:
            ids.append(list(trainer.model.generate(input_ids=[row])[0][len(row):]))
    return {"prompt_ids": rows, "completion_ids": ids, "logprobs": logprobs}
EOF_ENV
    proxy_keys="  use_vllm: true
  vllm_mode: server
  vllm_server_host: 127.0.0.1
  vllm_server_port: $(cat "$work/proxy.port")
  vllm_server_timeout: 30
  rollout_func: env.rollout"
    config rollout-local "  rollout_func: env.rollout"
    config rollout-server "$proxy_keys"
    for run in rollout-local rollout-server rollout-client; do
        yaml=$run
        [ $run = rollout-client ] && yaml=rollout-server
        : > "$work/requests.jsonl"
        ROLLOUT_VIA=${run#rollout-} "$rlhf" train "$work/$yaml.yaml" --output_dir "$work/out-$run" \
            > "$work/$run.log" 2>&1 || { cat "$work/$run.log"; fail "$run"; }
        cp "$work/requests.jsonl" "$work/requests-$run.jsonl"
    done
    # what each run asked of the server: (prompts, first_stream) of every /generate/
    asked() {
        python3 - "$1" << 'EOF_ASKED'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(" ".join("%d@%d" % (r["prompts"], r["first_stream"]) for r in rows if r["path"] == "/generate/"))
EOF_ASKED
    }
    [ -z "$(asked "$work/requests-rollout-local.jsonl")" ] || fail "the in-process rollout asked the server"
    want_model=$(for b in 1 2; do for j in $(seq 0 7); do printf '1@%d ' $j; done; done)
    [ "$(asked "$work/requests-rollout-server.jsonl")" = "${want_model% }" ] ||
        fail "rollout on the server: model.generate asked $(asked "$work/requests-rollout-server.jsonl"), expected ${want_model% }"
    [ "$(asked "$work/requests-rollout-client.jsonl")" = "4@0 4@4 4@0 4@4" ] ||
        fail "rollout on the server: vllm_client.generate asked $(asked "$work/requests-rollout-client.jsonl"), expected 4@0 4@4 4@0 4@4"
    for run in rollout-server rollout-client; do
        cmp "$work/out-rollout-local/completions.jsonl" "$work/out-$run/completions.jsonl" ||
            fail "$run: the completions differ from the in-process rollout's"
        cmp "$work/out-rollout-local/model.safetensors" "$work/out-$run/model.safetensors" ||
            fail "$run: the trained weights differ from the in-process rollout's"
    done
    echo "ok: a rollout function's generation on the server (model.generate: 16 requests, vllm_client.generate: 4, the later ones from first_stream 4): completions and weights byte-identical to in-process"
    config rollout-noclient "  rollout_func: env.rollout"
    if ROLLOUT_VIA=client "$rlhf" train "$work/rollout-noclient.yaml" --output_dir "$work/out-rollout-noclient" \
        > "$work/rollout-noclient.log" 2>&1; then
        fail "rollout-noclient: the run should fail"
    fi
    grep -q "rollout function env.rollout failed.*vllm_client" "$work/rollout-noclient.log" ||
        { cat "$work/rollout-noclient.log"; fail "rollout-noclient: no error naming the function and vllm_client"; }
    echo "ok: in-process, the trainer has no vllm_client: $(grep -m1 vllm_client "$work/rollout-noclient.log" | cut -c1-160)"
fi

# 4. bad weight bodies: 400 naming the problem, nothing changed, the server still serves
post() { # post BODY_FILE -> "STATUS BODY"
    python3 - "$port" "$1" << 'EOF'
import sys, urllib.request, urllib.error
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/update_safetensors/",
                             data=open(sys.argv[2], "rb").read(), method="POST")
try:
    with urllib.request.urlopen(req) as r: print(r.status, r.read().decode())
except urllib.error.HTTPError as e: print(e.code, e.read().decode())
EOF
}
greedy() {
    python3 - "$port" << 'EOF'
import json, sys, urllib.request
body = json.dumps({"prompts": ["Q1: add 1 and 2"], "temperature": 0, "max_tokens": 6}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/generate/", data=body,
                             headers={"Content-Type": "application/json"})
print(json.load(urllib.request.urlopen(req))["completion_ids"])
EOF
}
# the base model's weights: the server back where it started, then its greedy answer
post "$model/model.safetensors" | grep -q '^200 {"updated":' || fail "pushing the base weights"
before=$(greedy)
printf 'not a safetensors file' > "$work/junk.bin"
python3 - "$work" << 'EOF'
import json, struct, sys
def st(path, name, shape):
    n = 1
    for d in shape: n *= d
    header = json.dumps({name: {"dtype": "F32", "shape": shape, "data_offsets": [0, 4 * n]}}).encode()
    header += b" " * (-len(header) % 8)
    open(path, "wb").write(struct.pack("<Q", len(header)) + header + b"\0" * (4 * n))
st(sys.argv[1] + "/unknown.st", "model.layers.99.mlp.up_proj.weight", [2, 2])
st(sys.argv[1] + "/shape.st", "model.norm.weight", [3])
EOF
for case in "junk.bin:invalid safetensors file" \
    "unknown.st:tensor \\\"model.layers.99.mlp.up_proj.weight\\\" is not a parameter of the served model" \
    "shape.st:tensor \\\"model.norm.weight\\\" has shape [3]; the served model's is"; do
    file=${case%%:*} want=${case#*:}
    got=$(post "$work/$file")
    case "$got" in "400 "*"$want"*) ;; *) fail "$file: expected 400 with \"$want\", got $got" ;; esac
done
[ "$(greedy)" = "$before" ] || fail "a refused weights body changed the served model"
echo "ok: bad weight bodies refused with 400, the served model unchanged"

# 4. vLLM's stop_token_ids + ignore_eos (what the trainer sends so that a completion ends at its
#    tokenizer's EOS alone): a greedy completion ends at the first listed id, which it keeps
python3 - "$port" << 'EOF'
import json, sys, urllib.request
def generate(**kwargs):
    body = {"prompts": ["Q3: add 3 and 2"], "temperature": 0, "max_tokens": 8}
    body.update(kwargs)
    req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/generate/",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))["completion_ids"][0]
full = generate()
k = next(k for k in range(1, len(full)) if full[k] not in full[:k])
cut = generate(generation_kwargs={"stop_token_ids": [full[k]], "ignore_eos": True})
if cut != full[:k + 1]:
    sys.exit(f"FAILED: stop_token_ids [{full[k]}]: {cut}, expected {full[:k + 1]}")
print(f"ok: stop_token_ids end a completion at the listed id ({len(cut)} of {len(full)} tokens)")
EOF

# SIGTERM: the server that took weight updates stops cleanly (exit 0; under ASan, no leak)
kill -TERM "$server"
rc=0
wait "$server" || rc=$?
[ "$rc" -eq 0 ] || { cat "$work/serve.err"; fail "rlhf serve exited $rc after SIGTERM"; }
echo "ok: rlhf serve stopped cleanly after the weight updates"
