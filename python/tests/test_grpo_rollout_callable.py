"""GRPOTrainer(rollout_func=callable): a rollout function passed from Python, as TRL 1.9 takes
it. The TRL contract is checked against the same TRL parity fixture the YAML path
(`trl.rollout_func: module.fn`, tests/test_grpo_rollout_func.c) uses: TRL 1.9's GRPOTrainer ran
tests/fixtures/grpo_rollout/rollout_env.py (tools/reference/make_grpo_rollout_fixtures.py), and
its logged values and trained weights are what this run must give. Axolotl's contract, as a
closure (no module path could name it), is checked for what it is called with and what is
trained on."""

import importlib.util
import json
import os
import struct

import numpy as np
import pytest

from conftest import REPO

FIXTURE = os.path.join(REPO, "tests", "fixtures", "grpo_rollout")
LLAMA = os.path.join(REPO, "tests", "fixtures", "models", "llama_text")


def fresh_env():
    """rollout_env.py imported anew: its call counter starts at 0, as in TRL's run."""
    spec = importlib.util.spec_from_file_location(
        "rollout_env_callable", os.path.join(FIXTURE, "rollout_env.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def safetensors(path):
    """name -> float64 array, read with numpy alone (CI has no safetensors package)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    dtypes = {"F32": np.float32, "F16": np.float16, "F64": np.float64}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + begin:8 + n + end],
                                  dtype=dtypes[t["dtype"]]).reshape(t["shape"]).astype(np.float64)
    return out


def parity_args(config, **extra):
    from rlhf import GRPOConfig

    keys = ("num_generations", "max_completion_length", "per_device_train_batch_size",
            "gradient_accumulation_steps", "learning_rate", "lr_scheduler_type", "warmup_steps",
            "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm",
            "max_steps", "seed", "beta", "loss_type", "scale_rewards", "temperature")
    args = {k: config[k] for k in keys}
    args.update(output_dir="out", logging_steps=1, report_to="none", **extra)
    return GRPOConfig(**args)


@pytest.mark.parametrize("case", ["", "sync_ref"])
def test_trl_contract_callable_matches_trl(case):
    from rlhf import GRPOTrainer

    with open(os.path.join(FIXTURE, case, "case.json")) as f:
        c = json.load(f)
    k = c["config"]
    extra = {}
    if k.get("sync_ref_model"):
        extra = dict(sync_ref_model=True, ref_model_mixup_alpha=k["ref_model_mixup_alpha"],
                     ref_model_sync_steps=k["ref_model_sync_steps"])
    env = fresh_env()
    trainer = GRPOTrainer(model=LLAMA, reward_funcs=[env.reward], args=parity_args(k, **extra),
                          train_dataset=read_rows(os.path.join(FIXTURE, "prompts.jsonl")),
                          rollout_func=env.rollout)
    trainer.train()
    assert env.CALLS[0] == c["rollout_calls"], "the callable is what generated every batch"
    ours = [e for e in trainer.state.log_history if "loss" in e]
    theirs = [e for e in c["log_history"] if "loss" in e]
    assert len(ours) == len(theirs) == 3
    compared, worst = 0, 0.0
    for step, (a, b) in enumerate(zip(ours, theirs), 1):
        for key, want in b.items():
            if key in ("step_time", "epoch", "step") or not isinstance(want, (int, float)):
                continue
            assert key in a, f"step {step}: {key} not logged"
            got = a[key]
            assert abs(got - want) <= max(1e-4 * abs(want), 1e-6), \
                f"step {step}: {key} {got:.8g}, TRL {want:.8g}"
            if abs(want) > 1e-6:
                worst = max(worst, abs(got - want) / abs(want))
            compared += 1
    assert compared >= 60
    final = safetensors(os.path.join(FIXTURE, case, "final", "model.safetensors"))
    scale = max(np.abs(v).max() for v in final.values())
    gap = max(np.abs(trainer.model.get_parameter(n) - v).max() for n, v in final.items())
    assert gap <= 1e-4 * scale, f"trained weights {gap:g} from TRL's (largest {scale:g})"
    print(f"TRL parity ({case or 'env_mask'}): {compared} values, worst relative {worst:.3g}, "
          f"weights {gap:.3g} from TRL's")


def test_axolotl_contract_closure():
    """A closure (nothing a module path can name): called once per generation batch with one
    dataset row per completion, and what the rewards see is what it returned."""
    from rlhf import GRPOConfig, GRPOTrainer

    calls, seen = [], []

    def solver(model, processing_class, prompts, generation_config=None):
        calls.append([p["prompt"] for p in prompts])
        # the engine-backed model generates with the current policy, as Axolotl's guide does
        ids = processing_class(prompts[0]["prompt"])["input_ids"]
        out = model.generate([ids], max_new_tokens=2)
        assert len(out[0]) >= len(ids)
        return [" %d" % (i % 7) for i in range(len(prompts))]

    def value(completions, **kwargs):
        seen.append(list(completions))
        return [float(c) for c in completions]

    rows = [{"prompt": f"Q{i}: add {i} and 2"} for i in range(8)]
    args = GRPOConfig(output_dir="out", per_device_train_batch_size=8, num_generations=4,
                      max_completion_length=6, max_steps=2, logging_steps=1,
                      learning_rate=1e-2, report_to="none")
    trainer = GRPOTrainer(model=LLAMA, reward_funcs=value, args=args, train_dataset=rows,
                          rollout_func=solver)
    trainer.train()
    assert len(calls) == 2, f"{len(calls)} calls for 2 generation batches"
    for prompts in calls:
        assert len(prompts) == 8 and all(prompts[i] == prompts[i // 4 * 4] for i in range(8))
    assert seen == [[" %d" % (i % 7) for i in range(8)]] * 2
    # the rewards the run logged are those strings' values
    first = [e for e in trainer.state.log_history if "loss" in e][0]
    assert first["rewards/value/mean"] == pytest.approx(sum(i % 7 for i in range(8)) / 8)


def test_rollout_func_errors(prompt_only):
    from rlhf import GRPOConfig, GRPOTrainer, RLHFError

    args = GRPOConfig(output_dir="out", per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, max_steps=2, logging_steps=1, report_to="none")
    def length(completions, **kwargs):
        return [float(len(c)) for c in completions]

    with pytest.raises(TypeError, match="rollout_func: expected a callable"):
        GRPOTrainer(model=LLAMA, reward_funcs=length, args=args,
                    train_dataset=prompt_only, rollout_func=42)

    def one_param(prompts):
        return {}

    trainer = GRPOTrainer(model=LLAMA, reward_funcs=length, args=args,
                          train_dataset=prompt_only, rollout_func=one_param)
    with pytest.raises(RLHFError, match="one_param.*a rollout function is fn\\(prompts, trainer\\)"):
        trainer.train()

    def broken(prompts, trainer):
        raise ValueError("the environment is down")

    trainer = GRPOTrainer(model=LLAMA, reward_funcs=length, args=args,
                          train_dataset=prompt_only, rollout_func=broken)
    with pytest.raises(Exception, match="broken.*ValueError: the environment is down"):
        trainer.train()
    assert trainer.state.global_step == 0


def test_vllm_server_fields_reach_the_trainer(prompt_only):
    """GRPOConfig's use_vllm/vllm_mode="server" fields are read (generation on `rlhf serve`,
    tests/serve/grpo_server.sh), not dropped: with no server listening the run stops before any
    step, naming the key and the URL."""
    import socket

    from rlhf import GRPOConfig, GRPOTrainer, RLHFError

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def length(completions, **kwargs):
        return [float(len(c)) for c in completions]

    args = GRPOConfig(output_dir="out", per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, max_steps=1, report_to="none", use_vllm=True,
                      vllm_mode="server", vllm_server_host="127.0.0.1", vllm_server_port=port,
                      vllm_server_timeout=0.5)
    trainer = GRPOTrainer(model=LLAMA, reward_funcs=length, args=args, train_dataset=prompt_only)
    with pytest.raises(RLHFError, match=f"key 'trl.vllm_mode'.*127.0.0.1:{port}"):
        trainer.train()
    assert trainer.state.global_step == 0
