"""entflow: entropy-aware RL with verifiable rewards.

>>> import entflow as ef
>>> stats = ef.token_stats(logits, token_ids)              # logp, entropy, sum_p2, sum_p2_logp
>>> batch = ef.TokenBatch(stats.logp, old_logp, adv, mask, old_entropy=stats.entropy.detach())
>>> out = ef.policy_loss(batch, method="clip_higher+steer")

``import entflow`` imports nothing heavy: each public name is imported from its home module on
first access (PEP 562 module ``__getattr__``), so commands that need no tensors (``entflow
analyze`` on a trainer's logs, ``--help``) never import torch.
"""

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

__version__ = "0.2.0"

# public name -> the module it lives in
_HOMES: dict[str, str] = {
    "group_advantages": "entflow.core.advantages",
    "TokenBatch": "entflow.core.batch",
    "StepStatistics": "entflow.core.distributed",
    "average_metrics": "entflow.core.distributed",
    "read_metrics": "entflow.core.distributed",
    "ESTIMATORS": "entflow.core.estimators",
    "entropy_change": "entflow.core.estimators",
    "TokenStats": "entflow.core.token_stats",
    "entropy_from_logits": "entflow.core.token_stats",
    "token_stats": "entflow.core.token_stats",
    "CompositionError": "entflow.errors",
    "ConfigError": "entflow.errors",
    "EntflowError": "entflow.errors",
    "MissingInputError": "entflow.errors",
    "NonFiniteError": "entflow.errors",
    "ParameterError": "entflow.errors",
    "ShapeError": "entflow.errors",
    "StatefulMethodWarning": "entflow.errors",
    "UnknownMethodError": "entflow.errors",
    "Method": "entflow.methods",
    "get_method": "entflow.methods",
    "list_methods": "entflow.methods",
    "required_token_stats": "entflow.methods.needs",
    "LossSpec": "entflow.core.ppo",
    "LossOutput": "entflow.methods.objective",
    "compute_advantages": "entflow.methods.objective",
    "policy_loss": "entflow.methods.objective",
    "prepare_statistics": "entflow.methods.objective",
}

# subpackages that ``import entflow`` used to import eagerly (``ef.core.…`` keeps working)
_SUBMODULES = ("core", "errors", "methods")

__all__ = [
    "ESTIMATORS",
    "CompositionError",
    "ConfigError",
    "EntflowError",
    "LossOutput",
    "LossSpec",
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


def __getattr__(name: str) -> _Any:
    """Import a public name (or an eagerly-imported-before subpackage) on first access, then cache it."""
    if name in _HOMES:
        value = getattr(_importlib.import_module(_HOMES[name]), name)
    elif name in _SUBMODULES:
        value = _importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """What ``dir(entflow)`` showed when everything was imported eagerly: the public names, the
    subpackages and the module's dunder attributes."""
    dunders = {n for n in globals() if n.startswith("__")} - {"__getattr__", "__dir__", "__annotations__"}
    return sorted(dunders | set(__all__) | set(_SUBMODULES))


if _TYPE_CHECKING:  # for type checkers and IDEs only; at run time the names resolve lazily
    from entflow.core.advantages import group_advantages
    from entflow.core.batch import TokenBatch
    from entflow.core.distributed import StepStatistics, average_metrics, read_metrics
    from entflow.core.estimators import ESTIMATORS, entropy_change
    from entflow.core.ppo import LossSpec
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
