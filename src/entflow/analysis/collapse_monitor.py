"""The live side of :func:`entflow.analysis.collapse.analyze_log`, shared by the TRL callback
(``integrations/trl/callbacks.py``) and the verl monitor (``integrations/verl/monitor.py``)."""

from __future__ import annotations

import math

from entflow.analysis.collapse import (
    EARLY_FRAC,
    RETENTION_THRESHOLD,
    STALL_RATIO,
    CollapseAnalysis,
    analyze_log,
)
from entflow.analysis.log_readers import LogData
from entflow.errors import LogError

__all__ = ["MONITOR_KEYS", "CollapseMonitor"]


MONITOR_KEYS = ("entflow/law_ceiling", "entflow/pred_final", "entflow/entropy_retention")


class CollapseMonitor:
    """The live side of :func:`analyze_log`, shared by the TRL callback and the verl monitor.

    :meth:`check` analyses the log so far and returns the ``entflow/*`` metrics of
    :data:`MONITOR_KEYS` (``entflow/pred_final`` only when the early prediction exists) and, the
    first time the verdict is ``collapsed`` (entropy retention below ``retention_threshold`` while
    the reward has stalled), a warning message; later calls return no message. A log still too
    short (or otherwise unusable) gives ``({}, None)`` and keeps the reason in ``last_error``.
    """

    def __init__(
        self,
        *,
        retention_threshold: float = RETENTION_THRESHOLD,
        stall_ratio: float = STALL_RATIO,
        early_frac: float = EARLY_FRAC,
        entropy_key: str | None = None,
        reward_key: str | None = None,
        val_key: str | None = None,
    ):
        self.options = {
            "retention_threshold": retention_threshold,
            "stall_ratio": stall_ratio,
            "early_frac": early_frac,
            "entropy_key": entropy_key,
            "reward_key": reward_key,
            "val_key": val_key,
        }
        self.warned = False
        self.last_error: str | None = None
        self.last: CollapseAnalysis | None = None

    def check(self, log: LogData) -> tuple[dict[str, float], str | None]:
        """(metrics to log, warning message or None) for the log so far."""
        try:
            _, analysis = analyze_log(log, **self.options)
        except LogError as e:
            self.last_error = str(e)
            return {}, None
        self.last, self.last_error = analysis, None
        out = {"entflow/law_ceiling": analysis.ceiling, "entflow/entropy_retention": analysis.entropy["retention"]}
        pred = analysis.prediction["final"]
        if math.isfinite(pred):
            out["entflow/pred_final"] = pred
        out = {k: float(v) for k, v in out.items() if math.isfinite(v)}
        message = None
        if analysis.collapse["collapsed"] and not self.warned:
            self.warned = True
            sug = analysis.suggestion
            # TRL: the config fields in one line; verl: the Hydra overrides, space-separated as on
            # a command line (collapse.suggestion_lines)
            how = sug["trl"] if sug["trainer"] != "verl" else " ".join(sug["lines"])
            message = (
                f"entflow: entropy collapse at step {analysis.steps[1]:g}: "
                + "; ".join(analysis.collapse["evidence"])
                + f". Suggestion: {how} ({sug['why']})"
            )
        return out, message
