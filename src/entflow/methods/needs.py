"""What a method needs from the trainer that runs it: one :class:`MethodNeeds`, read by every trainer.

A method declares what it reads as class attributes (docs/architecture.md §3): ``needs`` (batch
fields ``policy_loss`` requires), ``advantage_needs`` (fields its ``shape_advantages`` reads),
``statistics_needs`` (fields its ``batch_statistics`` reads), ``reads_entropy`` (H read detached,
docs/design.md §1), ``reads_step``, ``strict_on_policy``, ``replaces_advantages``,
``state_fields``, the ``aggregation`` hook, the ``estimator`` parameter, the :class:`~entflow.methods.base.Stochastic`
mixin and the hooks it overrides. :func:`needs_of` turns those declarations of a method or
composition (and the estimators a caller evaluates itself) into one frozen answer; the lab
trainer, the TRL adapter and the verl plugin read it instead of asking the method themselves,
so a new method that declares ``advantage_needs = ("old_entropy",)`` gets its rollout
entropy in every trainer without touching one.

``token_stats(..., stats=needs_of(method).token_stats())`` is the call a trainer makes: most
methods need the log-prob and the entropy; the ``tabular`` entropy-change estimator
(docs/design.md §5), whether a method uses it or the caller evaluates it, also needs Σπ² and
Σπ² log π (docs/design.md §3).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from entflow.core.estimators import ESTIMATORS
from entflow.core.token_stats import STAT_NAMES
from entflow.errors import CompositionError, UnknownMethodError
from entflow.methods.base import Method, Stochastic, resolve_method

TABULAR_STATS = ("sum_p2", "sum_p2_logp")
# per-token values of the rollout (old) policy, computed by a forward pass at rollout time
ROLLOUT_STATS = ("old_logp", "old_entropy", *TABULAR_STATS)
_VALUES = ("logp", "old_logp", "entropy", "old_entropy", *TABULAR_STATS)


def _union(groups: Iterable[Iterable[str]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for g in groups for n in g))


@dataclass(frozen=True)
class MethodNeeds:
    """Everything a trainer must provide to run a method (or composition); see :func:`needs_of`.

    Token statistics of a forward pass (``core.token_stats``):
        entropy_grad: a loss term differentiates the current entropy (``needs`` has ``entropy``).
        reads_entropy: a part reads H detached — ``old_entropy`` if the batch has it, else the
            entropy (docs/design.md §1) — in a token hook, a shaper or its batch statistics.
        tabular: Σπ² and Σπ² log π per token (the tabular estimator, by a part or the caller).
        entropy_top_p: the entropy a loss term differentiates is the entropy of the top-p nucleus
            with this mass (< 1; SIREN, arXiv 2509.25133 §3): the trainer fills ``entropy`` with
            ``methods.siren.topp_entropy(logits, entropy_top_p, temperature)``. ``None``: the full
            entropy. A part declares it as an ``entropy_top_p`` attribute.
    Batch fields (``TokenBatch`` names):
        loss_fields: fields ``policy_loss`` requires (the parts' ``needs``; ``rollout_logp`` for a
            mismatch correction, see the ``rollout_logp`` property).
        advantage_fields: fields ``compute_advantages`` reads (the shapers' ``advantage_needs``,
            plus ``old_entropy`` for a shaper that reads H).
        statistics_fields: per-token fields ``batch_statistics`` reads (``statistics_needs``).
        rollout_stats: the rollout-policy values (subset of ``ROLLOUT_STATS``) that must exist
            when advantages are computed, i.e. before the first loss call.
        reads_step: the batch's ``step`` / ``total_steps`` matter (a schedule over training).
    Loss:
        drops_tokens: parts whose ``token_mask`` removes tokens from the loss and from its
            denominator (Clip_B's negative tokens, CHORD's expert rows). ``policy_loss`` and
            ``prepare_statistics`` apply it; a trainer that normalises the loss itself (a
            denominator counted from its own mask) must take the count from entflow instead.
        expert_rows (property): the loss reads ``expert_mask`` ``[N]``, rows that are expert
            demonstrations the host appends to the batch (CHORD).
        aggregation: the loss aggregation a part's formula fixes (``"seq-mean-token-mean"`` for a
            sequence-level loss: GMPO, LUSPO), which ``policy_loss`` uses whatever ``agg`` it is
            given; a trainer whose own normalisation assumes another aggregation must refuse the
            method. ``None``: the trainer's ``agg``.
    Advantages:
        shapers: parts that shape advantages (run by ``compute_advantages``, left to right).
        replaces_advantages: the first shaper builds A from rewards, discarding GRPO's.
    Training regime:
        strict_on_policy: one gradient step per rollout batch is required (r ≡ 1).
        temperature_samples: parts that ask the trainer for extra responses at their own
            temperature each step (AEPO, arXiv 2510.08141 §4): a part with
            ``draws_temperature_samples = True`` gives ``temperature``, ``n_prompts(P)`` and
            ``reinforce_advantages(batch)``; the trainer appends the kept rows to the update batch.
        topk: the loss reads ``topk_logp`` ``[N, T, K]``, the current policy's log-probabilities of
            each position's K most probable tokens with grad (SimKO, arXiv 2510.14807), K the
            largest ``token_topk`` attribute of the parts; the update forward computes them from
            its logits (``core.topk.topk_logprobs``). ``None``: not needed.
        greedy_baseline: parts that need the reward of a greedy response to each prompt as
            ``reward_baselines`` (ReMax, arXiv 2310.10505): a part with
            ``draws_greedy_baseline = True``; a host that cannot draw that rollout refuses it.
    State:
        controllers: parts whose ``update`` advances state once per rollout step (they read the
            step's metrics, incl. the rollout entropy).
        stateful: parts with state in ``state_dict`` (controllers, random streams) that a
            checkpoint must hold.
        stochastic: parts drawing from seeded ``torch.Generator`` streams (``Stochastic``).
    """

    method: str
    entropy_grad: bool = False
    reads_entropy: bool = False
    tabular: bool = False
    loss_fields: tuple[str, ...] = ()
    advantage_fields: tuple[str, ...] = ()
    statistics_fields: tuple[str, ...] = ()
    rollout_stats: tuple[str, ...] = ()
    reads_step: bool = False
    aggregation: str | None = None
    drops_tokens: tuple[str, ...] = ()
    shapers: tuple[str, ...] = ()
    replaces_advantages: bool = False
    strict_on_policy: bool = False
    entropy_top_p: float | None = None
    temperature_samples: tuple[str, ...] = ()
    greedy_baseline: tuple[str, ...] = ()
    topk: int | None = None
    controllers: tuple[str, ...] = ()
    stateful: tuple[str, ...] = ()
    stochastic: tuple[str, ...] = ()

    def token_stats(self, *, entropy: bool = True) -> tuple[str, ...]:
        """The ``token_stats`` statistics (a subset of ``STAT_NAMES``, in that order) a forward needs.

        ``entropy``: include ``entropy`` even if no part reads it (``policy_loss`` reports the
        entropy, flow and quadrant metrics only when the batch has one). Pass ``False`` for a
        forward whose entropy the loss will not see, e.g. the update forward of a trainer that
        gives ``policy_loss`` the rollout's ``old_entropy``: the result then has ``entropy``
        only if a part differentiates it, or the tabular estimator reads it.
        """
        wanted = {"logp"}
        if entropy or self.entropy_grad or self.tabular:  # the tabular estimator reads H as well
            wanted.add("entropy")
        if self.tabular:
            wanted.update(TABULAR_STATS)
        if "sum_p2" in self.rollout_stats:  # a shaper reads the rollout policy's Σπ² (optimal_token_baseline)
            wanted.add("sum_p2")
        return tuple(s for s in STAT_NAMES if s in wanted)

    @property
    def ref_logp(self) -> bool:
        """The loss reads reference-model log-probs (a KL to a frozen reference)."""
        return "ref_logp" in self.loss_fields

    @property
    def rollout_logp(self) -> bool:
        """The loss reads the inference engine's log-probs of the sampled tokens, ``rollout_logp``
        (a rollout–training mismatch correction, methods/corrections.py): the host fills it from its
        sampler (TRL: vLLM's ``sampling_per_token_logps``; verl: ``rollout_log_probs``; the lab: its
        own sampler) or refuses the method."""
        return "rollout_logp" in self.loss_fields

    @property
    def expert_rows(self) -> bool:
        """The loss reads ``expert_mask``: the host must append expert rows (CHORD)."""
        return "expert_mask" in self.loss_fields

    @property
    def shapes_advantages(self) -> bool:
        return bool(self.shapers)

    @property
    def statistics_read_values(self) -> bool:
        """The batch statistics read per-token log-probs or entropies (not only masks,
        advantages and random draws): global statistics need those values before the loss."""
        return any(f in _VALUES for f in self.statistics_fields)

    @property
    def rollout_entropy(self) -> bool:
        """The rollout policy's entropy is read: by a part (detached, or as a declared field), or by
        a controller's update (the step's entropy)."""
        declared = "old_entropy" in self.advantage_fields or "old_entropy" in self.statistics_fields
        return self.reads_entropy or declared or bool(self.controllers)


def _entropy_top_p(name: str, parts: list[Method]) -> float | None:
    """The one nucleus mass of the entropy the loss differentiates (None = the full entropy);
    :class:`CompositionError` when two parts differentiate entropies of different nuclei."""
    masses = {float(getattr(p, "entropy_top_p", None) or 1.0) for p in parts if "entropy" in p.needs}
    if len(masses) > 1:
        raise CompositionError(
            f"method {name}: its parts differentiate the entropies of different top-p nuclei "
            f"({sorted(masses)}; 1.0 = the full entropy), but a batch carries one entropy"
        )
    mass = masses.pop() if masses else 1.0
    return None if mass >= 1.0 else mass


def needs_of(method: str | Method | None = None, estimators: Iterable[str] = ()) -> MethodNeeds:
    """What ``method`` needs, from the declarations of its parts.

    Args:
        method: a method, a registered name or composition (``"a+b"``), or ``None`` (grpo).
        estimators: entropy-change estimators the caller evaluates itself (e.g. an audit of
            all of ``ESTIMATORS``); ``"tabular"`` makes ``tabular`` True.

    Raises:
        UnknownMethodError: an unknown method or estimator name.
    """
    estimators = tuple(estimators)
    for e in estimators:
        if e not in ESTIMATORS:
            raise UnknownMethodError(e, list(ESTIMATORS), kind="estimator")
    m = resolve_method(method)
    parts = m.parts
    shapers = [p for p in parts if p.overrides("shape_advantages")]
    reads_h = [("old_entropy",) for p in shapers if p.reads_entropy and p.shaping_reads_entropy]  # at advantage time
    advantage_fields = _union([*(p.advantage_needs for p in shapers), *reads_h])
    loss_fields = _union(p.needs for p in parts)
    controllers = tuple(p.name for p in parts if p.is_controller())
    samplers = tuple(p.name for p in parts if getattr(p, "draws_temperature_samples", False))
    if len(samplers) > 1:
        raise CompositionError(f"method {m.name}: {' and '.join(samplers)} both draw temperature samples")
    return MethodNeeds(
        method=m.name,
        entropy_grad="entropy" in loss_fields,
        reads_entropy=any(p.reads_entropy for p in parts),
        tabular="tabular" in estimators
        or any(set(p.needs) & set(TABULAR_STATS) or getattr(p, "estimator", None) == "tabular" for p in parts),
        loss_fields=loss_fields,
        advantage_fields=advantage_fields,
        statistics_fields=_union(p.statistics_needs for p in parts if p.overrides("batch_statistics")),
        rollout_stats=tuple(f for f in ROLLOUT_STATS if f in advantage_fields),
        reads_step=any(p.reads_step for p in parts),
        aggregation=m.aggregation(),
        drops_tokens=tuple(p.name for p in parts if p.overrides("token_mask")),
        shapers=tuple(p.name for p in shapers),
        replaces_advantages=bool(shapers) and shapers[0].replaces_advantages,
        strict_on_policy=any(p.strict_on_policy for p in parts),
        entropy_top_p=_entropy_top_p(m.name, parts),
        temperature_samples=samplers,
        greedy_baseline=tuple(p.name for p in parts if getattr(p, "draws_greedy_baseline", False)),
        topk=max((int(p.token_topk) for p in parts if getattr(p, "token_topk", None)), default=None),
        controllers=controllers,
        stateful=tuple(p.name for p in parts if p.state_fields or p.overrides("state_dict")),
        stochastic=tuple(p.name for p in parts if isinstance(p, Stochastic)),
    )


def required_token_stats(
    method: str | Method | None = None,
    estimators: Iterable[str] = (),
    *,
    entropy: bool = True,
) -> tuple[str, ...]:
    """The ``token_stats`` statistics a loss needs: ``needs_of(method, estimators).token_stats(entropy=entropy)``.

    Kept for the trainers that call it; see :meth:`MethodNeeds.token_stats` for ``entropy``.
    """
    return needs_of(method, estimators).token_stats(entropy=entropy)
