"""Parameters out of the library, save_model, and push_to_hub's refusal to pretend."""

import os

import numpy as np
import pytest

from conftest import TINY_MODEL


def test_parameters_save_and_reload(preference_rows, tmp_path):
    from rlhf import DPOConfig, DPOTrainer, Parameter

    args = DPOConfig(output_dir="out", per_device_train_batch_size=4, max_steps=2,
                     learning_rate=1e-3)
    trainer = DPOTrainer(model=TINY_MODEL, args=args, train_dataset=preference_rows)
    params = dict(trainer.model.named_parameters())
    assert "model.embed_tokens.weight" in params
    assert "model.layers.0.self_attn.q_proj.weight" in params
    assert "lm_head.weight" not in params  # tied, as transformers lists them
    emb = params["model.embed_tokens.weight"]
    assert isinstance(emb, Parameter) and emb.dtype == np.float32 and emb.ndim == 2
    assert emb.requires_grad
    snap = emb.clone()
    snap[0, 0] += 1.0  # a copy: the model is untouched
    assert not np.array_equal(snap, trainer.model.get_parameter("model.embed_tokens.weight"))
    assert trainer.model.num_parameters() == sum(p.size for p in params.values())

    trainer.train()
    trainer.save_model(tmp_path / "saved")
    reloaded = DPOTrainer(model=str(tmp_path / "saved"), args=args, train_dataset=preference_rows)
    for name, p in trainer.model.named_parameters():
        # the tiny model is bf16 on disk: saved weights are the trained ones rounded to bf16
        np.testing.assert_allclose(reloaded.model.get_parameter(name), p, rtol=1e-2, atol=1e-3)


def test_push_to_hub_never_silent(preference_rows, monkeypatch):
    from rlhf import DPOConfig, DPOTrainer

    args = DPOConfig(output_dir="out", per_device_train_batch_size=4, max_steps=1,
                     hub_model_id="someone/tiny-dpo")
    trainer = DPOTrainer(model=TINY_MODEL, args=args, train_dataset=preference_rows)
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="huggingface_hub"):
            trainer.push_to_hub()
        return
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    with pytest.raises(RuntimeError, match="push_to_hub: .*someone/tiny-dpo"):
        trainer.push_to_hub()
    assert os.path.exists("out/config.json")  # the model was saved before the upload
