"""Failures arrive as Python exceptions: the C library's own messages (the ones `rlhf train`
prints), a raising reward function named, config fields rlhf.c cannot honour."""

import os
import subprocess

import pytest

from conftest import REPO, TINY_MODEL


def grpo_args(**kw):
    from rlhf import GRPOConfig

    base = dict(output_dir="out", per_device_train_batch_size=4, num_generations=4,
                max_completion_length=4, max_steps=3, logging_steps=1, learning_rate=1e-4)
    base.update(kw)
    return GRPOConfig(**base)


def test_reward_function_that_raises(prompt_only):
    from rlhf import GRPOTrainer, RewardFunctionError

    calls = []

    def flaky_reward(completions, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("no score for these")
        return [1.0] * len(completions)

    trainer = GRPOTrainer(model=TINY_MODEL, reward_funcs=flaky_reward, args=grpo_args(),
                          train_dataset=prompt_only)
    with pytest.raises(RewardFunctionError) as info:
        trainer.train()
    message = str(info.value)
    assert "flaky_reward" in message and "ValueError: no score for these" in message
    assert "test_errors.py" in message  # where it raised
    # the function's own exception, traceback and all, is the cause
    assert isinstance(info.value.__cause__, ValueError)
    assert info.value.__cause__.__traceback__ is not None
    assert trainer.state.global_step == 1  # the step before the failure was done


def test_reward_function_wrong_count(prompt_only):
    from rlhf import GRPOTrainer, RewardFunctionError

    def short_reward(completions, **kwargs):
        return [1.0]

    trainer = GRPOTrainer(model=TINY_MODEL, reward_funcs=[short_reward], args=grpo_args(),
                          train_dataset=prompt_only)
    with pytest.raises(RewardFunctionError, match="short_reward returned 1 values for 4"):
        trainer.train()


def test_none_rewards_are_allowed(prompt_only):
    """None means 'no score' (TRL): a function that abstains on half the completions."""
    from rlhf import GRPOTrainer

    def sometimes(completions, **kwargs):
        return [None if i % 2 else float(len(c)) for i, c in enumerate(completions)]

    def always(completions, **kwargs):
        return [0.5 for _ in completions]

    trainer = GRPOTrainer(model=TINY_MODEL, reward_funcs=[sometimes, always], args=grpo_args(),
                          train_dataset=prompt_only)
    assert trainer.train().global_step == 3
    first = trainer.state.log_history[0]
    assert "rewards/sometimes/mean" in first and "rewards/always/mean" in first


def cli_error(tmp_path, yaml_text):
    """What `rlhf train` prints for a config, without its "rlhf: error: " and file name."""
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml_text)
    rlhf = os.environ.get("RLHF_CLI") or os.path.join(REPO, "build", "rlhf")
    if not os.path.exists(rlhf):
        pytest.skip("build/rlhf is not built")
    proc = subprocess.run([rlhf, "train", str(cfg)], capture_output=True, text=True)
    assert proc.returncode == 1
    line = [ln for ln in proc.stderr.splitlines() if ln.startswith("rlhf: error: ")][0]
    return line[len("rlhf: error: "):].replace(str(cfg), "<FILE>")


def test_c_errors_are_the_cli_messages(tmp_path, prompt_only):
    """An unknown scheduler: the C config's message, word for word, as `rlhf train` says it."""
    from rlhf import RLHFError, SFTConfig, SFTTrainer

    args = SFTConfig(output_dir="out", lr_scheduler_type="polynomial")
    with pytest.raises(RLHFError) as info:
        SFTTrainer(model=TINY_MODEL, args=args, train_dataset=[{"text": "1 + 1 = 2"}])
    ours = str(info.value).replace("<SFTConfig>", "<FILE>")
    data = tmp_path / "d.jsonl"
    data.write_text('{"text": "1 + 1 = 2"}\n')
    theirs = cli_error(tmp_path, f"base_model: {TINY_MODEL}\nlearning_rate: 2.0e-5\n"
                                 f"lr_scheduler: polynomial\n"
                                 f"datasets:\n  - path: {data}\n    type: completion\n")
    assert "lr_scheduler" in ours and "polynomial" in ours
    assert ours == theirs


def test_bad_model_and_dataset(monkeypatch):
    from rlhf import DPOTrainer, RLHFError

    # a Hub id goes to the library's resolver, as in `rlhf train` (offline: no network here)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(RLHFError, match="not a local directory.*HF_HUB_OFFLINE"):
        DPOTrainer(model="no/such-model-here", train_dataset=[{"prompt": "a", "chosen": "b",
                                                                "rejected": "c"}])
    with pytest.raises(ValueError, match="needs 'chosen' and 'rejected'"):
        DPOTrainer(model=TINY_MODEL, train_dataset=[{"prompt": "a", "answer": "b"}])
    broken = os.path.join(os.getcwd(), "broken-model")
    os.mkdir(broken)
    with pytest.raises(RLHFError, match="config.json"):
        DPOTrainer(model=broken, train_dataset=[{"prompt": "a", "chosen": "b", "rejected": "c"}])


def test_config_fields():
    from rlhf import DPOConfig, GRPOConfig, GRPOTrainer, SFTConfig

    with pytest.raises(TypeError):
        DPOConfig(output_dir="x", no_such_field=1)  # as TRL: a dataclass
    # TRL's defaults
    assert DPOConfig().learning_rate == 1e-6 and DPOConfig().loss_type == ["sigmoid"]
    assert GRPOConfig().num_generations == 8 and GRPOConfig().max_completion_length == 256
    assert SFTConfig().max_length == 1024 and SFTConfig().logging_steps == 10
    # a field that changes the method but is not implemented: a warning naming it
    args = grpo_args(vllm_tensor_parallel_size=2)
    with pytest.warns(UserWarning,
                      match=r"GRPOConfig.vllm_tensor_parallel_size=2 is not supported"):
        GRPOTrainer(model=TINY_MODEL, reward_funcs=lambda completions, **kw: [0.0] * len(completions),
                    args=args, train_dataset=[{"prompt": "1 + 1 ="}] * 4)
    with pytest.raises(ValueError, match="save_strategy='epoch'"):
        SFTConfig(save_strategy="epoch")._yaml()


def test_report_to_is_passed_on():
    """report_to reaches the C config as TrainingArguments reads it; "none" (TRL's default)
    adds nothing; run_name names the W&B run."""
    from rlhf import DPOConfig

    keys, _ = DPOConfig(output_dir="x", report_to="tensorboard")._yaml()
    assert keys["report_to"] == ["tensorboard"]
    keys, _ = DPOConfig(output_dir="x", report_to=["wandb"], run_name="r1")._yaml()
    assert keys["report_to"] == ["wandb"] and keys["wandb_name"] == "r1"
    keys, _ = DPOConfig(output_dir="x", report_to="none")._yaml()
    assert "report_to" not in keys
