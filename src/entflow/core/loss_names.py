"""The names the loss's settings take, without importing torch (a config is read, checked and
explained without it): how the per-token loss is reduced (:data:`AGG_MODES`, used by
``core/ppo.py``) and how advantages are scaled (:data:`SCALES`, used by ``core/advantages.py``)."""

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
SCALES = ("group", "batch", "none")
