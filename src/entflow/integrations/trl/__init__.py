"""entflow methods inside TRL's ``GRPOTrainer`` (docs/design.md §12, docs/integrations.md).

Modules, following TRL's trainer/config split: ``config`` (:class:`EntflowGRPOConfig`, the
compatibility checks), ``trainer`` (:class:`EntflowGRPOTrainer`: thin overrides of TRL's hooks),
``loss`` (TRL's batch → ``TokenBatch``, rollout statistics, the ``policy_loss`` call and its
normalisation), ``metrics`` (entflow's metrics under TRL's names, the controller's step metrics)
``compat`` (what depends on TRL's internals) and ``callbacks`` (:class:`EntropyMonitorCallback`, the
live entropy-collapse monitor, which also works with plain ``trl.GRPOTrainer``). Importing this package imports TRL.
"""

from entflow.integrations.trl.callbacks import EntropyMonitorCallback
from entflow.integrations.trl.config import (
    LOSS_TYPE_AGG,
    SCALES,
    EntflowGRPOConfig,
    build_method,
    check_compatibility,
)
from entflow.integrations.trl.metrics import TRL_METRIC_NAMES
from entflow.integrations.trl.trainer import STATE_FILE, EntflowGRPOTrainer

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
