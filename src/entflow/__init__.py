"""entflow: entropy-aware RL with verifiable rewards.

>>> import entflow as ef
>>> stats = ef.token_stats(logits, token_ids)              # logp, entropy, sum_p2, sum_p2_logp
>>> batch = ef.TokenBatch(stats.logp, old_logp, adv, mask, old_entropy=stats.entropy.detach())
>>> out = ef.policy_loss(batch, method="clip_higher+steer")
"""

from entflow.core.advantages import group_advantages
from entflow.core.batch import TokenBatch
from entflow.core.distributed import StepStatistics, average_metrics, read_metrics
from entflow.core.estimators import ESTIMATORS, entropy_change
from entflow.core.token_stats import TokenStats, entropy_from_logits, token_stats
from entflow.errors import (
    CompositionError,
    ConfigError,
    EntflowError,
    MissingInputError,
    NonFiniteError,
    ParameterError,
    ShapeError,
    StatefulMethodWarning,
    UnknownMethodError,
)
from entflow.methods import Method, get_method, list_methods
from entflow.methods.needs import required_token_stats
from entflow.methods.objective import LossOutput, compute_advantages, policy_loss, prepare_statistics

__version__ = "0.1.0"

__all__ = [
    "ESTIMATORS",
    "CompositionError",
    "ConfigError",
    "EntflowError",
    "LossOutput",
    "Method",
    "MissingInputError",
    "NonFiniteError",
    "ParameterError",
    "ShapeError",
    "StatefulMethodWarning",
    "StepStatistics",
    "TokenBatch",
    "TokenStats",
    "UnknownMethodError",
    "average_metrics",
    "compute_advantages",
    "entropy_change",
    "entropy_from_logits",
    "get_method",
    "group_advantages",
    "list_methods",
    "policy_loss",
    "prepare_statistics",
    "read_metrics",
    "required_token_stats",
    "token_stats",
]
