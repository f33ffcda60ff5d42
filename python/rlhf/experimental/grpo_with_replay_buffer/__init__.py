"""As trl.experimental.grpo_with_replay_buffer."""

from ..._replay_buffer import ReplayBuffer
from ...configs import GRPOWithReplayBufferConfig
from ...trainer import GRPOWithReplayBufferTrainer

__all__ = ["GRPOWithReplayBufferConfig", "GRPOWithReplayBufferTrainer", "ReplayBuffer"]
