"""``entflow doctor``: prove on this machine that entflow computes what it should, fast enough.

Every check compares entflow with an independent float64 reference computed in the same process
(or, for speed, with the naive path) on each visible device, and reports its largest error
against a per-dtype tolerance. Each check takes its subject as a parameter, so the test suite
injects faults into it and shows that the check then fails (tests/doctor/). docs/gpu.md says
what each check means.

Modules, one per check family: ``token_stats``, ``hidden_stats`` (``token_stats_from_hidden``),
``gradients`` (policy-loss gradients), ``distributed`` (2-rank statistics), ``real_model`` (one
decoding pass and one update of a tiny transformers model through entflow's generation path),
``trl``, ``verl``, ``speed``; ``result`` holds :class:`CheckResult`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from entflow.doctor.result import CheckResult

__all__ = ["CHECKS", "CheckResult", "run_checks", "visible_devices"]

# family -> function(device, quick) -> list[CheckResult]; "per_device": run on every device
CHECKS: dict[str, tuple[str, bool]] = {
    "token_stats": ("entflow.doctor.token_stats:check_token_stats", True),
    "hidden_stats": ("entflow.doctor.hidden_stats:check_hidden_stats", True),
    "gradients": ("entflow.doctor.gradients:check_loss_gradients", True),
    "distributed": ("entflow.doctor.distributed:check_distributed", True),
    "real_model": ("entflow.doctor.real_model:check_real_model", True),
    "trl": ("entflow.doctor.trl:check_trl", True),
    "verl": ("entflow.doctor.verl:check_verl", False),
    "speed": ("entflow.doctor.speed:check_speed", True),
}


def visible_devices() -> list[str]:
    """``cpu`` always, then ``cuda`` and ``mps`` when present."""
    out = ["cpu"]
    if torch.cuda.is_available():
        out.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        out.append("mps")
    return out


def _load(target: str) -> Callable[..., list[CheckResult]]:
    import importlib

    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def run_checks(
    device: str | None = None,
    quick: bool = False,
    only: list[str] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
) -> list[CheckResult]:
    """Run every check family (or those in ``only``) on ``device`` (None: every visible device).

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``, or None for all of :func:`visible_devices`.
        quick: smaller shapes and fewer repetitions (under a minute on 2 CPU cores).
        only: names from :data:`CHECKS`.
        on_result: called with each result as it arrives (the CLI prints progress with it).

    Returns: the results in order; a failed check has ``ok`` False, a skipped one a
    ``skipped_reason``.
    """
    from entflow.errors import ParameterError

    families = list(CHECKS) if only is None else list(only)
    unknown = [f for f in families if f not in CHECKS]
    if unknown:
        raise ParameterError("doctor", "only", f"must name checks from {list(CHECKS)}, got {unknown}")
    if device is not None:
        try:
            kind = torch.device(device).type
        except (RuntimeError, TypeError) as e:
            raise ParameterError(
                "doctor", "device", f"must be a torch device such as 'cpu' or 'cuda', got {device!r}"
            ) from e
        if kind not in visible_devices():
            raise ParameterError("doctor", "device", f"{device!r} is not visible here (visible: {visible_devices()})")
    devices = visible_devices() if device is None else [device]
    results: list[CheckResult] = []
    for family in families:
        target, per_device = CHECKS[family]
        fn = _load(target)
        for dev in devices if per_device else devices[:1]:
            for r in fn(dev, quick):
                results.append(r)
                if on_result is not None:
                    on_result(r)
    return results
