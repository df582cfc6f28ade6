"""Check the verl plugin: discovered through its entry point, every registered loss mode runs,
and ``entflow.grpo`` equals verl's own ``vanilla`` loss (value and gradient) on the same tensors.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
from collections.abc import Callable
from typing import Any

import torch

from entflow.doctor.result import CheckResult, compared, skipped, timed
from entflow.errors import ConfigError

PLUGIN = "entflow.integrations.verl.plugin"
# methods without a default for a parameter
REQUIRED = {"opefo_target": {"target": 0.5}, "dro": {"dro_beta": 0.1}, "off_policy_mask": {"threshold": 0.5}}
# float32, same formulas: |Δ| / max(1, |value|) for the loss and for the gradient's entries
TOL = 1e-6

GetLossFn = Callable[[str], Callable[..., Any]]


def rollout(seed: int = 0, N: int = 8, T: int = 11) -> dict[str, torch.Tensor]:
    """Random ``[N, T]`` rollout tensors: every response has ≥ 1 token; ratios up to ~e so that
    the dual clip (c = 1.6) acts."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(T)[None] < torch.randint(1, T + 1, (N,), generator=g)[:, None]
    old = torch.randn(N, T, generator=g) * 0.7 - 1.2
    return {
        "old": old,
        "logp": (old + 0.8 * torch.randn(N, T, generator=g)).clamp(max=-1e-3),
        "adv": (torch.randn(N, generator=g)[:, None] * mask).contiguous(),
        "mask": mask,
    }


def _actor_config(policy_loss: Any, **kw: Any) -> Any:
    from verl.workers.config import ActorConfig

    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1, policy_loss=policy_loss, **kw)


def _loss_and_grad(fn: Callable[..., Any], t: dict[str, torch.Tensor], config: Any) -> tuple[float, torch.Tensor]:
    from entflow.integrations.verl.spec import WORKER_METHODS

    WORKER_METHODS.clear()  # a fresh method object per call (as a fresh worker)
    lp = t["logp"].clone().requires_grad_()
    loss = fn(t["old"], lp, t["adv"], t["mask"], "token-mean", config)[0]
    (grad,) = torch.autograd.grad(loss, lp)
    return float(loss.detach()), grad


def entry_point_result() -> CheckResult:
    label = "verl[entry point]"
    eps = [e for e in importlib.metadata.entry_points(group="verl.plugins") if e.value == PLUGIN]
    if not eps:
        return CheckResult(label, False, f"no 'verl.plugins' entry point names {PLUGIN}: reinstall entflow")
    import verl  # noqa: F401  (its __init__ imports the plugins)
    from verl.trainer.ppo import core_algos

    from entflow.methods.base import list_methods

    missing = [f"entflow.{m}" for m in list_methods() if f"entflow.{m}" not in core_algos.POLICY_LOSS_REGISTRY]
    if missing:
        why = (
            " (VERL_USE_EXTERNAL_PLUGINS=none?)"
            if not any(k.startswith("entflow") for k in core_algos.POLICY_LOSS_REGISTRY)
            else ""
        )
        return CheckResult(label, False, f"verl's registry lacks {len(missing)} entflow loss modes{why}: {missing[:3]}")
    return CheckResult(
        label, True, f"entry point '{eps[0].name}' → {PLUGIN}; {len(list_methods()) + 1} loss modes registered"
    )


def modes_result(get_loss_fn: GetLossFn) -> CheckResult:
    """Every ``entflow*`` mode runs on random tensors: a finite loss and gradient, or the documented
    ConfigError: for methods the registry path cannot run (e.g. ones needing the entropy), one that
    names ``trainer_mode=entflow``; for methods verl cannot run at all (``verl_blockers``, e.g.
    aepo's temperature samples), one that gives the blocker's reason."""
    from verl.trainer.ppo import core_algos

    from entflow.integrations.verl.config import EntflowPolicyLossConfig
    from entflow.integrations.verl.spec import registry_blockers, verl_blockers
    from entflow.methods.base import get_method

    label = "verl[every loss mode runs]"
    t = rollout(4)
    modes = sorted(k for k in core_algos.POLICY_LOSS_REGISTRY if k == "entflow" or k.startswith("entflow."))
    ran, refused, bad = 0, 0, []
    for mode in modes:
        name = mode.removeprefix("entflow.") if mode != "entflow" else "grpo"
        params = REQUIRED.get(name, {})
        method = get_method(name, **params)
        unsupported = verl_blockers(method)
        blocked = bool(registry_blockers(method)) or bool(unsupported)
        try:
            pl = EntflowPolicyLossConfig(loss_mode=mode, params=params, method=name if mode == "entflow" else None)
            loss, grad = _loss_and_grad(get_loss_fn(mode), t, _actor_config(pl))
        except ConfigError as e:
            if blocked and ("trainer_mode=entflow" in str(e) or any(b in str(e) for b in unsupported)):
                refused += 1
            else:
                bad.append(f"{mode}: {e}")
            continue
        except Exception as e:  # name the mode that crashed, check the others
            bad.append(f"{mode}: raised {type(e).__name__}: {e}")
            continue
        if blocked:
            bad.append(f"{mode}: ran although the registry path cannot give it what it needs")
        elif not (math.isfinite(loss) and bool(torch.isfinite(grad).all()) and float(grad.abs().max()) > 0):
            bad.append(f"{mode}: loss {loss}, gradient finite={bool(torch.isfinite(grad).all())}")
        else:
            ran += 1
    if bad or not modes:
        return CheckResult(label, False, f"{len(bad)} of {len(modes)} modes failed: " + "; ".join(bad[:3]))
    return CheckResult(label, True, f"{ran} modes ran, {refused} refused as documented")


def vanilla_result(get_loss_fn: GetLossFn) -> CheckResult:
    """verl's ``vanilla`` (dual clip c = 1.6, ε 0.2/0.28) and ``entflow.grpo``: same loss, same gradient."""
    from verl.workers.config import PolicyLossConfig

    from entflow.integrations.verl.config import EntflowPolicyLossConfig

    t = rollout(1)
    kw = {"loss_agg_mode": "token-mean", "clip_ratio_c": 1.6, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28}
    lv, gv = _loss_and_grad(get_loss_fn("vanilla"), t, _actor_config(PolicyLossConfig(loss_mode="vanilla"), **kw))
    le, ge = _loss_and_grad(
        get_loss_fn("entflow.grpo"), t, _actor_config(EntflowPolicyLossConfig(loss_mode="entflow.grpo"), **kw)
    )
    err = max(abs(le - lv) / max(1.0, abs(lv)), float((ge - gv).abs().max()) / max(1.0, float(gv.abs().max())))
    return compared("verl[entflow.grpo == vanilla]", err, TOL, "loss and gradient, max error")


def _verl_get_loss_fn(mode: str) -> Callable[..., Any]:
    from verl.trainer.ppo import core_algos

    return core_algos.get_policy_loss_fn(mode)


def check_verl(
    device: str | torch.device = "cpu", quick: bool = False, get_loss_fn: GetLossFn | None = None
) -> list[CheckResult]:
    """The plugin's three checks (CPU tensors: the losses are device-agnostic torch code).
    ``get_loss_fn`` is the subject (verl's ``get_policy_loss_fn``; tests pass a faulty one)."""
    names = ["verl[entry point]", "verl[every loss mode runs]", "verl[entflow.grpo == vanilla]"]
    if importlib.util.find_spec("verl") is None:
        return [skipped(n, "verl not installed (pip install 'entflow[verl]')") for n in names]
    fn = get_loss_fn or _verl_get_loss_fn
    results = timed(names[0], entry_point_result)
    if not results[0].ok:
        return results + [skipped(n, "the plugin is not registered") for n in names[1:]]
    results += timed(names[1], lambda: modes_result(fn))
    results += timed(names[2], lambda: vanilla_result(fn))
    return results
