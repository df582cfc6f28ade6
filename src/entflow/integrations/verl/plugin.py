"""verl plugin entry point: importing this module registers entflow with verl.

verl's ``__init__`` imports every module named in the ``verl.plugins`` entry-point group
(unless ``VERL_USE_EXTERNAL_PLUGINS=none``); entflow's ``pyproject.toml`` names this one. It
registers entflow's policy losses (``entflow`` and ``entflow.<name>``) and the ``entflow``
trainer mode (``trainer.v1.trainer_mode=entflow``).

verl's v1 trainer needs its rollout stack (``transfer_queue``, an HTTP server, vLLM or SGLang);
where that stack is not installed verl's own trainer cannot start either, and only the losses are
registered. Any other failure to register the trainer is logged as a warning: verl hides a
plugin's import errors at debug level, and the losses stay registered.

With ``VERL_PLATFORM=cpu`` it also registers entflow's ``cpu`` platform (first, before any verl
module asks for its platform), verl's FSDP engine for the ``cpu`` device and the ``entflow_cpu``
rollout (``cpu.py``, ``cpu_rollout.py``; docs/integrations.md, "verl on a CPU").
"""

from __future__ import annotations

import importlib.util
import logging

from entflow.integrations.verl import cpu

if cpu.requested():  # VERL_PLATFORM=cpu: before any verl module asks for its platform
    cpu.register_platform()

from entflow.integrations.verl.losses import register_all

LOSS_MODES = register_all()

TRAINER_REGISTERED = False
_log = logging.getLogger(__name__)

if cpu.requested():  # verl's FSDP engine for the cpu device and the entflow_cpu rollout
    from entflow.errors import UnsupportedVersionError
    from entflow.integrations.verl import cpu_rollout

    try:
        cpu.enable()
        cpu_rollout.register()
    except UnsupportedVersionError as e:  # verl hides a plugin's import errors at debug level
        _log.warning("entflow: verl on a CPU is not available with this verl: %s", e)

if importlib.util.find_spec("transfer_queue") is None:  # cheap check first: verl's v1 trainer needs it
    _log.debug("entflow: transfer_queue is not installed, so verl's v1 trainer cannot run; losses only")
else:
    try:
        from entflow.integrations.verl import trainer as _trainer  # noqa: F401  (registers the "entflow" trainer)

        TRAINER_REGISTERED = True
    except ModuleNotFoundError as e:  # another part of verl's rollout stack is missing
        _log.debug("entflow: verl's v1 trainer is not importable (%r); losses only", e)
    except Exception as e:  # pragma: no cover - a real failure of the trainer module
        _log.warning("entflow: could not register the verl trainer mode 'entflow': %r", e)
