"""As trl.experimental.orpo."""

from ...configs import ORPOConfig
from ...trainer import ORPOTrainer

__all__ = ["ORPOConfig", "ORPOTrainer"]
