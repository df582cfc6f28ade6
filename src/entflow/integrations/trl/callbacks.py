"""A live entropy-collapse monitor for any ``transformers.Trainer``, plain ``trl.GRPOTrainer`` included.

:class:`EntropyMonitorCallback` refits paper 003's entropy–performance law on the trainer's own
``state.log_history`` (the analysis of ``entflow analyze``, :func:`entflow.analysis.collapse.analyze_series`)
and adds ``entflow/law_ceiling``, ``entflow/pred_final`` and ``entflow/entropy_retention`` to the
logs; the first time entropy retention falls below the threshold while the reward has stalled it
warns once through the trainer's logger (``transformers.trainer``). See docs/analyze.md.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback
from transformers.utils import logging

from entflow.analysis.collapse_monitor import CollapseMonitor
from entflow.analysis.log_readers import log_from_records

__all__ = ["EntropyMonitorCallback"]

logger = logging.get_logger("transformers.trainer")


class EntropyMonitorCallback(TrainerCallback):
    """Refit the law every evaluation (or every ``every`` logging steps) and log ``entflow/*``.

    Args:
        every: refit every this many training logs (``logging_steps`` apart). ``None`` (default):
            on each evaluation when the trainer evaluates (``eval_strategy`` not ``"no"``), else
            every 10 training logs.
        retention_threshold: entropy retention (mean of the last 20 % / first 5 % of the logged
            entropies) below which entropy counts as collapsed.
        stall_ratio: the reward has stalled when its late slope is at most this × its early slope.
        early_frac: share of the points the early prediction of the final value is fitted on.
        entropy_key, reward_key, val_key: log keys overriding :data:`entflow.analysis.log_keys.KEY_TABLE`.

    The keyword arguments but ``every`` are those of :class:`entflow.analysis.collapse_monitor.CollapseMonitor`
    (their defaults: ``RETENTION_THRESHOLD``, ``STALL_RATIO``, ``EARLY_FRAC`` of :mod:`entflow.analysis.collapse`).

    The values are added to the ``logs`` dict of the log that triggered the refit and to the same
    entry of ``state.log_history`` (so ``trainer_state.json`` holds them). Reporting callbacks
    (TensorBoard, W&B) that run *before* this one have already written that dict: :meth:`attach`
    puts the callback first so that they record ``entflow/*`` too. ``analysis`` holds the latest
    :class:`entflow.analysis.collapse.CollapseAnalysis`, ``last_error`` why the latest refit was
    skipped (too few points …), ``warning`` the message warned, if any.
    """

    def __init__(self, every: int | None = None, **options: Any):
        if every is not None and (not isinstance(every, int) or every < 1):
            from entflow.errors import ParameterError

            raise ParameterError(
                "EntropyMonitorCallback", "every", f"must be a positive integer or None, got {every!r}"
            )
        self.every = every
        self.monitor = CollapseMonitor(**options)
        self.n_train_logs = 0
        self.n_refits = 0
        self.warning: str | None = None

    @property
    def analysis(self) -> Any:
        """The latest :class:`entflow.analysis.collapse.CollapseAnalysis` (None before the first fit)."""
        return self.monitor.last

    @property
    def last_error(self) -> str | None:
        """Why the latest refit gave nothing (None when it succeeded)."""
        return self.monitor.last_error

    def attach(self, trainer: Any) -> EntropyMonitorCallback:
        """Insert this callback first in ``trainer``'s callbacks (before the reporters) and return it."""
        handler = trainer.callback_handler
        handler.callbacks = [self] + [c for c in handler.callbacks if c is not self]
        return self

    def _due(self, args: Any, logs: dict[str, Any]) -> bool:
        strategy = getattr(args, "eval_strategy", "no")
        evaluates = getattr(strategy, "value", strategy) != "no"
        if any(k.startswith("eval_") for k in logs):
            return self.every is None and evaluates
        if not any(k in logs for k in ("loss", "entropy", "reward")):
            return False  # the end-of-training summary (train_runtime …)
        self.n_train_logs += 1
        every = self.every
        if every is None:
            if evaluates:
                return False
            every = 10
        return self.n_train_logs % every == 0

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if logs is None or not self._due(args, logs):
            return
        self.n_refits += 1
        metrics, message = self.monitor.check(log_from_records(state.log_history, "trainer.state.log_history", "trl"))
        logs.update(metrics)
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1].update(metrics)
        if message is not None:
            self.warning = message
            if state.is_world_process_zero:
                logger.warning(message)
