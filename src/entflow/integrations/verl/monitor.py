"""A live entropy-collapse monitor for a verl driver: one call per step on verl's metrics dict.

verl's driver (``RayPPOTrainer.fit`` or a user's own loop) gathers each step's metrics in a dict
(``actor/entropy``, ``critic/score/mean``, ``val-core/<data_source>/<var>/<metric>@N`` …) and hands
it to its ``Tracking`` logger. Calling :meth:`EntropyMonitor.update` on that dict just before the
logger refits paper 003's entropy–performance law on the run so far (the analysis of
``entflow analyze``) and adds ``entflow/law_ceiling``, ``entflow/pred_final`` and
``entflow/entropy_retention`` to it; it warns once (``logging``) when entropy retention falls below
the threshold while the reward has stalled. No verl import. See docs/analyze.md.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from entflow.analysis.collapse_monitor import CollapseMonitor
from entflow.analysis.log_readers import log_from_records

__all__ = ["EntropyMonitor"]

logger = logging.getLogger(__name__)


class EntropyMonitor:
    """Keep a verl run's metrics and refit every ``every`` steps and on each validation step.

    ``EntropyMonitor(every=10).update(metrics, step)`` — call it once per training step with the
    metrics dict verl is about to log; it returns the same dict with ``entflow/*`` added on the
    steps it refits. Keyword arguments are those of :class:`entflow.analysis.collapse_monitor.CollapseMonitor`.
    ``analysis`` holds the latest :class:`entflow.analysis.collapse.CollapseAnalysis`.
    """

    def __init__(self, every: int = 10, **options: Any):
        if not isinstance(every, int) or every < 1:
            from entflow.errors import ParameterError

            raise ParameterError("EntropyMonitor", "every", f"must be a positive integer, got {every!r}")
        self.every = every
        self.monitor = CollapseMonitor(**options)
        self.history: list[dict[str, Any]] = []
        self.warning: str | None = None

    @property
    def analysis(self) -> Any:
        """The latest :class:`entflow.analysis.collapse.CollapseAnalysis` (None before the first fit)."""
        return self.monitor.last

    def update(self, metrics: MutableMapping[str, Any], step: int) -> MutableMapping[str, Any]:
        """Record ``metrics`` of ``step``; on a refit step add the ``entflow/*`` values to it in place."""
        self.history.append({k: v for k, v in metrics.items() if not k.startswith("entflow/")} | {"step": step})
        is_val = any(k.startswith(("val-core/", "val/")) for k in metrics)
        if len(self.history) % self.every and not is_val:
            return metrics
        out, message = self.monitor.check(log_from_records(self.history, "verl metrics", "verl"))
        metrics.update(out)
        if message is not None:
            self.warning = message
            logger.warning(message)
        return metrics
