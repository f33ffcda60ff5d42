"""TRL's experimental ReplayBuffer, backed by the C library's buffer (include/rlhf.h).

The library decides which items are held (the max_size greatest scores offered so far; a new
item replaces the held minimum only when its score is strictly greater) and draws them; this
class keeps the items themselves, under the ids the library gives them.

Where TRL's class and this one differ, and why:
- A score must be a finite number >= 0 (it is a draw's weight). TRL's accepts anything and
  torch.multinomial fails later, in sample(); here add() raises ValueError at once.
- Draws come from Python's `random` module (one 64-bit seed per sample() call), so
  `random.seed(n)` makes them reproducible; TRL's come from torch's global generator.
- When fewer items than draws have a positive score, or every score is 0, TRL's
  torch.multinomial raises; here the draw is made with replacement (all alike when every score
  is 0), as the GRPO replay training itself does (src/grpo/replay_buffer.h).
- Among equal scores the earliest offered item is kept (TRL's heapq compares the items
  themselves on a tie, and raises TypeError for dicts).
"""

import ctypes
import random

from . import _lib


class ReplayBuffer:
    """A simple replay buffer to store and sample previously seen rollouts.

    `heap` lists the held items as (score, item) tuples in min-heap layout, as TRL's does:
    heap[0] is the item of lowest score, the next to be dropped."""

    def __init__(self, max_size: int):
        if isinstance(max_size, bool) or not isinstance(max_size, int):
            raise TypeError(f"ReplayBuffer: max_size must be an int, got {type(max_size).__name__}")
        self.max_size = max_size
        self._items = {}  # id -> item, for the ids the library holds
        self._lib = _lib.lib()
        handle = ctypes.c_void_p()
        _lib.check(self._lib.rlhf_replay_buffer_create(max_size, ctypes.byref(handle)))
        self._handle = handle

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._lib.rlhf_replay_buffer_free(handle)
            self._handle = None

    def _held(self):
        """(score, id) of every held item, in the library's heap layout."""
        out = []
        score, ident = ctypes.c_double(), ctypes.c_uint64()
        for i in range(self._lib.rlhf_replay_buffer_size(self._handle)):
            _lib.check(
                self._lib.rlhf_replay_buffer_entry(
                    self._handle, i, ctypes.byref(score), ctypes.byref(ident)
                )
            )
            out.append((score.value, ident.value))
        return out

    def add(self, scores, data):
        """Offers each item of `data` with the score of the same position in `scores` (of the
        same length)."""
        scores, data = list(scores), list(data)
        if len(scores) != len(data):
            raise ValueError(
                f"ReplayBuffer.add: {len(scores)} scores for {len(data)} items (one score each)"
            )
        ident, kept = ctypes.c_uint64(), ctypes.c_int()
        for score, datum in zip(scores, data):
            try:
                value = float(score)
            except (TypeError, ValueError):
                raise ValueError(f"ReplayBuffer.add: score {score!r} is not a number") from None
            if self._lib.rlhf_replay_buffer_add(
                self._handle, value, ctypes.byref(ident), ctypes.byref(kept)
            ):
                raise ValueError(_lib.last_error())
            if kept.value:
                self._items[ident.value] = datum
        held = {i for _, i in self._held()}
        self._items = {i: d for i, d in self._items.items() if i in held}

    def sample(self, num_samples: int):
        """num_samples held items drawn with probability proportional to score (without
        replacement unless num_samples exceeds what can be drawn so); None when empty."""
        if not self._items:
            return None
        if num_samples <= 0:
            return []
        ids = (ctypes.c_uint64 * num_samples)()
        seed = random.getrandbits(64)
        _lib.check(self._lib.rlhf_replay_buffer_sample(self._handle, num_samples, seed, ids))
        return [self._items[i] for i in ids]

    @property
    def heap(self):
        return [(score, self._items[i]) for score, i in self._held()]

    def __len__(self):
        return len(self._items)
