"""The seed document's snippet (TRL's GRPOWithReplayBufferTrainer usage), with only the model
(the embedded tiny model instead of trl-internal-testing/tiny-Qwen2ForCausalLM-2.5) and the
dataset source (a local prompt-only dataset instead of load_dataset) changed, plus TRL's own
test's check that every parameter moved."""

import random

import numpy as np
import pytest

from conftest import TINY_MODEL, as_dataset


def params_changed(previous, trainer):
    for n, param in previous.items():
        new_param = trainer.model.get_parameter(n)
        assert not np.array_equal(param, new_param), f"Parameter {n} has not changed."


def test_seed_snippet_literal(prompt_only):
    """Word for word, torch.rand included: runs where torch is installed."""
    torch = pytest.importorskip("torch")
    from rlhf.experimental.grpo_with_replay_buffer import (
        GRPOWithReplayBufferConfig,
        GRPOWithReplayBufferTrainer,
    )

    dataset = as_dataset(prompt_only)

    # Guarantee that some rewards have 0 std
    def custom_reward_func(completions, **kwargs):
        if torch.rand(1).item() < 0.25:
            return [0] * len(completions)  # simulate some None rewards
        else:
            return torch.rand(len(completions)).tolist()

    training_args = GRPOWithReplayBufferConfig(
        output_dir="./tmp",
        learning_rate=1e-4,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        replay_buffer_size=8,
        report_to="none",
    )
    trainer = GRPOWithReplayBufferTrainer(
        model=TINY_MODEL,
        reward_funcs=[custom_reward_func],
        args=training_args,
        train_dataset=dataset,
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}
    trainer.train()
    params_changed(previous_trainable_params, trainer)


def test_seed_snippet_without_torch(prompt_only):
    """The same with `random` for torch.rand: runs everywhere (CI has no torch)."""
    from rlhf.experimental.grpo_with_replay_buffer import (
        GRPOWithReplayBufferConfig,
        GRPOWithReplayBufferTrainer,
    )

    dataset = as_dataset(prompt_only)
    calls = []

    # Guarantee that some rewards have 0 std
    def custom_reward_func(completions, **kwargs):
        calls.append(kwargs)
        if random.random() < 0.25:
            return [0] * len(completions)  # simulate some None rewards
        else:
            return [random.random() for _ in range(len(completions))]

    training_args = GRPOWithReplayBufferConfig(
        output_dir="./tmp",
        learning_rate=1e-4,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        replay_buffer_size=8,
        report_to="none",
    )
    trainer = GRPOWithReplayBufferTrainer(
        model=TINY_MODEL,
        reward_funcs=[custom_reward_func],
        args=training_args,
        train_dataset=dataset,
    )
    previous_trainable_params = {n: param.clone() for n, param in trainer.model.named_parameters()}
    out = trainer.train()
    params_changed(previous_trainable_params, trainer)

    # TRL's geometry: 16 prompts, 4 completions per step = 1 prompt per step, 3 epochs
    assert out.global_step == 48 == trainer.state.global_step
    assert np.isfinite(out.training_loss)
    assert out.metrics["epoch"] == pytest.approx(3.0)
    # TRL's keyword arguments reached the function
    assert {"prompts", "completion_ids", "trainer_state"} <= set(calls[0])
    assert len(calls[0]["prompts"]) == 4
    # the replay buffer ran and is logged with TRL's logging_steps default (10)
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert [e["step"] for e in logged] == [10, 20, 30, 40, 48]
    assert all("replay/buffer_size" in e for e in logged)
    assert logged[-1]["replay/buffer_size"] > 0
    # HF's summary entry ends the history
    assert trainer.state.log_history[-1]["train_loss"] == pytest.approx(out.training_loss)
