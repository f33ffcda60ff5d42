"""As trl.experimental.grpo_with_replay_buffer."""

from ...configs import GRPOWithReplayBufferConfig
from ...trainer import GRPOWithReplayBufferTrainer

__all__ = ["GRPOWithReplayBufferConfig", "GRPOWithReplayBufferTrainer"]
