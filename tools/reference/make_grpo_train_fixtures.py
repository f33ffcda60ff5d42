#!/usr/bin/env python3
"""GRPO training parity fixtures: TRL 1.9's own GRPOTrainer.train(), 2-4 optimizer steps on a tiny
random Llama, with fixed completions and fixed rewards, recorded for rlhf.c's GRPO trainer tests.

What is TRL's own code and what is replaced
-------------------------------------------
GRPOTrainer(...).train() runs for real (fp32, CPU, transformers' Trainer loop, AdamW, scheduler,
clipping, logging). Exactly three things are replaced:

  (a) sampling. The policy model's `generate` (the call at the bottom of
      GRPOTrainer._generate_single_turn, TRL's regular transformers path) is replaced on the model
      instance by a function that returns prompt ids + fixed raw completion ids, looked up per
      (prompt, k) where k counts the rows of the same prompt in that call (0..G-1). Everything
      after `generate` is TRL's: the cut after the first EOS, is_truncated, padding, masks
      (mask_truncated_completions), old / reference log-probs, rewards, advantages, loss, metrics.
      The raw completions (generated once up front from a seeded torch.Generator) are of five
      kinds: EOS at a varied position (rest of the row padded with pad = EOS, as generate does),
      EOS followed by junk tokens up to max_completion_length (TRL must drop the junk), EOS as the
      last allowed token (length max_completion_length, not truncated), EOS as the only token, and
      max_completion_length tokens without EOS (truncated).
  (b) rewards. The reward functions are ordinary TRL reward callables (reward_main, reward_aux)
      that look up a fixed value per (prompt id, completion ids as TRL passed them), including
      None for some rows, rows where every function is None (unscorable), prompts whose G rewards
      are all equal (zero std) and a prompt with a single non-None reward (group std NaN).
  (c) the per-generation-batch random row shuffle (trl.trainer.grpo_trainer.shuffle_sequence_dict)
      is the identity, so the micro-batches are consecutive slices of the generation batch and
      rlhf.c needs no torch RNG. Recorded as "shuffle": "identity".

The prompt order is TRL's own RepeatSampler (torch.randperm seeded with `seed`, once per epoch);
it is recorded per generation batch ("prompt_index"), so rlhf.c replays it instead of drawing.

Output (tests/fixtures/grpo_train/):
  model/                  config.json, generation_config.json, model.safetensors (the start point)
  prompts.jsonl           the dataset: {"prompt": text, "prompt_ids": [...]} per line (index = pid)
  reference.json          package versions, token ids, the case list
  <case>/case.json        config, lora, eos/pad ids, shuffle, generation_batches, micro_steps,
                          log_history, weights (see tools/reference/README.md for every key)
  <case>/final.safetensors  trained tensors (full model, or the adapter in PEFT's names)
  <case>/initial_adapter/   LoRA cases: the adapter training starts from

    tools/reference/.venv/bin/python tools/reference/make_grpo_train_fixtures.py [case ...]
"""
import collections
import importlib.machinery
import json
import os
import shutil
import sys
import tempfile
import zlib

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mf  # noqa: E402

OUT = os.path.join(mf.REPO, "tests", "fixtures", "grpo_train")
MODEL_DIR = os.path.join(OUT, "model")
MODEL_REL = "tests/fixtures/grpo_train/model"

VOCAB = 80
UNK, EOS, BOS = 0, 1, 2
PAD = EOS  # pad = eos (TRL sets pad_token = eos_token when the tokenizer has none)
G = 4  # num_generations
L = 8  # max_completion_length
N_PROMPTS = 8
LORA = dict(r=4, lora_alpha=8, lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            task_type="CAUSAL_LM")

COMMON = dict(num_generations=G, max_completion_length=L, per_device_train_batch_size=8,
              gradient_accumulation_steps=1, learning_rate=1e-2, lr_scheduler_type="linear",
              warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
              max_grad_norm=1.0, logging_steps=1, max_steps=3, seed=11, beta=0.0, loss_type="dapo",
              scale_rewards="group", temperature=1.0)

# name -> (GRPOConfig overrides, reward functions, LoRA, what the case is for)
# per_device_train_batch_size counts completions: prompts per generation batch =
# per_device_train_batch_size * steps_per_generation / G.
CASES = {
    "grpo_group": (dict(loss_type="grpo", per_device_train_batch_size=12, reward_weights=[1.0, 0.5], seed=125),
                   ["main", "aux"], False, "loss grpo, scale_rewards group, 2 reward functions weighted"),
    "bnpo_batch": (dict(loss_type="bnpo", scale_rewards="batch", seed=131), ["main"], False,
                   "loss bnpo, scale_rewards batch"),
    "dr_grpo_none": (dict(loss_type="dr_grpo", scale_rewards="none", seed=139), ["main"], False,
                     "loss dr_grpo (divides by max_completion_length), scale_rewards none"),
    "dapo_clip_higher": (dict(loss_type="dapo", epsilon_high=0.28, mask_truncated_completions=True,
                              num_iterations=2, learning_rate=5e-2, per_device_train_batch_size=12,
                              max_steps=4, seed=173), ["main"], False,
                         "DAPO: epsilon_high 0.28, mask_truncated_completions, num_iterations 2 (clipping)"),
    # adam_epsilon 1e-6: a zero-spread group's advantages are 0 up to float32 rounding of the
    # batch mean (TRL: ~7e-9), and AdamW's first step turns a gradient that small into a move of
    # ~lr wherever only that group touches a weight when epsilon is 1e-8: a rounding lottery no
    # reimplementation can replay. With 1e-6 such moves stay ~1e-3 lr.
    "gdpo": (dict(multi_objective_aggregation="normalize_then_sum", reward_weights=[1.0, 0.5],
                  per_device_train_batch_size=12, adam_epsilon=1e-6, seed=291), ["main", "aux"], False,
             "GDPO normalize_then_sum, 2 functions, weights [1, 0.5], None rewards"),
    "gspo": (dict(loss_type="grpo", importance_sampling_level="sequence", epsilon=0.05, epsilon_high=0.08,
                  num_iterations=2, learning_rate=5e-3, max_steps=4, seed=412), ["main"], False,
             "GSPO: sequence-level importance sampling, num_iterations 2, epsilons 0.05 / 0.08 (some sequences "
             "clipped, some not)"),
    "beta_full": (dict(loss_type="grpo", beta=0.1, seed=182), ["main"], False,
                  "beta 0.1, full fine-tuning: reference = frozen copy of the model"),
    "beta_lora": (dict(loss_type="dapo", beta=0.2, learning_rate=5e-2, seed=189), ["main", "aux"], True,
                  "beta 0.2, LoRA: reference = the model with the adapter off"),
    "iter2_beta": (dict(loss_type="grpo", num_iterations=2, beta=0.04, max_steps=4, seed=104), ["main"], False,
                   "num_iterations 2 (old log-probs, ratio != 1 on the second pass), beta 0.04"),
    "ga2_spg2": (dict(loss_type="dapo", gradient_accumulation_steps=2, per_device_train_batch_size=6,
                      seed=322), ["main"], False,
                 "gradient_accumulation_steps 2 = steps_per_generation 2; 6-row micro-batches split a group"),
    "ga2_spg1": (dict(loss_type="dapo", gradient_accumulation_steps=2, steps_per_generation=1, seed=331),
                 ["main"], False,
                 "gradient_accumulation_steps 2 with steps_per_generation 1: a fresh generation batch per "
                 "micro-step, no old log-probs, two dapo token means summed per optimizer step"),
    "spg2_ga1": (dict(loss_type="dapo", steps_per_generation=2, per_device_train_batch_size=4, max_steps=4,
                      seed=122), ["main"], False,
                 "steps_per_generation 2 with gradient_accumulation_steps 1: old log-probs, dapo normaliser "
                 "= tokens of the whole generation batch"),
    "delta_bnpo": (dict(loss_type="bnpo", delta=1.5, num_iterations=3, learning_rate=1e-1, max_steps=3,
                        per_device_train_batch_size=12,
                        seed=120), ["main"], False,
                   "two-sided clipping delta 1.5 (ratios above it with A < 0), num_iterations 3"),
    "mask_truncated_grpo": (dict(loss_type="grpo", mask_truncated_completions=True, seed=195), ["main"], False,
                            "mask_truncated_completions with loss grpo (masked rows still count in the row mean)"),
    "entropy_quantile": (dict(loss_type="dapo", top_entropy_quantile=0.25, seed=196), ["main"], False,
                         "top_entropy_quantile 0.25"),
    "temperature": (dict(loss_type="grpo", temperature=0.7, num_iterations=2, max_steps=4, seed=112), ["main"],
                    False, "temperature 0.7 (logits / T in every log-prob), num_iterations 2"),
    "optim_knobs": (dict(loss_type="bnpo", lr_scheduler_type="cosine", warmup_steps=1, weight_decay=0.1,
                         adam_beta1=0.8, adam_beta2=0.95, adam_epsilon=1e-6, max_grad_norm=0.05, max_steps=4,
                         seed=200), ["main"], False,
                    "cosine schedule, warmup 1, weight decay 0.1, adam betas/eps, max_grad_norm 0.05 (clips)"),
}

CONFIG_KEYS = ["loss_type", "beta", "epsilon", "epsilon_high", "delta", "scale_rewards",
               "multi_objective_aggregation", "importance_sampling_level", "mask_truncated_completions",
               "top_entropy_quantile", "num_iterations", "num_generations", "per_device_train_batch_size",
               "gradient_accumulation_steps", "steps_per_generation", "generation_batch_size", "learning_rate",
               "lr_scheduler_type", "warmup_steps", "weight_decay", "adam_beta1", "adam_beta2",
               "adam_epsilon", "max_grad_norm", "temperature", "max_completion_length", "reward_weights", "seed",
               "max_steps", "logging_steps", "optim", "entropy_coef", "use_bias_correction_kl",
               "off_policy_mask_threshold", "shuffle_dataset", "disable_dropout", "gradient_checkpointing",
               "pad_to_multiple_of", "top_p", "top_k", "min_p", "repetition_penalty"]


# --------------------------------------------------------------------------------------------
# model, tokenizer, prompts, completions, rewards


def stub_http_modules():
    """TRL 1.9's grpo_trainer imports trl.generation.vllm_client, which imports `requests.adapters`
    and `urllib3.util.retry` unconditionally (only the vLLM server mode uses them). The reference
    venv has neither; stand-ins that are never called let the import through. Nothing here talks
    to a network."""
    import types
    for mod, attrs in (("requests", {"ConnectionError": ConnectionError}),
                       ("requests.adapters", {"HTTPAdapter": type("HTTPAdapter", (), {})}),
                       ("urllib3", {}), ("urllib3.util", {}),
                       ("urllib3.util.retry", {"Retry": type("Retry", (), {})})):
        try:
            importlib.import_module(mod)
        except ImportError:
            m = types.ModuleType(mod)
            m.__spec__ = importlib.machinery.ModuleSpec(mod, None)
            m.__dict__.update(attrs)
            sys.modules[mod] = m
            parent, _, child = mod.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, m)


def build_model():
    """Tiny random Llama (H 16, 2 layers, 2 heads / 1 KV head, hd 8, I 32, V 80), fp32, eager."""
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=8, vocab_size=VOCAB, max_position_embeddings=64,
                         rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=BOS, eos_token_id=EOS,
                         pad_token_id=PAD, **mf.rope_kwargs(LlamaConfig, 10000.0, None))
    model = mf.make_model(LlamaForCausalLM, config)
    mf.reinit_weights(model, seed=4242)
    shutil.rmtree(MODEL_DIR, ignore_errors=True)
    model.save_pretrained(MODEL_DIR)
    for f in os.listdir(MODEL_DIR):
        assert f in ("config.json", "generation_config.json", "model.safetensors"), f


def build_tokenizer():
    """Word-level tokenizer: id i <-> "w{i}" for i >= 3, plus <unk> 0, </s> 1 (eos = pad), <s> 2.
    No special tokens are added on encode, so a prompt "w5 w17" is the ids [5, 17]."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"<unk>": UNK, "</s>": EOS, "<s>": BOS}
    vocab.update({f"w{i}": i for i in range(3, VOCAB)})
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="</s>", bos_token="<s>",
                                  pad_token="</s>")
    assert tok("w5 w17 w3")["input_ids"] == [5, 17, 3]
    return tok


class Table:
    """Prompts, raw completions per (pid, k) and rewards per (pid, kept completion)."""

    KINDS = ["eos", "eos_junk", "trunc", "eos_last", "eos_first"]

    def __init__(self):
        g = torch.Generator().manual_seed(777)

        def content(n):
            return torch.randint(3, VOCAB, (n,), generator=g).tolist()

        self.prompts = []
        for pid in range(N_PROMPTS):
            n = 2 + pid % 5  # prompt lengths 2..6: the generation batches are left-padded
            self.prompts.append(content(n))
        assert len(set(map(tuple, self.prompts))) == N_PROMPTS
        self.pid_of = {tuple(p): i for i, p in enumerate(self.prompts)}
        # kinds: every kind in every case's data; a fixed pattern rotated per prompt
        pattern = ["eos", "trunc", "eos_junk", "eos", "eos_last", "eos_first", "trunc", "eos_junk"]
        self.raw, self.kept, self.kind = {}, {}, {}
        for pid in range(N_PROMPTS):
            # rows k = 0, 1, 2 that have content start with the same token, as sampled completions
            # often do: the same prefix gets the same logits in every row, so the update of one row
            # moves the ratio of another (with a large enough step, past delta with A < 0)
            first = content(1)
            for k in range(G):
                kind = pattern[(3 * pid + k) % len(pattern)]

                def body(n):
                    c = content(n)
                    return first + c[1:] if k < 3 and n > 0 else c

                if kind == "eos":
                    n = int(torch.randint(1, L - 1, (1,), generator=g))  # 1..L-2 tokens, then EOS
                    raw = body(n) + [EOS]
                elif kind == "eos_junk":
                    n = int(torch.randint(0, L - 2, (1,), generator=g))
                    junk = torch.randint(0, VOCAB, (L - n - 1,), generator=g).tolist()  # may contain EOS again
                    raw = body(n) + [EOS] + junk
                elif kind == "trunc":
                    raw = body(L)
                elif kind == "eos_last":
                    raw = body(L - 1) + [EOS]
                else:  # eos_first
                    raw = [EOS]
                assert len(raw) <= L
                kept = raw[: raw.index(EOS) + 1] if EOS in raw else raw
                self.raw[pid, k], self.kept[pid, k], self.kind[pid, k] = raw, kept, kind
        assert set(self.kind.values()) == set(self.KINDS)
        # rewards
        vals = [0.0, 0.25, 0.5, 1.0, 1.5, 2.0]
        self.rewards = {"main": {}, "aux": {}}
        for pid in range(N_PROMPTS):
            for k in range(G):
                main = vals[int(torch.randint(0, len(vals), (1,), generator=g))]
                aux = float(torch.randint(0, 2, (1,), generator=g))
                if pid in (0, 4):  # all-equal group (zero std), for both functions
                    main, aux = 1.0, 1.0
                if pid in (1, 5) and k == 2:  # unscorable row: every function returns None
                    main, aux = None, None
                if pid == 6 and k != 1:  # one non-None main reward in the group: group std NaN
                    main = None
                if pid in (3, 7) and k == 3:  # aux alone is None
                    aux = None
                key = (pid, tuple(self.kept[pid, k]))
                for name, v in (("main", main), ("aux", aux)):
                    assert self.rewards[name].get(key, v) == v, "two kept completions collide"
                    self.rewards[name][key] = v

    def reward(self, name, pid, completion_ids):
        return self.rewards[name][pid, tuple(completion_ids)]


TABLE = None


def reward_main(prompts, completions, completion_ids, pid, **kwargs):
    """A real TRL reward callable: one value (or None) per completion, from the table."""
    return [TABLE.reward("main", p, c) for p, c in zip(pid, completion_ids, strict=True)]


def reward_aux(prompts, completions, completion_ids, pid, **kwargs):
    return [TABLE.reward("aux", p, c) for p, c in zip(pid, completion_ids, strict=True)]


REWARD_FUNCS = {"main": reward_main, "aux": reward_aux}


# --------------------------------------------------------------------------------------------
# the recording trainer


def fake_generate_for(trainer):
    """Stands in for model.generate in TRL's regular generation path: prompt ids (left-padded, as
    TRL passes them) + the fixed raw completion of (prompt, k), right-padded with PAD to the
    longest raw completion of the call, as transformers' generate returns finished rows."""

    def generate(input_ids=None, attention_mask=None, generation_config=None, **kwargs):
        assert generation_config.max_new_tokens == L
        seen = collections.Counter()
        rows = []
        for ids, m in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            pid = TABLE.pid_of[tuple(i for i, mm in zip(ids, m, strict=True) if mm)]
            k = seen[pid]
            seen[pid] += 1
            assert k < G
            rows.append(TABLE.raw[pid, k])
        assert all(v == G for v in seen.values())
        trainer.raw_rows = rows
        width = max(len(r) for r in rows)
        out = torch.tensor([r + [PAD] * (width - len(r)) for r in rows], dtype=input_ids.dtype)
        trainer.generate_calls += 1
        return torch.cat([input_ids, out], dim=1)

    return generate


def make_trainer_class():
    from trl import GRPOTrainer

    class RecordingGRPOTrainer(GRPOTrainer):
        def _generate(self, prompts):
            out = super()._generate(prompts)
            self._cap_ids = (out[0], out[1])  # prompt_ids_list, completion_ids_list (after TRL's EOS cut)
            return out

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            self._cap_rewards = rewards.detach().clone()
            return rewards

        def _generate_and_score_completions(self, inputs):
            step, global_step = self._step, self.state.global_step
            out = super()._generate_and_score_completions(inputs)
            prompt_ids_list, completion_ids_list = self._cap_ids
            lens = [len(c) for c in completion_ids_list]

            def rows(t):
                return None if t is None else [t[i, : lens[i]].tolist() for i in range(len(lens))]

            pm = out["prompt_mask"]
            assert [int(x) for x in pm.sum(1)] == [len(p) for p in prompt_ids_list]
            self.gen_records.append({
                "micro_step_at_generation": step,
                "global_step_at_generation": global_step,
                "prompt_index": [x["pid"] for x in inputs],
                "prompt_ids": [list(p) for p in prompt_ids_list],
                "raw_completion_ids": [list(r) for r in self.raw_rows],
                "completion_ids": [list(c) for c in completion_ids_list],
                "completion_mask": rows(out["completion_mask"]),
                "is_truncated": [c[-1] not in (EOS, PAD) for c in completion_ids_list],
                "reward_names": list(self.reward_func_names),
                "rewards": [[None if v != v else v for v in row] for row in self._cap_rewards.tolist()],
                "advantages": out["advantages"].tolist(),
                "num_items_in_batch": int(out["num_items_in_batch"]),
                "old_per_token_logps": rows(out.get("old_per_token_logps")),
                "ref_per_token_logps": rows(out.get("ref_per_token_logps")),
            })
            # the completion ids TRL padded: pad id after each row's length
            cid = out["completion_ids"]
            for i, n in enumerate(lens):
                assert cid[i, :n].tolist() == list(completion_ids_list[i])
                assert all(v == PAD for v in cid[i, n:].tolist())
            return out

        def _get_per_token_logps_and_entropies(self, model, *args, compute_entropy=False, **kwargs):
            out = super()._get_per_token_logps_and_entropies(model, *args, compute_entropy=compute_entropy,
                                                             **kwargs)
            if compute_entropy:  # the forward with grad inside _compute_loss
                self._cap_logps = out[0].detach()
            return out

        def get_high_entropy_mask(self, entropies, mask, threshold):
            m = super().get_high_entropy_mask(entropies, mask, threshold)
            self._cap_entropy_kept = (int(m.sum()), int(mask.sum()))
            return m

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            self._cap_entropy_kept = None
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            # diagnostics (not TRL values): the importance ratio exp(logp - old) over the loss mask
            mask = inputs["completion_mask"].bool()
            old = inputs.get("old_per_token_logps")
            rec = {"micro_step": self._step, "generation_batch": len(self.gen_records) - 1,
                   "chunk": self._step % self.args.steps_per_generation,
                   "optimizer_step": self.state.global_step + 1, "loss": loss.item()}
            if old is not None and mask.any():
                ratio = torch.exp(self._cap_logps - old)[mask]
                rec["ratio_min"], rec["ratio_max"] = ratio.min().item(), ratio.max().item()
                if self.args.delta is not None:
                    adv = inputs["advantages"].unsqueeze(1).expand_as(mask)[mask]
                    rec["tokens_above_delta_with_negative_advantage"] = int(
                        ((ratio > self.args.delta) & (adv < 0)).sum())
            if self._cap_entropy_kept is not None:
                rec["entropy_mask_kept"], rec["loss_mask_tokens"] = self._cap_entropy_kept
            self.micro_records.append(rec)
            return loss

    return RecordingGRPOTrainer


# --------------------------------------------------------------------------------------------


def fix_adapter_config(path):
    """PEFT writes target_modules in set order and the absolute base path: make both stable."""
    f = os.path.join(path, "adapter_config.json")
    with open(f) as fh:
        cfg = json.load(fh)
    cfg["base_model_name_or_path"] = MODEL_REL
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    with open(f, "w") as fh:
        json.dump(cfg, fh, indent=2, sort_keys=True)
        fh.write("\n")
    readme = os.path.join(path, "README.md")
    if os.path.exists(readme):
        os.remove(readme)


def run_case(name, tok, dataset):
    import trl
    import trl.trainer.grpo_trainer as gt
    from peft import LoraConfig
    from trl import GRPOConfig

    extra, funcs, lora, _ = CASES[name]
    out = os.path.join(OUT, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cfg = dict(COMMON, **extra)
    gt.shuffle_sequence_dict = lambda d: d  # (c): identity instead of the random row shuffle
    torch.manual_seed(zlib.crc32(name.encode()))  # LoRA init draws from the global RNG
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(output_dir=tmp, report_to=[], save_strategy="no", bf16=False, use_cpu=True,
                          gradient_checkpointing=False, dataloader_num_workers=0,
                          model_init_kwargs={"dtype": "float32", "attn_implementation": "eager"}, **cfg)
        trainer = make_trainer_class()(
            model=MODEL_DIR, reward_funcs=[REWARD_FUNCS[f] for f in funcs], args=args, train_dataset=dataset,
            processing_class=tok, peft_config=LoraConfig(**LORA) if lora else None)
        trainer.gen_records, trainer.micro_records, trainer.generate_calls = [], [], 0
        trainer.model.generate = fake_generate_for(trainer)
        if lora:
            trainer.model.save_pretrained(os.path.join(out, "initial_adapter"))
            fix_adapter_config(os.path.join(out, "initial_adapter"))
        decay = sorted(trainer.get_decay_parameter_names(trainer.model))
        trainer.train()
    assert trainer.generate_calls == len(trainer.gen_records) > 0

    if lora:
        trainer.model.save_pretrained(os.path.join(out, "final_adapter"))
        shutil.move(os.path.join(out, "final_adapter", "adapter_model.safetensors"),
                    os.path.join(out, "final.safetensors"))
        shutil.rmtree(os.path.join(out, "final_adapter"))
    else:
        state = {k: v.detach().contiguous() for k, v in trainer.model.state_dict().items()}
        save_file(state, os.path.join(out, "final.safetensors"), metadata={"format": "pt"})

    history = []
    for h in trainer.state.log_history:
        if "loss" not in h:
            continue  # the end-of-training summary (train_runtime, ...)
        history.append({k: v for k, v in h.items() if k != "step_time"})
    assert len(history) == cfg["max_steps"]
    # the logged loss is the sum of the micro-step losses of the optimizer step
    for h in history:
        s = sum(r["loss"] for r in trainer.micro_records if r["optimizer_step"] == h["step"])
        assert abs(s - h["loss"]) <= 1e-6 * max(1.0, abs(s)), (name, h["step"], s, h["loss"])

    a = trainer.args
    config = {k: getattr(a, k) for k in CONFIG_KEYS}
    config = {k: (v.value if hasattr(v, "value") else v) for k, v in config.items()}  # enums -> str
    config["reward_funcs"] = [REWARD_FUNCS[f].__name__ for f in funcs]
    case = {
        "description": CASES[name][3],
        "config": config,
        "lora": ({k: v for k, v in LORA.items()} if lora else None),
        "model": MODEL_REL,
        "initial_adapter": "initial_adapter" if lora else None,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "shuffle": "identity",
        "decay_parameters": decay,
        "generation_batches": trainer.gen_records,
        "micro_steps": trainer.micro_records,
        "log_history": history,
        "weights": "final.safetensors",
        "trl_version": trl.__version__,
    }
    with open(os.path.join(out, "case.json"), "w") as f:
        json.dump(case, f, indent=None, separators=(",", ":"))
        f.write("\n")
    check_case(name, case)
    losses = [round(h["loss"], 6) for h in history]
    print(f"{name}: {len(trainer.gen_records)} generation batches, {len(trainer.micro_records)} micro-steps, "
          f"losses {losses}")


def check_case(name, case):
    """Each case exercises what it claims."""
    cfg, gens, micro, hist = case["config"], case["generation_batches"], case["micro_steps"], case["log_history"]

    def any_log(key, pred=lambda v: v is not None and v > 0):
        return any(pred(h.get(key)) for h in hist)

    zero_std_groups = 0
    for gb in gens:
        adv = gb["advantages"]
        for g0 in range(0, len(adv), G):
            if all(a == 0.0 for a in adv[g0:g0 + G]):
                zero_std_groups += 1
    kinds = set()
    for gb in gens:
        for c, t in zip(gb["completion_ids"], gb["is_truncated"], strict=True):
            kinds.add("trunc" if t else ("eos_first" if len(c) == 1 else "eos"))
    problems = []
    # every case but these two (all prompts informative there) meets a zero-std group; with
    # scale_rewards "batch" and with GDPO, frac_reward_zero_std tests the batch std (all or nothing)
    informative_only = name in ("spg2_ga1", "delta_bnpo")
    gdpo = cfg["multi_objective_aggregation"] == "normalize_then_sum"
    if not informative_only and not gdpo and zero_std_groups == 0:
        problems.append("no zero-advantage group")
    if not informative_only and not gdpo and cfg["scale_rewards"] != "batch" and not any_log("frac_reward_zero_std"):
        problems.append("frac_reward_zero_std never > 0")
    if kinds != {"trunc", "eos_first", "eos"}:
        problems.append(f"completion kinds {kinds}")
    if not any(r is None for gb in gens for row in gb["rewards"] for r in row):
        problems.append("no None reward")
    needs_old = (cfg["num_iterations"] > 1 or cfg["steps_per_generation"] > cfg["gradient_accumulation_steps"])
    if needs_old:
        if any(gb["old_per_token_logps"] is None for gb in gens):
            problems.append("old logps missing")
        if not any(abs(r.get("ratio_max", 1) - 1) > 1e-3 or abs(r.get("ratio_min", 1) - 1) > 1e-3 for r in micro):
            problems.append("ratios stay 1")
    elif any(gb["old_per_token_logps"] is not None for gb in gens):
        problems.append("old logps unexpectedly present")
    if (cfg["beta"] != 0) != all(gb["ref_per_token_logps"] is not None for gb in gens):
        problems.append("ref logps presence")
    if cfg["beta"] != 0 and not any_log("kl"):
        problems.append("kl never > 0")
    if name in ("dapo_clip_higher", "gspo") and not any_log("clip_ratio/region_mean"):
        problems.append("no clipping")
    if cfg["delta"] is not None and not any(r.get("tokens_above_delta_with_negative_advantage", 0) for r in micro):
        problems.append("delta never binds")
    if cfg["top_entropy_quantile"] < 1 and not any(
            r["entropy_mask_kept"] < r["loss_mask_tokens"] for r in micro if "entropy_mask_kept" in r):
        problems.append("entropy mask keeps everything")
    if cfg["mask_truncated_completions"] and not any(
            t and not any(m) for gb in gens for t, m in zip(gb["is_truncated"], gb["completion_mask"])):
        problems.append("no masked truncated row")
    if cfg["max_grad_norm"] < 1 and not any(h["grad_norm"] > cfg["max_grad_norm"] for h in hist):
        problems.append("grad norm never clipped")
    if problems:
        raise AssertionError(f"{name}: " + "; ".join(problems))


def main():
    global TABLE
    torch.set_num_threads(2)
    stub_http_modules()
    import datasets
    import peft
    import transformers
    import trl
    from datasets import Dataset
    datasets.disable_progress_bars()
    transformers.utils.logging.set_verbosity_error()

    os.makedirs(OUT, exist_ok=True)
    build_model()
    tok = build_tokenizer()
    TABLE = Table()
    texts = [" ".join(f"w{i}" for i in p) for p in TABLE.prompts]
    assert [tok(t)["input_ids"] for t in texts] == TABLE.prompts
    with open(os.path.join(OUT, "prompts.jsonl"), "w") as f:
        for t, p in zip(texts, TABLE.prompts, strict=True):
            f.write(json.dumps({"prompt": t, "prompt_ids": p}) + "\n")
    dataset = Dataset.from_dict({"prompt": texts, "pid": list(range(N_PROMPTS))})

    names = sys.argv[1:] or list(CASES)
    for name in names:
        run_case(name, tok, dataset)
    import numpy
    ref = {
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__, "trl": trl.__version__, "peft": peft.__version__,
                     "datasets": datasets.__version__, "numpy": numpy.__version__},
        "model": MODEL_REL, "vocab_size": VOCAB, "eos_token_id": EOS, "pad_token_id": PAD, "bos_token_id": BOS,
        "num_generations": G, "max_completion_length": L,
        "cases": {n: CASES[n][3] for n in CASES},
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
