"""Which per-token statistics a method needs, so that ``token_stats`` computes nothing more.

``token_stats(..., stats=required_token_stats(method))`` is the call a trainer makes: most methods
need the log-prob and the entropy; the ``tabular`` entropy-change estimator (docs/design.md §5), whether a
method uses it or the caller evaluates it, also needs Σπ² and Σπ² log π (docs/design.md §3).
"""

from __future__ import annotations

from collections.abc import Iterable

from entflow.core.estimators import ESTIMATORS
from entflow.core.token_stats import STAT_NAMES
from entflow.errors import UnknownMethodError
from entflow.methods.base import Method, resolve_method

_TABULAR = ("sum_p2", "sum_p2_logp")


def required_token_stats(
    method: str | Method | None = None,
    estimators: Iterable[str] = (),
    *,
    entropy: bool = True,
) -> tuple[str, ...]:
    """The ``token_stats`` statistics (a subset of ``STAT_NAMES``, in that order) a loss needs.

    Args:
        method: a method, a registered name or composition (``"a+b"``), or ``None`` (grpo).
        estimators: entropy-change estimators the caller evaluates itself (e.g. an audit of
            all of ``ESTIMATORS``); ``"tabular"`` adds ``sum_p2`` and ``sum_p2_logp``.
        entropy: include ``entropy`` even if the method does not read it (``policy_loss``
            reports the entropy, flow and quadrant metrics only when the batch has one).
            Pass ``False`` for a call whose entropy the loss will not see, e.g. the update
            forward of a trainer that gives ``policy_loss`` the rollout's ``old_entropy``: the
            result then has ``entropy`` only if a method part differentiates it (``needs``).

    A part needs ``entropy`` if it lists it in ``needs`` (a loss term with gradient) or reads it
    (``reads_entropy``); it needs the tabular pair if it lists them in ``needs`` or its
    ``estimator`` parameter is ``"tabular"`` (steer, opefo).
    """
    estimators = tuple(estimators)
    for e in estimators:
        if e not in ESTIMATORS:
            raise UnknownMethodError(e, list(ESTIMATORS), kind="estimator")
    wanted = {"logp"}
    if entropy:
        wanted.add("entropy")
    if "tabular" in estimators:
        wanted.update(_TABULAR)
    for part in resolve_method(method).parts:
        needs = set(part.needs)
        if "entropy" in needs or (entropy and part.reads_entropy):
            wanted.add("entropy")
        if needs & set(_TABULAR) or getattr(part, "estimator", None) == "tabular":
            wanted.update(_TABULAR)
    if wanted & set(_TABULAR):
        wanted.add("entropy")  # the tabular estimator reads H as well
    return tuple(s for s in STAT_NAMES if s in wanted)
