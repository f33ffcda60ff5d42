# What the GRPO-against-a-server scripts (grpo_server.sh, vllm_serve.sh) share; sourced after
# they set $rlhf and $src: a scratch directory $work removed at exit with every process whose pid
# is in $pids, fail, the llama_text fixture as $model, eight prompts, and the GRPO config both
# train (sampled completions, a reward with spread, 2 steps; grpo_rng: streams, the draws a
# server makes as the in-process engine does).
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2> /dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
model=$src/tests/fixtures/models/llama_text
fail() {
    echo "FAILED: $*"
    exit 1
}

for i in $(seq 0 7); do echo "{\"prompt\": \"Q$i: add $i and 2\"}"; done > "$work/prompts.jsonl"
# config NAME EXTRA_TRL_LINES [EXTRA_TOP_LINES]: writes $work/NAME.yaml
config() {
    cat > "$work/$1.yaml" << EOF_CONFIG
base_model: $model
rl: grpo
datasets:
  - path: $work/prompts.jsonl
trl:
  num_generations: 4
  max_completion_length: 8
  reward_funcs: [{function: builtin.format, pattern: "^[ a-z]", match: search}]
  temperature: 0.9
  top_k: 20
  log_completions: true
  num_completions_to_print: 0
$2
micro_batch_size: 8
max_steps: 2
learning_rate: 5e-2
logging_steps: 1
seed: 5
grpo_rng: streams
${3:-}
EOF_CONFIG
}
