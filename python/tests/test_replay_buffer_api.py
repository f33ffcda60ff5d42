"""rlhf.experimental.grpo_with_replay_buffer.ReplayBuffer (backed by the C buffer) against TRL:
TestReplayBuffer of TRL's tests/experimental/test_grpo_with_replay_buffer_trainer.py, its
assertions unchanged, then TRL's own algorithm (heapq.heappush / heapreplace when
`score > heap[0][0]`) as the reference for what is held, and the draws' law."""

import heapq
import random

import pytest

from rlhf.experimental.grpo_with_replay_buffer import ReplayBuffer


class TestReplayBuffer:
    """TRL's class, ported: only `self.replay_buffer` is our ReplayBuffer."""

    def setup_method(self):
        self.replay_buffer = ReplayBuffer(max_size=5)

    def test_add(self):
        scores = [0.5, 0.8, 0.3, 0.9, 0.7]
        data = [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}, {"id": 5}]
        self.replay_buffer.add(scores, data)
        assert len(self.replay_buffer.heap) == 5
        heap_scores = [item[0] for item in self.replay_buffer.heap]
        assert heap_scores[0] == min(heap_scores)
        assert heap_scores[0] == 0.3

    def test_add_more_than_maxlen(self):
        scores = [0.5, 0.8, 0.3, 0.9, 0.7, 0.6, 0.4]
        data = [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}, {"id": 5}, {"id": 6}, {"id": 7}]
        self.replay_buffer.add(scores, data)
        assert len(self.replay_buffer.heap) == 5
        heap_scores = [item[0] for item in self.replay_buffer.heap]
        assert heap_scores[0] == min(heap_scores)
        assert heap_scores[0] == 0.5  # 0.3 and 0.4 should be removed

    def test_sample(self):
        scores = [0.5, 0.8, 0.3, 0.9, 0.7]
        data = [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}, {"id": 5}]
        self.replay_buffer.add(scores, data)
        sampled = self.replay_buffer.sample(num_samples=3)
        assert len(sampled) == 3
        for item in sampled:
            assert item in [entry[1] for entry in self.replay_buffer.heap]


def trl_reference(max_size, scores):
    """TRL's ReplayBuffer.add on (score, index) pairs (the index stands for the item)."""
    heap = []
    for i, score in enumerate(scores):
        if len(heap) < max_size:
            heapq.heappush(heap, (score, i))
        elif score > heap[0][0]:
            heapq.heapreplace(heap, (score, i))
    return heap


@pytest.mark.parametrize("max_size", [1, 3, 8, 40])
def test_held_items_match_trl_over_many_adds(max_size):
    rng = random.Random(max_size)
    buf = ReplayBuffer(max_size)
    scores = [rng.random() for _ in range(100)]
    for start in range(0, 100, 7):  # several add() calls, as a training run makes
        chunk = range(start, min(start + 7, 100))
        buf.add([scores[i] for i in chunk], [{"i": i} for i in chunk])
        expected = trl_reference(max_size, scores[: chunk.stop])
        got = buf.heap
        assert sorted((s, d["i"]) for s, d in got) == sorted(expected)
        assert len(buf) == len(expected)
        for k in range(len(got)):  # heapq's invariant on our layout
            for child in (2 * k + 1, 2 * k + 2):
                if child < len(got):
                    assert got[k][0] <= got[child][0]


def test_equal_scores_keep_the_earliest():
    buf = ReplayBuffer(2)
    buf.add([1.0, 1.0, 1.0, 2.0], ["a", "b", "c", "d"])
    assert sorted(d for _, d in buf.heap) == ["a", "d"]


def test_sample_law_and_replacement():
    buf = ReplayBuffer(4)
    buf.add([1.0, 2.0, 3.0, 4.0], ["w1", "w2", "w3", "w4"])
    random.seed(1234)
    counts = {k: 0 for k in ("w1", "w2", "w3", "w4")}
    n = 20000
    for _ in range(n):
        (item,) = buf.sample(1)
        counts[item] += 1
    for k, weight in zip(("w1", "w2", "w3", "w4"), (1, 2, 3, 4)):
        p = weight / 10
        sd = (p * (1 - p) / n) ** 0.5
        assert abs(counts[k] / n - p) < 5 * sd, (k, counts[k])
    # at most len(heap) draws: without replacement, as torch.multinomial(replacement=False)
    for _ in range(50):
        drawn = buf.sample(4)
        assert sorted(drawn) == ["w1", "w2", "w3", "w4"]
    # more draws than items: with replacement
    assert len(buf.sample(9)) == 9
    random.seed(7)
    first = buf.sample(3)
    random.seed(7)
    assert buf.sample(3) == first  # random.seed makes the draws reproducible


def test_empty_and_bad_input():
    buf = ReplayBuffer(3)
    assert buf.sample(2) is None
    assert len(buf) == 0
    with pytest.raises(ValueError, match="scores for"):
        buf.add([1.0], ["a", "b"])
    with pytest.raises(ValueError, match="finite number >= 0"):
        buf.add([-1.0], ["a"])
    with pytest.raises(ValueError, match="finite number >= 0"):
        buf.add([float("nan")], ["a"])
    assert len(buf) == 0
    disabled = ReplayBuffer(0)
    disabled.add([1.0], ["a"])
    assert disabled.sample(1) is None
