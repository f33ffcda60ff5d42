"""Ctrl-C during train(): the step in progress finishes, checkpoint-<step> is written, then
KeyboardInterrupt; resume_from_checkpoint=True carries on to the end. Python's own SIGINT
handling is back in place afterwards."""

import os
import signal
import threading
import time

import pytest

from conftest import TINY_MODEL


def make_trainer(prompt_only, reward):
    from rlhf import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir="out", per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=4, max_steps=8, logging_steps=1,
                      learning_rate=1e-4, save_strategy="no")
    return GRPOTrainer(model=TINY_MODEL, reward_funcs=[reward], args=args,
                       train_dataset=prompt_only)


def test_sigint_from_a_reward_function(prompt_only):
    calls, sent = [], []

    def reward(completions, **kwargs):
        calls.append(1)
        if len(calls) == 3 and not sent:  # Ctrl-C while step 3 is being generated
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        return [float(len(c)) for c in completions]

    trainer = make_trainer(prompt_only, reward)
    handler_before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt, match="interrupted by SIGINT: stopped after step 3"):
        trainer.train()
    assert signal.getsignal(signal.SIGINT) is handler_before
    assert os.path.isdir("out/checkpoint-3")  # even with save_strategy="no"
    assert os.path.exists("out/checkpoint-3/trainer_state.json")
    assert trainer.state.global_step == 3

    calls.clear()
    out = trainer.train(resume_from_checkpoint=True)
    assert out.global_step == 8
    assert len(calls) == 5  # steps 4..8 only
    assert [e["step"] for e in trainer.state.log_history if "loss" in e] == list(range(1, 9))


def test_sigint_from_another_thread(prompt_only):
    started = threading.Event()

    def reward(completions, **kwargs):
        started.set()
        time.sleep(0.05)
        return [float(len(c)) for c in completions]

    trainer = make_trainer(prompt_only, reward)
    sender = threading.Thread(target=lambda: (started.wait(), os.kill(os.getpid(), signal.SIGINT)))
    sender.start()
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    sender.join()
    step = trainer.state.global_step
    assert 1 <= step < 8 and os.path.isdir(f"out/checkpoint-{step}")


def test_request_stop(prompt_only):
    """rlhf.request_stop(): the same clean stop without a signal."""
    import rlhf

    def reward(completions, **kwargs):
        if kwargs["trainer_state"].global_step == 1:
            rlhf.request_stop()
        return [1.0 for _ in completions]

    trainer = make_trainer(prompt_only, reward)
    with pytest.raises(KeyboardInterrupt, match="a stop request"):
        trainer.train()
    assert trainer.state.global_step == 2 and os.path.isdir("out/checkpoint-2")
