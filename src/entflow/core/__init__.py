"""Pure tensor math: token statistics, advantages, PPO-clip, estimators, flow statistics.

Depends on PyTorch only; nothing here knows about methods, trainers or the CLI.
"""
