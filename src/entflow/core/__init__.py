"""Pure tensor math: token statistics, advantages, PPO-clip, estimators, flow statistics.

Depends on PyTorch only; nothing here knows about methods, trainers or the CLI.
"""

from entflow.core.hidden_stats import token_stats_from_hidden

__all__ = ["token_stats_from_hidden"]
