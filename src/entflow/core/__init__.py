"""Pure tensor math: token statistics, advantages, PPO-clip, estimators, flow statistics.

Depends on PyTorch only; nothing here knows about methods, trainers or the CLI. Importing the
package itself imports nothing (``token_stats_from_hidden`` resolves on first use), so that torch-free
code such as ``core.estimator_names`` can be read without loading torch.
"""

from typing import Any

__all__ = ["token_stats_from_hidden"]


def __getattr__(name: str) -> Any:
    if name == "token_stats_from_hidden":
        from entflow.core.hidden_stats import token_stats_from_hidden

        return token_stats_from_hidden
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
