#!/usr/bin/env python3
"""TRL-contract rollout function parity fixture: TRL 1.9's own GRPOTrainer.train() with
rollout_func (tests/fixtures/grpo_rollout/rollout_env.py: multi-turn completions with an
env_mask, an extra field for the reward) on the llama_text fixture model, 3 optimizer steps,
recorded for tests/test_grpo_rollout_func.c, which runs the same rollout_env.py under rlhf.c.

Nothing of TRL is replaced: the rollout function is TRL's own extension point. So that no
random draw of TRL's differs from rlhf.c's, every dataset row is the same prompt (TRL's sampler
order cannot matter) and a generation batch is one micro-batch (gradient_accumulation_steps 1:
TRL's row shuffle cannot matter, and no old log-probs are computed).

Cases: env_mask (the rollout as it is), sync_ref (the same with beta 0.1 and TRL's
sync_ref_model after every step: the reference follows the policy, alpha 0.6).

Output (tests/fixtures/grpo_rollout/):
  prompts.jsonl               the dataset (the same prompt on every row)
  [sync_ref/]case.json        versions, the GRPOConfig values, TRL's log_history
  [sync_ref/]final/           the trained model (config.json, model.safetensors)

    /work/venv-ref/bin/python tools/reference/make_grpo_rollout_fixtures.py [case ...]
"""
import importlib.util
import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_grpo_train_fixtures as gt  # noqa: E402  (stub_http_modules)
import make_model_fixtures as mf  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "grpo_rollout")
MODEL = os.path.join(mf.REPO, "tests", "fixtures", "models", "llama_text")

CONFIG = dict(num_generations=4, max_completion_length=16, per_device_train_batch_size=8,
              gradient_accumulation_steps=1, learning_rate=1e-2, lr_scheduler_type="linear",
              warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
              max_grad_norm=1.0, logging_steps=1, max_steps=3, seed=7, beta=0.0, loss_type="dapo",
              scale_rewards="group", temperature=1.0)


# name -> (GRPOConfig overrides, where the case is written (under OUT))
CASES = {
    "env_mask": ({}, ""),
    # TR-DPO's reference sync (TRL's SyncRefModelCallback) after every step, with the KL term on
    "sync_ref": (dict(beta=0.1, sync_ref_model=True, ref_model_mixup_alpha=0.6, ref_model_sync_steps=1,
                      seed=9), "sync_ref"),
}


def run_case(name, env, rows):
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    overrides, sub = CASES[name]
    config = dict(CONFIG, **overrides)
    out = os.path.join(OUT, sub)
    os.makedirs(out, exist_ok=True)
    env.CALLS[0] = 0
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="eager")
    tok = AutoTokenizer.from_pretrained(MODEL)
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, report_to="none", use_cpu=True, bf16=False, save_strategy="no",
                          dataloader_num_workers=0, **config)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[env.reward], args=args,
                              train_dataset=Dataset.from_list(rows), rollout_func=env.rollout)
        trainer.train()
        history = trainer.state.log_history
    assert env.CALLS[0] == config["max_steps"], env.CALLS[0]
    final = os.path.join(out, "final")
    shutil.rmtree(final, ignore_errors=True)
    trainer.model.save_pretrained(final)
    for f in os.listdir(final):
        if f not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(final, f))
    case = {"versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                         "torch": torch.__version__},
            "case": name, "config": config, "rollout_calls": env.CALLS[0], "log_history": history}
    with open(os.path.join(out, "case.json"), "w") as f:
        json.dump(case, f, indent=1)
        f.write("\n")
    print(name, json.dumps(history[-2]))


def main():
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    gt.stub_http_modules()
    os.environ["TRL_EXPERIMENTAL_SILENCE"] = "1"
    spec = importlib.util.spec_from_file_location("rollout_env", os.path.join(OUT, "rollout_env.py"))
    env = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(env)
    rows = [{"prompt": "Q: add 2 and 3"} for _ in range(8)]
    with open(os.path.join(OUT, "prompts.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    for name in sys.argv[1:] or CASES:
        run_case(name, env, rows)


if __name__ == "__main__":
    main()
