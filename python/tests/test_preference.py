"""DPO and KTO as TRL's documentation writes them (model and dataset made local), plus ORPO,
CPO/SimPO and LoRA through peft_config: parameters must change, and TRL's metrics be logged."""

import numpy as np
import pytest

from conftest import TINY_MODEL, as_dataset


def snapshot(trainer):
    return {n: p.clone() for n, p in trainer.model.named_parameters() if p.requires_grad}


def assert_all_changed(previous, trainer):
    for n, param in previous.items():
        assert not np.array_equal(param, trainer.model.get_parameter(n)), f"{n} has not changed"


def test_dpo_quickstart(preference_rows):
    """TRL's DPO quick start: DPOTrainer(model=..., train_dataset=...), default DPOConfig."""
    from rlhf import DPOTrainer

    train_dataset = as_dataset(preference_rows)
    trainer = DPOTrainer(model=TINY_MODEL, train_dataset=train_dataset)
    previous = snapshot(trainer)
    out = trainer.train()
    assert_all_changed(previous, trainer)
    # DPOConfig defaults: batch 8, 3 epochs -> 2 steps per epoch; output_dir "<model>-DPO"
    assert out.global_step == 6
    assert trainer.args.output_dir == "tiny-arith-DPO"
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert logged and {"rewards/accuracies", "rewards/margins", "logps/chosen"} <= set(logged[-1])


def test_dpo_with_config(preference_rows, tmp_path):
    from rlhf import DPOConfig, DPOTrainer

    training_args = DPOConfig(
        output_dir="tiny-DPO",
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        max_steps=4,
        logging_steps=1,
        beta=0.1,
        loss_type=["sigmoid", "sft"],
        loss_weights=[1.0, 0.5],
    )
    trainer = DPOTrainer(model=TINY_MODEL, args=training_args,
                         train_dataset=as_dataset(preference_rows))
    previous = snapshot(trainer)
    out = trainer.train()
    assert_all_changed(previous, trainer)
    assert out.global_step == 4
    assert [e["step"] for e in trainer.state.log_history if "loss" in e] == [1, 2, 3, 4]
    # margins grow with this learning rate on the arithmetic pairs
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert losses[-1] < losses[0]
    trainer.save_model()
    assert (tmp_path / "tiny-DPO" / "config.json").exists()
    assert (tmp_path / "tiny-DPO" / "model.safetensors").exists()


def test_dpo_conversational_with_lora(tmp_path):
    """Conversational pairs (lists of messages: the chat template renders them) and a LoRA
    adapter from peft_config: only the adapter trains."""
    from rlhf import DPOConfig, DPOTrainer

    rows = [
        {"prompt": [{"role": "user", "content": f"What is {a} + {a}?"}],
         "chosen": [{"role": "assistant", "content": str(2 * a)}],
         "rejected": [{"role": "assistant", "content": str(2 * a + 1)}]}
        for a in range(1, 17)
    ]
    try:
        from peft import LoraConfig
        peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                 task_type="CAUSAL_LM")
    except ImportError:
        peft_config = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
                       "task_type": "CAUSAL_LM"}
    args = DPOConfig(output_dir="lora-DPO", per_device_train_batch_size=4, max_steps=3,
                     learning_rate=1e-2, logging_steps=1)
    trainer = DPOTrainer(model=TINY_MODEL, args=args, train_dataset=as_dataset(rows),
                         peft_config=peft_config)
    base = {n: p.clone() for n, p in trainer.model.named_parameters() if not p.requires_grad}
    adapter = snapshot(trainer)
    assert adapter and all(".lora_" in n for n in adapter)
    trainer.train()
    for n, p in base.items():
        assert np.array_equal(p, trainer.model.get_parameter(n)), f"frozen {n} changed"
    # lora_B starts at zero and moves at once; lora_A from the second step, once B is non-zero
    assert_all_changed(adapter, trainer)
    trainer.save_model(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_config.json").exists()
    assert (tmp_path / "adapter" / "adapter_model.safetensors").exists()


def test_kto(unpaired_rows):
    """TRL's KTO usage: KTOConfig + KTOTrainer on prompt/completion/label rows."""
    from rlhf import KTOConfig, KTOTrainer

    train_dataset = as_dataset(unpaired_rows)
    training_args = KTOConfig(output_dir="tiny-KTO", per_device_train_batch_size=4,
                              learning_rate=1e-3, logging_steps=1, num_train_epochs=1)
    trainer = KTOTrainer(model=TINY_MODEL, args=training_args, train_dataset=train_dataset)
    previous = snapshot(trainer)
    out = trainer.train()
    assert_all_changed(previous, trainer)
    assert out.global_step == 4
    logged = [e for e in trainer.state.log_history if "loss" in e]
    assert "kl" in logged[0] and "rewards/chosen" in logged[0]


@pytest.mark.parametrize("kind", ["orpo", "simpo"])
def test_orpo_and_simpo(kind, preference_rows):
    if kind == "orpo":
        from rlhf.experimental.orpo import ORPOConfig as Config, ORPOTrainer as Trainer
        args = Config(output_dir="out", per_device_train_batch_size=4, max_steps=2,
                      learning_rate=1e-3, logging_steps=1)
    else:
        from rlhf.experimental.cpo import CPOConfig as Config, CPOTrainer as Trainer
        args = Config(output_dir="out", per_device_train_batch_size=4, max_steps=2,
                      learning_rate=1e-3, logging_steps=1, loss_type="simpo", cpo_alpha=0.0)
    trainer = Trainer(model=TINY_MODEL, args=args, train_dataset=as_dataset(preference_rows))
    previous = snapshot(trainer)
    assert trainer.train().global_step == 2
    assert_all_changed(previous, trainer)
    assert "rewards/margins" in trainer.state.log_history[0]


def test_sft_text_and_messages():
    from rlhf import SFTConfig, SFTTrainer

    text = [{"text": f"{a} + {a} = {2 * a}"} for a in range(16)]
    messages = [{"messages": [{"role": "user", "content": f"What is {a} + 1?"},
                              {"role": "assistant", "content": str(a + 1)}]} for a in range(16)]
    for rows in (text, messages):
        args = SFTConfig(output_dir="sft", per_device_train_batch_size=4, max_steps=2,
                         learning_rate=1e-3, logging_steps=1)
        trainer = SFTTrainer(model=TINY_MODEL, args=args, train_dataset=as_dataset(rows))
        previous = snapshot(trainer)
        out = trainer.train()
        assert out.global_step == 2 and out.training_loss > 0
        assert_all_changed(previous, trainer)
