"""Which entflow method a verl config selects, and what that method needs from verl.

Nothing here imports verl: the functions read verl's config through the mapping interface
that both its dataclasses and OmegaConf nodes offer (``.get``), so they are testable and
usable without verl installed.

verl names a policy loss by ``actor_rollout_ref.actor.policy_loss.loss_mode``. entflow
registers one loss mode per method, ``entflow.<name>`` (e.g. ``entflow.clip_cov``), and the
generic ``entflow``, whose method (any composition ``"a+b"``) comes from the
``policy_loss.method`` key. The method's parameters come from ``policy_loss.params``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from entflow.errors import CompositionError, ConfigError, ParameterError, UnknownMethodError
from entflow.methods import Method, get_method, list_methods
from entflow.methods.needs import needs_of

GENERIC_MODE = "entflow"
MODE_PREFIX = "entflow."
KEY = "actor_rollout_ref.actor.policy_loss"  # where the policy-loss settings live in verl's Hydra config
STATISTICS = ("micro_batch", "global")


def loss_mode_for(method_name: str) -> str:
    """verl's ``loss_mode`` of one registered entflow method: ``entflow.<name>``."""
    return MODE_PREFIX + method_name


def is_entflow_mode(loss_mode: Any) -> bool:
    return isinstance(loss_mode, str) and (loss_mode == GENERIC_MODE or loss_mode.startswith(MODE_PREFIX))


def _plain(value: Any) -> Any:
    """OmegaConf containers → plain hashable Python values (lists → tuples)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _plain(v)) for k, v in value.items()))
    if isinstance(value, list | tuple) or type(value).__name__ == "ListConfig":
        return tuple(_plain(v) for v in value)
    return value


@dataclass(frozen=True)
class MethodSpec:
    """The entflow part of a verl policy-loss config: hashable, so workers cache one method per spec.

    ``name``: a method or composition; ``params``: sorted ``(key, value)`` pairs;
    ``statistics``: ``"micro_batch"`` (batch statistics per micro-batch, as verl's own Clip-Cov /
    KL-Cov) or ``"global"`` (over the data-parallel group); ``dual_clip``: apply verl's
    ``clip_ratio_c`` dual clip (as verl's ``vanilla`` loss does) unless the method fixes its clip.
    """

    name: str
    params: tuple[tuple[str, Any], ...] = ()
    statistics: str = "micro_batch"
    dual_clip: bool = True

    def build(self, key: str = KEY) -> Method:
        """A fresh method object; any entflow error becomes a :class:`ConfigError` naming the config key."""
        params = dict(self.params)
        try:
            return get_method(self.name, **params)
        except UnknownMethodError as e:
            raise ConfigError(f"{key}.method", str(e)) from e
        except ParameterError as e:  # name the key as the user wrote it (part.key for a part)
            dotted = f"{e.owner}.{e.param}"
            raise ConfigError(f"{key}.params.{dotted if dotted in params else e.param}", str(e)) from e
        except CompositionError as e:
            raise ConfigError(f"{key}.method", str(e)) from e


def spec_from_policy_loss(policy_loss: Any, key: str = KEY) -> MethodSpec | None:
    """The :class:`MethodSpec` of verl's ``policy_loss`` config, or None if its loss mode is not entflow's.

    Raises :class:`ConfigError` naming the key when the entflow keys contradict each other.
    """
    loss_mode = policy_loss.get("loss_mode")
    if not is_entflow_mode(loss_mode):
        return None
    method = policy_loss.get("method")
    if loss_mode == GENERIC_MODE:
        if not method:
            raise ConfigError(
                f"{key}.method",
                f"loss_mode={GENERIC_MODE!r} takes its method from this key (e.g. 'clip_higher+steer'); it is not set",
            )
        name = str(method)
    else:
        name = loss_mode[len(MODE_PREFIX) :]
        if name not in list_methods():
            raise ConfigError(f"{key}.loss_mode", str(UnknownMethodError(name, list_methods())))
        if method and str(method) != name:
            raise ConfigError(
                f"{key}.method",
                f"is {method!r} but loss_mode={loss_mode!r} selects {name!r}; "
                f"set loss_mode={GENERIC_MODE!r} to take the method from this key",
            )
    params = policy_loss.get("params") or {}
    if not isinstance(params, Mapping):
        raise ConfigError(f"{key}.params", f"must be a mapping of the method's parameters, got {params!r}")
    statistics = policy_loss.get("statistics") or "micro_batch"
    if statistics not in STATISTICS:
        raise ConfigError(f"{key}.statistics", f"must be one of {STATISTICS}, got {statistics!r}")
    dual_clip = policy_loss.get("dual_clip")
    flat = _flatten(params)
    return MethodSpec(name, tuple(sorted((k, _plain(v)) for k, v in flat.items())), statistics, dual_clip is not False)


def _flatten(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"steer": {"lambda_min": 0.5}}`` → ``{"steer.lambda_min": 0.5}``: Hydra turns the dotted
    override ``params.steer.lambda_min=0.5`` into a nested node, entflow names a composition's part
    parameter ``"steer.lambda_min"`` (no method parameter is itself a mapping)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, Mapping):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# --------------------------------------------------------------------------------------------
# What a method needs from verl
# --------------------------------------------------------------------------------------------


def registry_blockers(method: Method) -> list[str]:
    """Why ``method`` cannot run as a registered verl policy loss (empty: it can).

    A registered loss receives only ``old_log_prob, log_prob, advantages, response_mask`` (and
    rollout importance weights): no entropy, no reference log-probs, no training step, and no
    hook after the step for controllers or before it for advantage shaping. Read from each
    part's :class:`~entflow.methods.needs.MethodNeeds`.
    """
    reasons = []
    for p in method.parts:
        needs = needs_of(p)
        if needs.shapes_advantages:
            reasons.append(f"{p.name} shapes advantages (run by the entflow trainer where verl computes them)")
        elif needs.reads_entropy:
            reasons.append(f"{p.name} reads the old-policy entropy, which a registered loss does not receive")
        if needs.entropy_grad:
            reasons.append(f"{p.name} differentiates the current entropy, which a registered loss does not receive")
        if needs.ref_logp:
            reasons.append(f"{p.name} needs reference log-probs, which a registered loss does not receive")
        if needs.rollout_logp:
            reasons.append(
                f"{p.name} reads the rollout engine's log-probs (rollout_log_probs), which a registered loss does "
                "not receive"
            )
        if needs.controllers:
            reasons.append(f"{p.name} is a controller that the entflow trainer advances once per step")
        if needs.reads_step and not needs.shapes_advantages:
            reasons.append(f"{p.name} reads the training step, which a registered loss lacks")
    return reasons + [r for r in verl_blockers(method) if r not in reasons]  # what verl cannot run at all


def verl_blockers(method: Method) -> list[str]:
    """Why ``method`` cannot run inside verl at all (empty: it can)."""
    reasons = []
    for p in method.parts:
        needs = needs_of(p)
        if needs.tabular:
            reasons.append(
                f"{p.name}(estimator='tabular') needs sum_p2_logp = Σπ²·log π per token, which verl's forward "
                "pass does not compute; use estimator='steer' or 'opefo'"
            )
        if needs.entropy_top_p is not None:
            reasons.append(
                f"{p.name}(top_p={needs.entropy_top_p}) differentiates the entropy of the top-p nucleus "
                "(arXiv 2509.25133), which needs the full logits, but verl's actor gives the loss only the full "
                f"entropy; set params.top_p=1 (the full entropy, the paper's 'w/o top-p' ablation)"
            )
        if needs.temperature_samples:
            reasons.append(
                f"{p.name} trains on extra responses sampled at its own temperature (arXiv 2510.08141), which "
                "verl does not draw; without them it is plain GRPO"
            )
        per_group = [f for f in ("rewards", "group_index") if f in needs.loss_fields]
        if per_group:
            reasons.append(
                f"{p.name} reads {' and '.join(per_group)} in the loss, which verl's micro-batches do not carry"
            )
        if needs.expert_rows:
            reasons.append(
                f"{p.name} trains on expert rows (expert_mask, e.g. reference solutions), which verl's rollout "
                "batches do not contain"
            )
        if needs.topk is not None:
            reasons.append(
                f"{p.name} reads the log-probs of the top-{needs.topk} candidates at each token (arXiv 2510.14807), "
                "which need the logits, but verl's actor gives the loss only the sampled tokens' log-probs"
            )
        if needs.greedy_baseline:
            reasons.append(
                f"{p.name} takes the reward of a greedy response to each prompt as its baseline (arXiv 2310.10505), "
                "which verl's trainer draws only for its own adv_estimator=remax; use algorithm.adv_estimator=remax"
            )
        if "sum_p2" in needs.rollout_stats:
            reasons.append(
                f"{p.name} reads the rollout policy's Σπ² per token, which the entflow plugin does not pass to "
                "compute_advantages; use verl's own algorithm.adv_estimator=optimal_token_baseline with "
                "actor.calculate_sum_pi_squared=True"
            )
    return reasons


def needs_model_entropy(method: Method) -> bool:
    """True when the loss differentiates the current entropy (set ``actor.calculate_entropy=True``)."""
    return needs_of(method).entropy_grad


def needs_ref_logp(method: Method) -> bool:
    return needs_of(method).ref_logp


def shapes_advantages(method: Method) -> bool:
    return needs_of(method).shapes_advantages


def controller_state(method: Method) -> dict[str, dict[str, Any]]:
    """State of the parts that advance in ``update`` (controllers), keyed by part name."""
    controllers = needs_of(method).controllers
    return {p.name: p.state_dict() for p in method.parts if p.name in controllers}


def load_controller_state(method: Method, state: Mapping[str, Mapping[str, Any]]) -> None:
    for p in method.parts:
        if p.name in state:
            p.load_state_dict(dict(state[p.name]))


def stream_seed(seed: int, step: int, rank: int) -> int:
    """Seed of a stochastic part's stream at training step ``step`` on data-parallel rank ``rank``
    (rank 0 for the stream all ranks share in global mode): a deterministic mix, so a resumed run
    redraws exactly what an uninterrupted one would, and no two steps repeat a draw."""
    return ((seed * 1_000_003 + step) * 10_007 + rank) % (2**63)


def reseed(method: Method, step: int, rank: int, device: torch.device | str) -> None:
    """Point every stochastic part's two streams (per call and shared, see
    :class:`entflow.methods.base.Stochastic`) at :func:`stream_seed` for this step, on ``device``,
    through the part's state dict."""
    stochastic = needs_of(method).stochastic
    for p in method.parts:
        if p.name in stochastic:
            streams = {}
            for name, r in (("per_call", rank), ("shared", 0)):
                g = torch.Generator(device=device).manual_seed(stream_seed(int(p.seed), step, r))
                streams[name] = {"device": str(torch.device(device)), "state": g.get_state()}
            p.load_state_dict({**p.state_dict(), "generator": streams})


class WorkerMethods:
    """The method objects of one process (one verl worker), one per :class:`MethodSpec`.

    A method keeps its state here across micro-batches and steps; its per-call random stream is
    ``seed + rank`` (``Method.set_rank``), so data-parallel ranks draw differently. When the entflow
    trainer sends a step number with the batch, the first micro-batch of a new step reseeds the
    stochastic parts for that step (:func:`reseed`) and loads the controllers' state that the
    trainer advanced on the driver.
    """

    def __init__(self) -> None:
        self._methods: dict[MethodSpec, Method] = {}
        self._step: dict[MethodSpec, int | None] = {}

    def get(
        self,
        spec: MethodSpec,
        rank: int = 0,
        step: int | None = None,
        state: Mapping[str, Mapping[str, Any]] | None = None,
        device: torch.device | str = "cpu",
    ) -> Method:
        if spec not in self._methods:
            method = spec.build()
            method.set_rank(rank)
            self._methods[spec] = method
            self._step[spec] = None
        method = self._methods[spec]
        if step is not None and step != self._step[spec]:
            reseed(method, step, rank, device)
            if state:
                load_controller_state(method, state)
            self._step[spec] = step
        return method

    def clear(self) -> None:
        self._methods.clear()
        self._step.clear()


WORKER_METHODS = WorkerMethods()
