"""rlhf: TRL-shaped trainers over rlhf.c's C library (include/rlhf.h).

    from rlhf import GRPOConfig, GRPOTrainer
    trainer = GRPOTrainer(model="models/tiny-arith", reward_funcs=[my_reward],
                          args=GRPOConfig(output_dir="out"), train_dataset=rows)
    trainer.train()

The configs take TRL 1.9's field names and defaults; training is rlhf.c's own loop.
See README.md, "Python API".
"""

from ._lib import RewardFunctionError, RLHFError
from .configs import (
    CPOConfig,
    DPOConfig,
    GRPOConfig,
    GRPOWithReplayBufferConfig,
    KTOConfig,
    ORPOConfig,
    SFTConfig,
)
from .model import Parameter, PolicyModel
from .trainer import (
    CPOTrainer,
    DPOTrainer,
    GRPOTrainer,
    GRPOWithReplayBufferTrainer,
    KTOTrainer,
    ORPOTrainer,
    SFTTrainer,
    TrainerState,
    TrainOutput,
    request_stop,
)

__all__ = [
    "CPOConfig", "CPOTrainer", "DPOConfig", "DPOTrainer", "GRPOConfig", "GRPOTrainer",
    "GRPOWithReplayBufferConfig", "GRPOWithReplayBufferTrainer", "KTOConfig", "KTOTrainer",
    "ORPOConfig", "ORPOTrainer", "Parameter", "PolicyModel", "RLHFError", "RewardFunctionError",
    "SFTConfig", "SFTTrainer", "TrainOutput", "TrainerState", "request_stop",
]
