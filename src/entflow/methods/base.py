"""The method protocol, the registry and composition (docs/design.md §6 last paragraphs, §7).

A method is a small dataclass whose fields are its parameters. It plugs into the loss through
any of nine hooks, each optional (the base class does nothing):

==================  =====================================  ==========================================
hook                called from                            used by (examples)
==================  =====================================  ==========================================
``clip_bounds``     ``policy_loss``, before anything       clip_higher, clip_free, clip_extreme
``aggregation``     ``policy_loss``, before anything       geo_mean, luspo (sequence-level losses)
``batch_statistics`` ``policy_loss`` (per call) or          steer, opefo, clip_cov, kl_cov, forking,
                    ``prepare_statistics`` (global)        rand_pos_clip, quadrant
``shape_advantages`` ``compute_advantages``, left to right  w_reinforce, unlikeliness, ppl_shaping, gtpo
``token_mask``      ``policy_loss``, before the others;    clipb, chord
                    dropped tokens leave the loss and
                    its denominator
``token_weights``   ``policy_loss``; weights multiply      steer, opefo, clip_cov, quadrant, forking
``token_loss``      ``policy_loss``; replaces ℓ_t          kl_cov
``loss_terms``      ``policy_loss``; added to the loss     entropy_bonus, adaptive_entropy, kl_ref
``update``          the trainer, once per rollout step     adaptive_entropy, pos_adv_reweight
==================  =====================================  ==========================================

Hooks receive a :class:`LossContext` (the batch plus what ``policy_loss`` already computed:
advantages, ratio, clip indicator, bounds) and write their metrics into ``ctx.metrics`` under
the method's own prefix, as 0-d tensors (no ``float()``: the fast path makes no host sync).
Statistics of the whole batch (maxima, sums, quantiles, selections) belong in
``batch_statistics``, written against a :class:`~entflow.core.distributed.Reducer`, so that the
same code serves one call and a whole optimisation batch across ranks. Stateful methods keep
their state in attributes listed in ``state_fields``; randomness comes from the
:class:`Stochastic` mixin's seeded ``torch.Generator`` streams, part of the state.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from entflow.core.batch import TokenBatch
from entflow.core.distributed import Reducer, default_rank
from entflow.core.estimators import entropy_change
from entflow.core.ppo import LossSpec

# a parameter's allowed values (core/rules.py); the methods import them from here, as in 0.2
from entflow.core.rules import Check as Check
from entflow.core.rules import integer as integer
from entflow.core.rules import interval as interval
from entflow.core.rules import one_of as one_of
from entflow.core.rules import optional as optional
from entflow.errors import CompositionError, ParameterError, StatefulMethodWarning, UnknownMethodError

# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------


def param(default: Any, check: Check | None = None, help: str = "") -> Any:
    """A method parameter: a dataclass field carrying its allowed range (a :class:`~entflow.core.rules.Check`:
    ``interval``, ``one_of``, ``optional``, ``integer``) and a help line."""
    return field(default=default, metadata={"check": check, "help": help})


UNIT = interval(0, 1)  # ratios and fractions
PROB_THRESHOLD = interval(0, 1)
NONNEG = interval(0)
SEED = integer(0)

# --------------------------------------------------------------------------------------------
# The context a hook sees
# --------------------------------------------------------------------------------------------


@dataclass
class LossContext:
    """What ``policy_loss`` has computed before calling the token hooks. Tensors ``[N, T]``."""

    batch: TokenBatch
    adv: torch.Tensor  # detached, [N, T]
    ratio: torch.Tensor  # r = exp(logp − old_logp), detached
    indicator: torch.Tensor  # I_t, float
    # the loss's settings, whole: LossSpec.for_method's, with max_len the fixed T_max the loss uses
    spec: LossSpec
    metrics: dict[str, Any] = field(default_factory=dict)  # 0-d tensors (read once) or floats
    # bool [N, T]: valid tokens that a ``token_mask`` part removed from the loss (None: nothing removed);
    # ``batch.mask`` no longer holds them, so a loss term that reads them on purpose (CHORD's SFT rows) finds them here
    dropped: torch.Tensor | None = None
    stats: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)  # batch statistics per part name
    _estimates: dict[str, torch.Tensor] = field(default_factory=dict, repr=False)

    @property
    def valid(self) -> torch.Tensor:
        return self.batch.valid

    @property
    def clip_low(self) -> float:
        """ε_low of the loss (``spec.clip_low``)."""
        return self.spec.clip_low

    @property
    def clip_high(self) -> float:
        """ε_high of the loss (``spec.clip_high``)."""
        return self.spec.clip_high

    @property
    def dual_clip(self) -> float | None:
        """The dual-clip constant c of the loss, or None (``spec.dual_clip``)."""
        return self.spec.dual_clip

    @property
    def agg(self) -> str:
        """The loss's aggregation (``spec.agg``)."""
        return self.spec.agg

    @property
    def max_len(self) -> int | None:
        """The fixed T_max of seq-mean-token-sum-norm, or None (``spec.max_len``)."""
        return self.spec.max_len

    def stat(self, method: Method) -> dict[str, torch.Tensor]:
        """The batch-level statistics of ``method`` for this micro-batch (see ``batch_statistics``)."""
        return self.stats.get(method.name, {})

    @property
    def p(self) -> torch.Tensor:
        """Current probability of the sampled token, detached."""
        return self.batch.logp.detach().exp()

    def estimate(self, estimator: str) -> torch.Tensor:
        """``entropy_change(estimator, batch)`` under this loss's clip, cached per call."""
        if estimator not in self._estimates:
            self._estimates[estimator] = entropy_change(estimator, self.batch, *self.spec.clip)
        return self._estimates[estimator]


# --------------------------------------------------------------------------------------------
# The protocol
# --------------------------------------------------------------------------------------------


@dataclass
class Method:
    """Base class: a method that changes nothing (plain GRPO / PPO-clip).

    Subclasses are dataclasses whose fields (declared with :func:`param`) are the method's
    parameters, and set the class attributes ``name``, ``formula`` and ``paper``.
    """

    name: ClassVar[str] = ""
    formula: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    needs: ClassVar[tuple[str, ...]] = ()  # batch fields beyond logp/old_logp/advantages/mask
    replaces_advantages: ClassVar[bool] = False  # builds A from rewards, discarding its input
    state_fields: ClassVar[tuple[str, ...]] = ()  # attributes saved by state_dict
    # batch fields ``shape_advantages`` reads (checked there, at ``compute_advantages`` time, so a
    # mini-batch given to ``policy_loss`` need not carry rewards); for introspection and docs
    advantage_needs: ClassVar[tuple[str, ...]] = ()
    reads_entropy: ClassVar[bool] = False  # reads H detached: old_entropy, else entropy (docs/design.md §1)
    # with reads_entropy, for a shaper: its ``shape_advantages`` reads H, so an adapter must have the
    # rollout's H before the first loss call; False when only its loss hooks or batch_statistics read it
    shaping_reads_entropy: ClassVar[bool] = True
    # per-token batch fields ``batch_statistics`` reads besides mask and advantages ("logp",
    # "old_logp", "old_entropy" = H read detached as above): an adapter computing global statistics
    # before the loss (TRL) must have these values by then; see entflow.methods.needs
    statistics_needs: ClassVar[tuple[str, ...]] = ()
    reads_step: ClassVar[bool] = False  # reads batch.step / batch.total_steps (a schedule over training)
    # the formula holds only with one gradient step per rollout batch (r ≡ 1; docs/design.md §6):
    # a trainer must refuse several epochs or mini-batches
    strict_on_policy: ClassVar[bool] = False
    # a rollout–training mismatch correction (methods/corrections.py): "weight" — its token weights hold
    # the ratio π_old/π_rollout (TIS, IcePop, KPop); "ratio" — its loss takes the ratio against the
    # rollout policy π_θ/π_rollout (M2PO, IPO); "mask" — it only removes tokens (rejection sampling).
    # At most one "weight" or "ratio" part per composition: two would correct the mismatch twice.
    rollout_correction: ClassVar[str | None] = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check = f.metadata.get("check")
            value = getattr(self, f.name)
            if isinstance(f.default, float) and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
                setattr(self, f.name, value)
            if check is not None and not check.ok(value):
                raise ParameterError(self.name, f.name, f"must be {check.describe}, got {value!r}")
        self.validate()

    def validate(self) -> None:
        """Cross-parameter checks; raise :class:`ParameterError`."""

    def pins_clip(self) -> bool:
        """True when this method's own clip bounds are part of its formula (KL-Cov: all tokens
        unclipped), so that a later part of a composition may not override them."""
        return False

    # -- hooks (all optional) -------------------------------------------------------------
    def clip_bounds(self) -> tuple[float, float] | None:
        """(ε_low, ε_high) this method imposes, or None to leave the loss's bounds."""
        return None

    def aggregation(self) -> str | None:
        """The loss aggregation this method's formula fixes, or None to leave the loss's ``agg``.

        A sequence-level loss (GMPO, LUSPO) gives each token of response i the response's loss
        L_i and fixes ``"seq-mean-token-mean"``, so the loss is the mean of L_i over responses
        whatever the caller's ``agg``."""
        return None

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        """Sequence/token advantage shaping: ``adv`` [N, T] → [N, T]."""
        return adv

    def token_mask(self, ctx: LossContext) -> torch.Tensor | None:
        """The valid tokens that stay in the loss, bool ``[N, T]`` (None: all of them).

        A dropped token leaves the loss **and its denominator** (a token weight of 0 keeps it in
        the denominator): ``policy_loss`` runs every other hook, the aggregation and the metrics
        on the batch whose mask is ``mask & keep``. It runs first, on the batch as given, after
        this part's own ``batch_statistics`` (taken over the full mask); the other parts'
        statistics are taken over the kept tokens. The masks of several parts are ANDed."""
        return None

    def token_weights(self, ctx: LossContext) -> torch.Tensor | None:
        """Detached per-token loss weights ``[N, T]``, or None for all ones."""
        return None

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        """Replace the per-token loss ``ℓ_t`` [N, T] (default: keep it)."""
        return loss

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        """Named scalar terms added to the loss; ``agg`` reduces an ``[N, T]`` tensor as the loss does."""
        return {}

    def batch_statistics(self, ctxs: list[LossContext], reducer: Reducer) -> list[dict[str, torch.Tensor]] | None:
        """Statistics that depend on the whole batch (maxima, sums, quantiles, top-k, random
        selections), one dict per context, reduced with ``reducer``.

        ``policy_loss`` calls it with its own micro-batch (per call); ``prepare_statistics``
        with every micro-batch of an optimizer step and a process group (global). The token
        hooks then read the result with ``ctx.stat(self)``. None: the method has none.
        """
        return None

    def update(self, metrics: dict[str, float]) -> None:
        """Advance controller state after a rollout step (metrics include ``entropy``, ``step``)."""

    def is_controller(self) -> bool:
        """True when :meth:`update` advances state, so a trainer must call it once per rollout
        step with that step's metrics (default: the method overrides ``update``)."""
        return self.overrides("update")

    def set_rank(self, rank: int | None) -> None:
        """Data-parallel rank for per-call random streams (seed + rank); None: read it from
        ``torch.distributed`` when a stream is first made. Resets the per-call stream."""
        self._dp_rank = rank
        if hasattr(self, "_generators"):
            self._generators.pop("per_call", None)

    def state_dict(self) -> dict[str, Any]:
        state = {}
        for k in self.state_fields:
            v = getattr(self, k)
            state[k] = v.get_state() if isinstance(v, torch.Generator) else v
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k in self.state_fields:
            if k not in state:
                raise ParameterError(self.name, k, "missing from the state dict being loaded")
            cur = getattr(self, k)
            if isinstance(cur, torch.Generator):
                cur.set_state(state[k])
            else:
                setattr(self, k, state[k])

    # -- introspection --------------------------------------------------------------------
    @property
    def parts(self) -> list[Method]:
        return [self]

    def shaping_metrics(self) -> dict[str, Any]:
        """What the advantage shapers reported in their last ``shape_advantages`` call (every part,
        under each part's prefix); ``policy_loss`` copies these into its metrics."""
        out: dict[str, Any] = {}
        for part in self.parts:
            out.update(getattr(part, "_shaping_metrics", {}))
        return out

    def params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def overrides(self, hook: str) -> bool:
        return getattr(type(self), hook) is not getattr(Method, hook)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{self.name}({args})"


def seeded_generator(seed: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator on ``device`` for a method's randomness (part of its state)."""
    return torch.Generator(device=device).manual_seed(seed)


class Stochastic:
    """Mixin for methods that draw random numbers (field ``seed``; ``state_fields = ("generator",)``).

    Two streams, each a ``torch.Generator`` on the batch's device made at the first draw:
    ``per_call`` (seeded ``seed + rank``, so data-parallel ranks differ; rank from
    :meth:`Method.set_rank` or ``torch.distributed``) and ``shared`` (seeded ``seed``, the same
    on every rank; used by ``prepare_statistics`` to draw once for the global batch). Both are
    saved by ``state_dict()``: ``{"generator": {stream: {"device", "seed", "state"}}}``.
    """

    seed: int
    name: ClassVar[str]

    def generator(self, device: torch.device | str, shared: bool) -> torch.Generator:
        """The stream for a draw on ``device``: ``shared`` (global mode) or per call."""
        gens: dict[str, torch.Generator] = self.__dict__.setdefault("_generators", {})
        key = "shared" if shared else "per_call"
        device = torch.device(device)
        g = gens.get(key)
        moved = g is not None and (
            g.device.type != device.type or (device.index is not None and g.device.index != device.index)
        )
        if moved:
            raise ParameterError(
                self.name, "generator", f"lives on {g.device} but the batch is on {device}; keep one device per run"
            )
        if g is None:
            rank = getattr(self, "_dp_rank", None)
            seed = self.seed if shared else self.seed + (default_rank() if rank is None else rank)
            g = gens[key] = seeded_generator(seed, device)
        return g

    def state_dict(self) -> dict[str, Any]:
        gens: dict[str, torch.Generator] = self.__dict__.get("_generators", {})
        return {"generator": {k: {"device": str(g.device), "state": g.get_state()} for k, g in gens.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "generator" not in state:
            raise ParameterError(self.name, "generator", "missing from the state dict being loaded")
        saved = state["generator"]
        if isinstance(saved, torch.Tensor):  # an older format: one CPU generator's state
            saved = {"per_call": {"device": "cpu", "state": saved}}
        gens: dict[str, torch.Generator] = {}
        for k, entry in saved.items():
            try:
                g = torch.Generator(device=entry["device"])
            except RuntimeError as e:
                raise ParameterError(
                    self.name, "generator", f"was saved on {entry['device']}, which is not available here ({e})"
                ) from e
            g.set_state(entry["state"])
            gens[k] = g
        self.__dict__["_generators"] = gens


# --------------------------------------------------------------------------------------------
# Composition
# --------------------------------------------------------------------------------------------


class Composite(Method):
    """``"a+b+c"``: clip bounds from the last part that sets them, token weights multiplied,
    advantage shapers left to right, loss terms added, state per part."""

    def __init__(self, parts: list[Method]):
        self._parts = list(parts)
        names = [p.name for p in self._parts]
        if len(set(names)) != len(names):
            raise CompositionError(f"method {'+'.join(names)}: a method appears twice")
        shapers = [p for p in self._parts if p.overrides("shape_advantages")]
        replacers = [p.name for p in shapers if p.replaces_advantages]
        if len(replacers) > 1 or (replacers and shapers[0].name != replacers[0]):
            raise CompositionError(
                f"method {'+'.join(names)}: {replacers[-1]} builds advantages from rewards and would "
                "discard the shaping before it; put it first among the advantage shapers, and use at most one"
            )
        for i, p in enumerate(self._parts):
            later = [q.name for q in self._parts[i + 1 :] if q.clip_bounds() is not None]
            if p.pins_clip() and later:
                raise CompositionError(
                    f"method {'+'.join(names)}: {p.name} fixes the clip bounds as part of its formula and "
                    f"{', '.join(later)} (later, so it would win) overrides them; put {p.name} last"
                )
        aggs = {p.name: p.aggregation() for p in self._parts if p.aggregation() is not None}
        if len(set(aggs.values())) > 1:
            raise CompositionError(
                f"method {'+'.join(names)}: its parts fix different loss aggregations "
                f"({', '.join(f'{k}: {v}' for k, v in aggs.items())})"
            )
        replacing_loss = [p.name for p in self._parts if p.overrides("token_loss")]
        if len(replacing_loss) > 1:
            raise CompositionError(
                f"method {'+'.join(names)}: {' and '.join(replacing_loss)} both replace the per-token loss"
            )
        reweighting = [p for p in self._parts if p.rollout_correction in ("weight", "ratio")]
        if len(reweighting) > 1:
            how = {"weight": "weights each token by π_old/π_rollout", "ratio": "takes its ratio against π_rollout"}
            raise CompositionError(
                f"method {'+'.join(names)}: {'; '.join(f'{p.name} {how[p.rollout_correction]}' for p in reweighting)}"
                " — together they would correct the rollout–training mismatch twice; keep one (a rejection "
                "mask, rs_*, composes with any of them)"
            )

    @property
    def name(self) -> str:  # type: ignore[override]
        return "+".join(p.name for p in self._parts)

    @property
    def needs(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(dict.fromkeys(n for p in self._parts for n in p.needs))

    @property
    def advantage_needs(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(dict.fromkeys(n for p in self._parts for n in p.advantage_needs))

    @property
    def statistics_needs(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(dict.fromkeys(n for p in self._parts for n in p.statistics_needs))

    @property
    def reads_entropy(self) -> bool:  # type: ignore[override]
        return any(p.reads_entropy for p in self._parts)

    @property
    def reads_step(self) -> bool:  # type: ignore[override]
        return any(p.reads_step for p in self._parts)

    @property
    def strict_on_policy(self) -> bool:  # type: ignore[override]
        return any(p.strict_on_policy for p in self._parts)

    def is_controller(self) -> bool:
        return any(p.is_controller() for p in self._parts)

    @property
    def parts(self) -> list[Method]:
        return list(self._parts)

    def clip_bounds(self) -> tuple[float, float] | None:
        bounds = None
        for p in self._parts:
            bounds = p.clip_bounds() or bounds
        return bounds

    def aggregation(self) -> str | None:
        return next((a for a in (p.aggregation() for p in self._parts) if a is not None), None)

    def shape_advantages(self, adv: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
        for p in self._parts:
            adv = p.shape_advantages(adv, batch)
        return adv

    def token_mask(self, ctx: LossContext) -> torch.Tensor | None:
        keep = None
        for p in self._parts:
            k = p.token_mask(ctx)
            if k is not None:
                keep = k if keep is None else keep & k
        return keep

    def token_weights(self, ctx: LossContext) -> torch.Tensor | None:
        weights = None
        for p in self._parts:
            w = p.token_weights(ctx)
            if w is not None:
                weights = w if weights is None else weights * w
        return weights

    def token_loss(self, loss: torch.Tensor, ctx: LossContext) -> torch.Tensor:
        for p in self._parts:
            loss = p.token_loss(loss, ctx)
        return loss

    def loss_terms(self, ctx: LossContext, agg: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, torch.Tensor]:
        terms: dict[str, torch.Tensor] = {}
        for p in self._parts:
            terms.update(p.loss_terms(ctx, agg))
        return terms

    def update(self, metrics: dict[str, float]) -> None:
        for p in self._parts:
            p.update(metrics)

    def set_rank(self, rank: int | None) -> None:
        for p in self._parts:
            p.set_rank(rank)

    def state_dict(self) -> dict[str, Any]:
        return {p.name: p.state_dict() for p in self._parts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for p in self._parts:
            p.load_state_dict(state.get(p.name, {}))

    def params(self) -> dict[str, Any]:
        return {f"{p.name}.{k}": v for p in self._parts for k, v in p.params().items()}

    def __repr__(self) -> str:
        return " + ".join(repr(p) for p in self._parts)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

_REGISTRY: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    """Class decorator: make ``cls`` available to :func:`get_method` under ``cls.name``."""
    if not cls.name or "+" in cls.name:
        raise ValueError(f"invalid method name {cls.name!r}")
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"method {cls.name!r} registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def list_methods() -> list[str]:
    """Names of every registered method, sorted."""
    return sorted(_REGISTRY)


def method_class(name: str) -> type[Method]:
    if name not in _REGISTRY:
        raise UnknownMethodError(name, list_methods())
    return _REGISTRY[name]


def param_names(cls: type[Method]) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _build(name: str, params: dict[str, Any]) -> Method:
    cls = method_class(name)
    known = param_names(cls)
    for k in params:
        if k not in known:
            raise ParameterError(name, k, f"is unknown; {name} takes: {', '.join(known) or 'no parameters'}")
    return cls(**params)


def get_method(name: str, **params: Any) -> Method:
    """Build a registered method, or a composition ``"a+b+c"``.

    For a composition, a parameter ``key=value`` goes to the one part that takes ``key``;
    ``"part.key"`` (pass as ``**{"steer.lambda_min": 0.5}``) names the part explicitly.
    """
    if not isinstance(name, str) or not name.strip():
        raise UnknownMethodError(repr(name), list_methods())
    names = [n.strip() for n in name.split("+")]
    if len(names) == 1:
        return _build(names[0], params)
    per_part: dict[str, dict[str, Any]] = {n: {} for n in names}
    for key, value in params.items():
        if "." in key:
            part, sub = key.split(".", 1)
            if part not in per_part:
                raise ParameterError(name, key, f"names no part of the composition ({', '.join(names)})")
            per_part[part][sub] = value
            continue
        owners = [n for n in names if key in param_names(method_class(n))]
        if len(owners) != 1:
            why = "is taken by none of" if not owners else f"is ambiguous ({', '.join(owners)}) in"
            raise ParameterError(name, key, f"{why} the parts; write it as 'part.{key}'")
        per_part[owners[0]][key] = value
    return Composite([_build(n, per_part[n]) for n in names])


_WARNED_BY_NAME: set[str] = set()


def has_state(method: Method) -> bool:
    """True when a method (or a part of a composition) keeps state across calls: a controller
    or a random stream."""
    return any(p.state_fields for p in method.parts)


def resolve_method(method: str | Method | None) -> Method:
    """``None`` → grpo, a name → :func:`get_method`, a Method → itself.

    A stateful or stochastic method passed by name is rebuilt on every call — its random stream
    restarts at ``seed`` and its controller never advances — so this warns once per name
    (:class:`~entflow.errors.StatefulMethodWarning`) with the fix.
    """
    if method is None:
        return get_method("grpo")
    if isinstance(method, str):
        built = get_method(method)
        if has_state(built) and method not in _WARNED_BY_NAME:
            _WARNED_BY_NAME.add(method)
            kinds = sorted({p.name for p in built.parts if p.state_fields})
            warnings.warn(
                f"method {method!r} passed by name: {', '.join(kinds)} keeps state (a random stream or a "
                "controller) that is rebuilt on every call, so its random draws restart at the seed and its "
                f"controller never advances. Build it once, m = entflow.get_method({method!r}, ...), and pass m "
                "to every call (and call m.update(...) once per step).",
                StatefulMethodWarning,
                stacklevel=3,
            )
        return built
    if isinstance(method, Method):
        return method
    raise UnknownMethodError(repr(method), list_methods())


def iter_registered() -> Iterator[type[Method]]:
    for n in list_methods():
        yield _REGISTRY[n]
