"""The C library (librlhf.so) through ctypes: loading it, its signatures, its errors.

Everything here calls include/rlhf.h and nothing else. The library is looked for at
$RLHF_LIBRARY, then next to this file (where `pip install ./python` puts it).

ctypes.CDLL releases the GIL for the duration of each call, so a training run does not block
other Python threads; the library takes the GIL back itself (PyGILState_Ensure) whenever it
calls a Python reward function.
"""

import ctypes
import os
import sys

API_VERSION = 1  # include/rlhf.h's RLHF_API_VERSION this binding was written for

OK, ERROR, INTERRUPTED = 0, 1, 2
NO_SIGNAL_HANDLERS = 1


class RLHFError(RuntimeError):
    """An error reported by the C library; the message is the one `rlhf train` prints."""


class RewardFunctionError(RLHFError):
    """A reward function failed (raised, or returned something unusable); the message names it.
    When it raised, the original exception is this one's __cause__."""


class _ParamInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * 2),
        ("numel", ctypes.c_size_t),
        ("trainable", ctypes.c_int),
    ]


REWARD_FN = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_char_p,
    ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_double),
    ctypes.c_char_p,
    ctypes.c_size_t,
)

_SIGNATURES = {
    "rlhf_api_version": (ctypes.c_int, []),
    "rlhf_python_version": (ctypes.c_char_p, []),
    "rlhf_last_error": (ctypes.c_char_p, []),
    "rlhf_trainer_create": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)],
    ),
    "rlhf_trainer_free": (None, [ctypes.c_void_p]),
    "rlhf_trainer_warning_count": (ctypes.c_size_t, [ctypes.c_void_p]),
    "rlhf_trainer_warning": (ctypes.c_char_p, [ctypes.c_void_p, ctypes.c_size_t]),
    "rlhf_trainer_set_reward": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_char_p, REWARD_FN, ctypes.c_void_p],
    ),
    "rlhf_trainer_set_python_reward": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.py_object],
    ),
    "rlhf_trainer_set_python_rollout": (ctypes.c_int, [ctypes.c_void_p, ctypes.py_object]),
    "rlhf_trainer_train": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint]),
    "rlhf_request_stop": (None, []),
    "rlhf_trainer_state": (ctypes.c_char_p, [ctypes.c_void_p]),
    "rlhf_trainer_save_model": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "rlhf_trainer_push_to_hub": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
         ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_char_p)],
    ),
    "rlhf_trainer_param_count": (ctypes.c_size_t, [ctypes.c_void_p]),
    "rlhf_trainer_param_info": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_ParamInfo)],
    ),
    "rlhf_trainer_param_read": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t],
    ),
    "rlhf_replay_buffer_create": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]),
    "rlhf_replay_buffer_free": (None, [ctypes.c_void_p]),
    "rlhf_replay_buffer_add": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_double,
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_int),
        ],
    ),
    "rlhf_replay_buffer_size": (ctypes.c_size_t, [ctypes.c_void_p]),
    "rlhf_replay_buffer_entry": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_double),
            ctypes.POINTER(ctypes.c_uint64),
        ],
    ),
    "rlhf_replay_buffer_sample": (
        ctypes.c_int,
        [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)],
    ),
}

_lib = None


def library_path():
    """Where the library is loaded from: $RLHF_LIBRARY, else the copy inside the package."""
    env = os.environ.get("RLHF_LIBRARY")
    if env:
        return env
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "librlhf.so")


def lib():
    """The loaded library (loaded on first use, with its version checked)."""
    global _lib
    if _lib is not None:
        return _lib
    path = library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"rlhf: the C library is not at {path}. Install the package with "
            "`pip install ./python` from the rlhf.c repository (it builds librlhf.so with "
            "CMake), or set RLHF_LIBRARY to a librlhf.so built with `make`."
        )
    handle = ctypes.CDLL(path)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(handle, name)
        fn.restype = restype
        fn.argtypes = argtypes
    if handle.rlhf_api_version() != API_VERSION:
        raise ImportError(
            f"rlhf: {path} implements C API version {handle.rlhf_api_version()}, this package "
            f"was written for version {API_VERSION}: rebuild and reinstall both together."
        )
    # The library calls reward functions in this very interpreter: it must be the Python
    # version its libpython was built for.
    built_for = handle.rlhf_python_version().decode()
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if not built_for:
        raise ImportError(
            f"rlhf: {path} was built without Python (-DRLHF_PYTHON=OFF, or no libpython found), "
            "so it cannot call this interpreter's reward functions; rebuild it with "
            "libpython3-dev installed (or -DRLHF_PYTHON=ON)."
        )
    if built_for != running:
        raise ImportError(
            f"rlhf: {path} was built against Python {built_for}, but this is Python {running}; "
            "rebuild it with this Python's development files (libpython3-dev)."
        )
    _lib = handle
    return _lib


def last_error():
    return lib().rlhf_last_error().decode("utf-8", "replace")


def check(rc, error_class=RLHFError):
    """Raises error_class with the library's message unless rc is OK."""
    if rc != OK:
        raise error_class(last_error())
