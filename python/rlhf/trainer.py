"""Trainers with TRL's names and calling conventions, over rlhf.c's C library.

A trainer turns (model, args, datasets, peft_config, reward_funcs) into rlhf.c's YAML keys,
makes a C trainer from them (include/rlhf.h: rlhf_trainer_create loads the model at once), and
train() runs rlhf.c's own loop: the arithmetic is the C library's, nothing is re-implemented
here.
"""

import ctypes
import json
import os
import shutil
import sys
import tempfile
import typing
import warnings
import weakref

from . import _lib, data
from ._config_text import config_text
from ._lora import lora_keys
from .configs import (
    CPOConfig,
    DPOConfig,
    GRPOConfig,
    GRPOWithReplayBufferConfig,
    KTOConfig,
    ORPOConfig,
    SFTConfig,
)
from .model import PolicyModel


class TrainOutput(typing.NamedTuple):
    """What train() returns (transformers' TrainOutput)."""

    global_step: int
    training_loss: float
    metrics: dict


class TrainerState:
    """trainer.state: global_step, max_steps, epoch and log_history (HF's TrainerState keys)."""

    def __init__(self):
        self.global_step = 0
        self.max_steps = 0
        self.epoch = 0.0
        self.log_history = []

    def __repr__(self):
        return (f"TrainerState(global_step={self.global_step}, max_steps={self.max_steps}, "
                f"epoch={self.epoch}, log_history=[{len(self.log_history)} entries])")


def _model_path(model):
    """What the C library is given as base_model: a local Hugging Face directory (a path, or an
    object naming its directory), or a Hub id as it is, which the library resolves exactly as
    `rlhf train` does (the HF cache read in C, HF_HUB_OFFLINE honoured, else a download with
    huggingface_hub.snapshot_download): one resolver for both front doors."""
    if not isinstance(model, (str, os.PathLike)):
        path = getattr(model, "name_or_path", None) or getattr(
            getattr(model, "config", None), "_name_or_path", None)
        if isinstance(path, str) and os.path.isdir(path):
            return path
        raise TypeError(
            "model: rlhf.c trains models it loads itself: pass the path of a Hugging Face model "
            f"directory (got a {type(model).__name__})"
        )
    return os.fspath(model)


def _tokenizer_path(processing_class):
    if processing_class is None:
        return None
    if isinstance(processing_class, (str, os.PathLike)):
        return os.fspath(processing_class)
    path = getattr(processing_class, "name_or_path", None)
    if isinstance(path, str) and os.path.isdir(path):
        return path
    raise TypeError(
        "processing_class: rlhf.c reads tokenizer.json itself: pass a tokenizer directory (or "
        "leave it None to use the model's)"
    )


def _unsupported(**given):
    for name, value in given.items():
        if value not in (None, (None, None), [], ()):
            raise ValueError(f"{name} is not supported by rlhf.c's trainers")


class _Trainer:
    """What every trainer shares. Subclasses say which config class and dataset rules apply."""

    _config_class = SFTConfig
    _suffix = "SFT"
    _rollout = None  # GRPOTrainer's rollout_func callable, handed to the C trainer

    def _setup(self, model, args, train_dataset, eval_dataset, processing_class, peft_config,
               reward_funcs=None):
        if args is None:
            name = os.path.basename(os.path.normpath(str(model))) if isinstance(model, str) else "model"
            args = self._config_class(output_dir=f"{name}-{self._suffix}")
        if not isinstance(args, self._config_class):
            raise TypeError(
                f"args: {type(self).__name__} takes a {self._config_class.__name__}, got "
                f"{type(args).__name__}"
            )
        self.args = args
        self.train_dataset = train_dataset
        self.eval_dataset = eval_dataset
        self.processing_class = processing_class
        self.state = TrainerState()
        self._c = None
        self._callables = []  # kept alive while the C trainer refers to them

        keys, notes = args._yaml()
        model_path = _model_path(model)
        keys["base_model"] = (os.path.abspath(model_path) if os.path.exists(model_path)
                              else model_path)
        tokenizer = _tokenizer_path(processing_class)
        if tokenizer:
            keys["tokenizer_config"] = (os.path.abspath(tokenizer) if os.path.exists(tokenizer)
                                        else tokenizer)
        if peft_config is not None:
            keys.update(lora_keys(peft_config))
        if train_dataset is None:
            raise ValueError(f"{type(self).__name__} needs a train_dataset")

        self._data_dir = tempfile.mkdtemp(prefix="rlhf-data-")
        self._cleanup_data = weakref.finalize(self, shutil.rmtree, self._data_dir, True)
        keys["dataset_prepared_path"] = os.path.join(self._data_dir, "prepared")
        keys["datasets"] = [self._dataset_entry(train_dataset, "train_dataset", "train")]
        if eval_dataset is not None:
            keys["test_datasets"] = [self._dataset_entry(eval_dataset, "eval_dataset", "eval")]
        if reward_funcs is not None:
            self._reward_specs(reward_funcs, keys)
        self._adjust_keys(keys)

        for note in notes:
            warnings.warn(note, stacklevel=3)
        lib = _lib.lib()
        handle = ctypes.c_void_p()
        text = config_text(keys).encode("utf-8")
        _lib.check(lib.rlhf_trainer_create(text, f"<{type(args).__name__}>".encode(),
                                           ctypes.byref(handle)))
        self._c = handle
        self._free = weakref.finalize(self, lib.rlhf_trainer_free, handle)
        for i in range(lib.rlhf_trainer_warning_count(handle)):
            warnings.warn(lib.rlhf_trainer_warning(handle, i).decode(), stacklevel=3)
        for name, fn in self._callables:
            _lib.check(lib.rlhf_trainer_set_python_reward(handle, name.encode(), fn))
        if self._rollout is not None:
            _lib.check(lib.rlhf_trainer_set_python_rollout(handle, self._rollout))
        self.model = PolicyModel(self, model_path)

    def _adjust_keys(self, keys):
        """A trainer's last word on the YAML keys."""

    def _handle(self):
        if self._c is None:
            raise RuntimeError("the trainer was not set up")
        return self._c

    def _dataset_entry(self, dataset, what, stem):
        rows = data.dataset_rows(dataset, what)
        rows, options = self._dataset_rows(rows)
        path = os.path.join(self._data_dir, f"{stem}.jsonl")
        data.write_jsonl(rows, path)
        return dict({"path": path}, **options)

    def _dataset_rows(self, rows):
        return data.sft_entry(rows, self.args)

    # ---- the TRL surface ----

    def train(self, resume_from_checkpoint=None, trial=None, ignore_keys_for_eval=None,
              **kwargs):
        """Trains; returns TrainOutput(global_step, training_loss, metrics).

        resume_from_checkpoint: None/False (start from the model as it is), True (the latest
        checkpoint-N in output_dir), or a checkpoint directory. Ctrl-C (SIGINT) or SIGTERM
        stops after the current step with checkpoint-<step> saved, then raises
        KeyboardInterrupt; train(resume_from_checkpoint=True) continues."""
        _unsupported(trial=trial, ignore_keys_for_eval=ignore_keys_for_eval)
        if kwargs:
            raise TypeError(f"train() got unexpected arguments: {', '.join(kwargs)}")
        if resume_from_checkpoint is None or resume_from_checkpoint is False:
            resume = b""
        elif resume_from_checkpoint is True:
            resume = b"true"
        else:
            resume = os.fspath(resume_from_checkpoint).encode()
        support = sys.modules.get("_rlhf_support")
        if support is not None:
            support.last_exception = None
        lib = _lib.lib()
        rc = lib.rlhf_trainer_train(self._handle(), resume, 0)
        message = _lib.last_error() if rc != _lib.OK else ""
        self._read_state()
        if rc == _lib.INTERRUPTED:
            raise KeyboardInterrupt(message)
        if rc != _lib.OK:
            support = sys.modules.get("_rlhf_support")
            cause = getattr(support, "last_exception", None) if support else None
            if message.startswith("reward function ") or cause is not None:
                if support is not None:
                    support.last_exception = None
                if isinstance(cause, KeyboardInterrupt):  # a second Ctrl-C, inside a reward
                    raise KeyboardInterrupt(message) from cause
                raise _lib.RewardFunctionError(message) from cause
            raise _lib.RLHFError(message)
        out = json.loads(lib.rlhf_trainer_state(self._handle()))["train_output"]
        return TrainOutput(out["global_step"], out["training_loss"], out["metrics"])

    def _read_state(self):
        state = json.loads(_lib.lib().rlhf_trainer_state(self._handle()))
        self.state.global_step = state["global_step"]
        self.state.max_steps = state["max_steps"]
        self.state.epoch = state["epoch"]
        self.state.log_history = state["log_history"]

    def save_model(self, output_dir=None, _internal_call=False):
        """Writes the model (or the LoRA adapter) as a Hugging Face directory, with the
        tokenizer files and the model card; output_dir defaults to args.output_dir. With
        args.push_to_hub, then pushes args.output_dir ("Model save"), as Trainer.save_model."""
        output_dir = os.fspath(output_dir or self.args.output_dir)
        _lib.check(_lib.lib().rlhf_trainer_save_model(self._handle(), output_dir.encode()))
        if self.args.push_to_hub and not _internal_call:
            self.push_to_hub(commit_message="Model save", revision=self.args.hub_revision)

    def push_to_hub(self, commit_message="End of training", blocking=True, token=None,
                    revision=None, **kwargs):
        """Saves the model (and its model card) to args.output_dir and uploads that directory to
        the Hub repository args.hub_model_id (default: the output directory's name) through the
        library's own Hub client, the one `rlhf train` pushes with (huggingface_hub's
        create_repo, create_branch and upload_folder). Returns the commit's URL; with
        blocking=False, a concurrent.futures.Future of it (as Trainer's run_as_future upload).
        Raises when huggingface_hub is missing, there is no token, or the Hub cannot be reached:
        nothing is ever skipped silently."""
        try:
            import huggingface_hub  # noqa: F401  (the library imports it in this interpreter)
        except ImportError:
            raise ImportError(
                "push_to_hub needs the huggingface_hub package (pip install huggingface_hub)"
            ) from None
        output_dir = os.fspath(self.args.output_dir)
        self.save_model(output_dir, _internal_call=True)
        repo_id = self.args.hub_model_id or os.path.basename(os.path.abspath(output_dir))
        private = self.args.hub_private_repo
        token = token or self.args.hub_token
        revision = revision or self.args.hub_revision
        handle = self._handle()

        def upload():
            url = ctypes.c_char_p()
            _lib.check(_lib.lib().rlhf_trainer_push_to_hub(
                handle, output_dir.encode(), repo_id.encode(),
                -1 if private is None else int(bool(private)),
                revision.encode() if revision else None, commit_message.encode(),
                token.encode() if token else None, ctypes.byref(url)))
            return url.value.decode()

        if blocking:
            return upload()
        import concurrent.futures
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        future = executor.submit(upload)
        executor.shutdown(wait=False)
        return future

    def log(self, logs, start_time=None):
        """Adds an entry to state.log_history (as Trainer.log does; rlhf.c's own log lines are
        written by the C loop)."""
        self.state.log_history.append(dict(logs, step=self.state.global_step))

    @property
    def is_world_process_zero(self):
        return True


class SFTTrainer(_Trainer):
    """TRL's SFTTrainer."""

    _config_class = SFTConfig
    _suffix = "SFT"

    def __init__(self, model, args=None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, compute_loss_func=None,
                 compute_metrics=None, callbacks=None, optimizers=(None, None),
                 optimizer_cls_and_kwargs=None, preprocess_logits_for_metrics=None,
                 peft_config=None, formatting_func=None):
        _unsupported(data_collator=data_collator, compute_loss_func=compute_loss_func,
                     compute_metrics=compute_metrics, callbacks=callbacks, optimizers=optimizers,
                     optimizer_cls_and_kwargs=optimizer_cls_and_kwargs,
                     preprocess_logits_for_metrics=preprocess_logits_for_metrics)
        self._formatting_func = formatting_func
        self._setup(model, args, train_dataset, eval_dataset, processing_class, peft_config)

    def _dataset_rows(self, rows):
        if self._formatting_func is not None:  # TRL: the function's string is the text
            rows = [{"text": self._formatting_func(r)} for r in rows]
            return data.sft_entry(rows, SFTConfig(dataset_text_field="text"))
        return data.sft_entry(rows, self.args)


class _PreferenceTrainer(_Trainer):
    _method = "dpo"

    def __init__(self, model, ref_model=None, args=None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, compute_metrics=None, callbacks=None,
                 optimizers=(None, None), peft_config=None, **unsupported):
        if ref_model is not None:
            raise ValueError(
                "ref_model: rlhf.c's reference is a frozen copy of `model` (or, with "
                "peft_config, the model with the adapter switched off), as TRL's default"
            )
        _unsupported(data_collator=data_collator, compute_metrics=compute_metrics,
                     callbacks=callbacks, optimizers=optimizers, **unsupported)
        self._setup(model, args, train_dataset, eval_dataset, processing_class, peft_config)

    def _dataset_rows(self, rows):
        return data.preference_entry(rows, self._method)


class DPOTrainer(_PreferenceTrainer):
    """TRL's DPOTrainer."""

    _config_class = DPOConfig
    _suffix = "DPO"


class KTOTrainer(_PreferenceTrainer):
    """TRL's KTOTrainer."""

    _config_class = KTOConfig
    _suffix = "KTO"
    _method = "kto"

    def _dataset_rows(self, rows):
        return data.kto_entry(rows)


class ORPOTrainer(_Trainer):
    """TRL's ORPOTrainer (trl.experimental.orpo)."""

    _config_class = ORPOConfig
    _suffix = "ORPO"
    _method = "orpo"

    def __init__(self, model=None, args=None, data_collator=None, train_dataset=None,
                 eval_dataset=None, processing_class=None, model_init=None, callbacks=None,
                 optimizers=(None, None), preprocess_logits_for_metrics=None, peft_config=None,
                 compute_metrics=None):
        _unsupported(data_collator=data_collator, model_init=model_init, callbacks=callbacks,
                     optimizers=optimizers, compute_metrics=compute_metrics,
                     preprocess_logits_for_metrics=preprocess_logits_for_metrics)
        self._setup(model, args, train_dataset, eval_dataset, processing_class, peft_config)

    def _dataset_rows(self, rows):
        return data.preference_entry(rows, self._method)


class CPOTrainer(ORPOTrainer):
    """TRL's CPOTrainer (trl.experimental.cpo), SimPO included (loss_type="simpo")."""

    _config_class = CPOConfig
    _suffix = "CPO"
    _method = "cpo"


class GRPOTrainer(_Trainer):
    """TRL's GRPOTrainer. reward_funcs: Python callables called as TRL calls them (keyword
    arguments prompts, completions, completion_ids, every dataset column, trainer_state,
    log_extra, log_metric; one number or None per completion), or strings naming rlhf.c reward
    functions ("builtin.accuracy", "module.function").

    rollout_func: a callable that makes each generation batch's completions in place of the
    built-in sampler, called as `trl.rollout_func: module.fn` is in YAML: TRL 1.9's
    rollout_func(prompts, trainer) returning a dict with prompt_ids, completion_ids, logprobs
    (optionally env_mask and extra reward columns), or Axolotl's rollout_func(model,
    processing_class, prompts, generation_config=None) returning one completion string per
    prompt row. Its trainer/model/processing_class arguments are objects over the C engine (see
    README's GRPO section), not this Python object. A string "module.function" is resolved as
    the YAML key is."""

    _config_class = GRPOConfig
    _suffix = "GRPO"

    def __init__(self, model, reward_funcs, args=None, train_dataset=None, eval_dataset=None,
                 processing_class=None, reward_processing_classes=None, callbacks=None,
                 optimizers=(None, None), peft_config=None, tools=None, rollout_func=None,
                 environment_factory=None):
        _unsupported(reward_processing_classes=reward_processing_classes, callbacks=callbacks,
                     optimizers=optimizers, tools=tools, environment_factory=environment_factory)
        if rollout_func is not None and not isinstance(rollout_func, str):
            if not callable(rollout_func):
                raise TypeError("rollout_func: expected a callable (or a 'module.function' "
                                f"name), got {type(rollout_func).__name__}")
            self._rollout = rollout_func
        self._rollout_spec = rollout_func
        self._setup(model, args, train_dataset, eval_dataset, processing_class, peft_config,
                    reward_funcs=reward_funcs)

    def _dataset_rows(self, rows):
        return data.grpo_entry(rows)

    def _adjust_keys(self, keys):
        # the replay buffer is GRPOWithReplayBufferTrainer's: GRPOTrainer ignores the field
        if not isinstance(self, GRPOWithReplayBufferTrainer):
            keys.get("trl", {}).pop("replay_buffer_size", None)
        spec = self._rollout_spec
        if spec is not None:  # a callable is named in messages by its __name__
            name = spec if isinstance(spec, str) else (
                getattr(spec, "__qualname__", None) or type(spec).__name__)
            keys.setdefault("trl", {})["rollout_func"] = (
                spec if isinstance(spec, str) else {"callback": name})

    def _reward_specs(self, reward_funcs, keys):
        funcs = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
        if not funcs:
            raise ValueError("reward_funcs: at least one reward function is needed")
        specs, taken = [], set()
        for i, fn in enumerate(funcs):
            if isinstance(fn, str):
                specs.append(fn)
                continue
            if not callable(fn):
                raise TypeError(
                    f"reward_funcs[{i}]: expected a callable or a name, got {type(fn).__name__}"
                )
            name = getattr(fn, "__name__", None) or type(fn).__name__
            unique, n = name, 1
            while unique in taken:  # metrics are keyed by name: keep them apart
                unique, n = f"{name}_{n}", n + 1
            taken.add(unique)
            self._callables.append((unique, fn))
            specs.append({"callback": unique})
        keys.setdefault("trl", {})["reward_funcs"] = specs


class GRPOWithReplayBufferTrainer(GRPOTrainer):
    """TRL's GRPOWithReplayBufferTrainer (trl.experimental.grpo_with_replay_buffer): GRPO where
    groups whose rewards have no spread are replaced by high-scoring groups kept from earlier
    batches (rlhf.c's replay buffer; see README)."""

    _config_class = GRPOWithReplayBufferConfig
    _suffix = "GRPO"


def request_stop():
    """Asks a running train() (in another thread) to stop after the current step, as Ctrl-C
    does: a checkpoint is saved and that train() raises KeyboardInterrupt."""
    _lib.lib().rlhf_request_stop()
