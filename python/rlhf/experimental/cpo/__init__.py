"""As trl.experimental.cpo."""

from ...configs import CPOConfig
from ...trainer import CPOTrainer

__all__ = ["CPOConfig", "CPOTrainer"]
