"""entflow methods inside TRL's ``GRPOTrainer`` (docs/design.md §12, docs/integrations.md).

Modules: ``trainer`` (:class:`EntflowGRPOConfig`, :class:`EntflowGRPOTrainer`, the compatibility
checks). Importing this package imports TRL.
"""

from entflow.integrations.trl.callbacks import EntropyMonitorCallback
from entflow.integrations.trl.trainer import (
    LOSS_TYPE_AGG,
    SCALES,
    STATE_FILE,
    TRL_METRIC_NAMES,
    EntflowGRPOConfig,
    EntflowGRPOTrainer,
    build_method,
    check_compatibility,
)

__all__ = [
    "LOSS_TYPE_AGG",
    "SCALES",
    "STATE_FILE",
    "TRL_METRIC_NAMES",
    "EntflowGRPOConfig",
    "EntflowGRPOTrainer",
    "EntropyMonitorCallback",
    "build_method",
    "check_compatibility",
]
