"""trainer.model: the weights the C library holds, seen as numpy arrays.

There is no PyTorch model here. named_parameters() reads each tensor out of the library at the
moment it is called and yields (name, Parameter): a float32 numpy array (a copy: changing it
does not change the model) that also answers the few torch.Tensor methods scripts use to take a
snapshot — clone(), detach(), cpu(), numpy() — and carries requires_grad. So TRL's usual
check works unchanged:

    previous = {n: p.clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    for n, p in previous.items():
        assert not np.array_equal(p, trainer.model.get_parameter(n))
"""

import ctypes

import numpy as np

from . import _lib


class Parameter(np.ndarray):
    """A float32 array with torch-like snapshot methods and requires_grad."""

    def __new__(cls, array, requires_grad=True):
        obj = np.asarray(array, dtype=np.float32).view(cls)
        obj.requires_grad = requires_grad
        return obj

    def __array_finalize__(self, obj):
        self.requires_grad = getattr(obj, "requires_grad", False)

    def clone(self):
        """A copy (torch.Tensor.clone)."""
        return self.copy()

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        """The values as a plain numpy array."""
        return np.asarray(self)

    def numel(self):
        return int(self.size)


class PolicyModel:
    """The model being trained, as far as a script reads it."""

    def __init__(self, trainer, path):
        self._trainer = trainer  # the handle lives as long as the trainer
        self.name_or_path = path

    def _handle(self):
        return self._trainer._handle()

    def _infos(self):
        lib, handle = _lib.lib(), self._handle()
        for i in range(lib.rlhf_trainer_param_count(handle)):
            info = _lib._ParamInfo()
            _lib.check(lib.rlhf_trainer_param_info(handle, i, ctypes.byref(info)))
            yield i, info

    def _read(self, i, info):
        shape = tuple(info.shape[: info.ndim])
        out = np.empty(shape, dtype=np.float32)
        _lib.check(
            _lib.lib().rlhf_trainer_param_read(
                self._handle(), i, out.ctypes.data_as(ctypes.c_void_p), out.size
            )
        )
        return Parameter(out, requires_grad=bool(info.trainable))

    def named_parameters(self):
        """(name, Parameter) for every tensor: transformers' names, then an adapter's (PEFT's
        saved names, e.g. base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight).
        With an adapter only the adapter's tensors have requires_grad True."""
        for i, info in self._infos():
            yield info.name.decode(), self._read(i, info)

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def get_parameter(self, name):
        for i, info in self._infos():
            if info.name.decode() == name:
                return self._read(i, info)
        raise AttributeError(f"the model has no parameter {name!r}")

    def state_dict(self):
        return dict(self.named_parameters())

    def num_parameters(self, only_trainable=False):
        return sum(
            int(info.numel) for _, info in self._infos() if info.trainable or not only_trainable
        )

    def save_pretrained(self, save_directory):
        """The model (or adapter) as a Hugging Face directory, as trainer.save_model writes it."""
        self._trainer.save_model(save_directory)

    def __repr__(self):
        return f"PolicyModel({self.name_or_path!r}, {self.num_parameters()} parameters)"
