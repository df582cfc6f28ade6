"""entflow inside verl 0.9.1: discovery, equivalence with verl's own losses, both
verl paths against ef.policy_loss, Hydra config validation with the example's overrides, and
the driver-side pieces of the entflow trainer.

verl is imported once here (slow: ~6-20 s on a shared 2-core machine); the discovery checks run
two fresh interpreters concurrently. Tolerance 1e-6 relative to max(1, |value|) everywhere
(float32 tensors, same formulas).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

verl = pytest.importorskip("verl")
pytestmark = pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")  # verl's notice for GRPO

from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.metric import AggregationType, Metric  # noqa: E402
from verl.workers.config import PolicyLossConfig  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

import entflow as ef  # noqa: E402
from entflow.errors import ConfigError  # noqa: E402
from entflow.integrations.verl.check import compose  # noqa: E402
from entflow.integrations.verl.config import EntflowPolicyLossConfig, check_config  # noqa: E402
from entflow.integrations.verl.driver import CHECKPOINT_FILE, Driver, shape_verl_advantages  # noqa: E402
from entflow.integrations.verl.losses import entflow_ppo_loss  # noqa: E402
from entflow.integrations.verl.spec import (  # noqa: E402
    WORKER_METHODS,
    registry_blockers,
    spec_from_policy_loss,
    verl_blockers,
)
from entflow.methods.base import method_class  # noqa: E402
from support.method_defaults import REQUIRED_PARAMS  # noqa: E402
from support.verl_util import actor_config, entflow_config, verl_micro_batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum", "seq-mean-token-sum"]
TOL = 1e-6
# methods without a default for a parameter; siren's top-p entropy needs logits verl does not give the loss
REQUIRED = {**REQUIRED_PARAMS, "siren": {"top_p": 1.0}}


def rollout(seed: int = 0, N: int = 8, T: int = 11, noise: float = 0.3):
    """Random rollout tensors: every response has >= 1 valid token (verl's and entflow's
    sequence means then count the same responses)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    old = torch.randn(N, T, generator=g) * 0.7 - 1.2
    logp = (old + noise * torch.randn(N, T, generator=g)).clamp(max=-1e-3)
    adv = torch.randn(N, generator=g)[:, None].expand(N, T) * mask
    return dict(
        old=old,
        logp=logp,
        adv=adv.contiguous(),
        mask=mask,
        old_H=torch.rand(N, T, generator=g) * 2,
        H=torch.rand(N, T, generator=g) * 2,
        ref=old + 0.2 * torch.randn(N, T, generator=g),
        rollout=old + 0.3 * torch.randn(N, T, generator=g),  # the rollout engine's (rollout_log_probs)
    )


def grads(loss_fn, *leaves):
    """(loss value, grads w.r.t. leaves) of ``loss_fn(*leaves)`` on fresh leaf copies."""
    xs = [x.detach().clone().requires_grad_() for x in leaves]
    loss = loss_fn(*xs)
    return float(loss.detach()), torch.autograd.grad(loss, xs, allow_unused=True)


def near(a: float, b: float) -> bool:
    """|a − b| <= 1e-6 · max(1, |b|): float32 sums of ~100 terms of size up to ~20 (token-sum)."""
    return abs(a - b) <= TOL * max(1.0, abs(b))


def close(a, b) -> bool:
    """Tensors equal to 1e-6 relative to max(1, max|b|); a missing gradient counts as zero."""
    if a is None or b is None:
        return (a is None or float(a.abs().max()) == 0) and (b is None or float(b.abs().max()) == 0)
    return float((a - b).abs().max()) <= TOL * max(1.0, float(b.abs().max()))


# --------------------------------------------------------------------------------------------
# Acceptance 1 + 5: discovery through the entry point alone; verl stays optional and lazy
# --------------------------------------------------------------------------------------------

_PROBE = textwrap.dedent(
    """
    import json, sys
    import entflow, entflow.integrations, entflow.integrations.verl, entflow.integrations.verl.spec
    import entflow.integrations.verl.driver
    lazy = "verl" not in sys.modules        # entflow and its verl package (spec, driver) need no verl
    import verl
    plugin = "entflow.integrations.verl.plugin" in sys.modules
    registry = sys.modules["verl.trainer.ppo.core_algos"].POLICY_LOSS_REGISTRY if plugin else {}
    print(json.dumps({"lazy": lazy, "modes": sorted(k for k in registry if k.startswith("entflow")), "plugin": plugin}))
    """
)


def test_discovery_by_entry_point_and_plugins_off():
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    procs = {
        policy: subprocess.Popen(
            [sys.executable, "-c", _PROBE],
            env={**env, "VERL_USE_EXTERNAL_PLUGINS": policy, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for policy in ("auto", "none")
    }
    out = {}
    for policy, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 0, stderr[-2000:]
        out[policy] = json.loads(stdout.strip().splitlines()[-1])
    expected = ["entflow"] + [f"entflow.{m}" for m in ef.list_methods()]
    assert out["auto"]["modes"] == sorted(expected)
    assert out["auto"]["plugin"] and out["auto"]["lazy"]
    assert out["none"]["modes"] == [] and not out["none"]["plugin"] and out["none"]["lazy"]


def test_trainer_mode_registers_whichever_module_is_imported_first():
    """Importing ``integrations.verl.config`` first starts verl's plugin loading from inside it;
    the ``entflow`` trainer mode must still register (no import cycle, no warning)."""
    probe = (
        "import entflow.integrations.verl.config\n"
        "from entflow.integrations.verl import plugin\n"
        "from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY\n"
        "print(plugin.TRAINER_REGISTERED, 'entflow' in TRAINER_REGISTRY)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    out = subprocess.run(
        [sys.executable, "-c", probe], env={**env, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=240
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "could not register" not in out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_verl_is_an_optional_extra_with_the_entry_point():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("verl") for d in project["dependencies"])
    assert any(d.startswith("verl") for d in project["optional-dependencies"]["verl"])
    assert project["entry-points"]["verl.plugins"] == {"entflow": "entflow.integrations.verl.plugin"}


# --------------------------------------------------------------------------------------------
# Acceptance 2: verl's own vanilla / clip_cov / kl_cov == entflow's registered grpo / clip_cov / kl_cov
# --------------------------------------------------------------------------------------------

GLOBAL_INFO = [None, {"dp_size": 2, "batch_num_tokens": 131, "global_batch_size": 16, "loss_scale_factor": None}]


def _both(verl_mode, verl_cfg, ef_mode, ef_cfg, t, agg):
    """(verl's loss, grad) and (entflow's, grad) through verl's registry on the same tensors."""
    fv = core_algos.get_policy_loss_fn(verl_mode)
    fe = core_algos.get_policy_loss_fn(ef_mode)
    lv, (gv,) = grads(lambda lp: fv(t["old"], lp, t["adv"], t["mask"], agg, verl_cfg)[0], t["logp"])
    WORKER_METHODS.clear()
    le, (ge,) = grads(lambda lp: fe(t["old"], lp, t["adv"], t["mask"], agg, ef_cfg)[0], t["logp"])
    return lv, gv, le, ge


@pytest.mark.parametrize("info", GLOBAL_INFO, ids=["local", "global-batch"])
@pytest.mark.parametrize("agg", AGG_MODES)
def test_vanilla_with_dual_clip_equals_entflow_grpo(agg, info):
    t = rollout(1, noise=0.8)
    c = 1.6
    r = (t["logp"] - t["old"]).exp()
    assert bool(((t["adv"] < 0) & (r > c) & t["mask"]).any())  # the dual clip's branch is exercised
    kw = dict(loss_agg_mode=agg, clip_ratio_c=c, clip_ratio_low=0.2, clip_ratio_high=0.28)
    cv = actor_config(PolicyLossConfig(loss_mode="vanilla"), **kw)
    ce = entflow_config("entflow.grpo", **kw)
    for cfg in (cv, ce):
        cfg.global_batch_info.update(info or {})
    lv, gv, le, ge = _both("vanilla", cv, "entflow.grpo", ce, t, agg)
    assert near(lv, le) and close(gv, ge)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_clip_cov_every_candidate_picked_equals_verl(agg):
    t = rollout(2, N=10, T=13, noise=0.25)
    r = (t["logp"] - t["old"]).exp()
    assert float(r.max()) < 3.0  # verl's clip_cov has no dual clip; below c both agree (see docs)
    pl_v = PolicyLossConfig(loss_mode="clip_cov", clip_cov_ratio=1.0, clip_cov_lb=0.05, clip_cov_ub=3.0)
    cv = actor_config(pl_v, loss_agg_mode=agg, clip_ratio=0.1)
    params = {"ratio": 1.0, "cov_low": 0.05, "cov_high": 3.0}
    ce = entflow_config("entflow.clip_cov", params=params, loss_agg_mode=agg, clip_ratio=0.1)
    lv, gv, le, ge = _both("clip_cov", cv, "entflow.clip_cov", ce, t, agg)
    out = ef.policy_loss(
        ef.TokenBatch(t["logp"], t["old"], t["adv"], t["mask"]),
        ef.get_method("clip_cov", **params),
        ef.LossSpec(0.1, 0.1, 3.0),
    )
    assert out.metrics["clip_cov/n_selected"] >= 3  # some tokens removed …
    assert out.metrics["clip/frac_high"] + out.metrics["clip/frac_low"] > 0  # … and clipped ones excluded
    assert near(lv, le) and close(gv, ge)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_kl_cov_equals_verl(agg):
    t = rollout(3, N=10, T=13)
    cv = actor_config(PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=0.1, ppo_kl_coef=0.7), loss_agg_mode=agg)
    ce = entflow_config("entflow.kl_cov", params={"ratio": 0.1, "beta": 0.7}, loss_agg_mode=agg)
    lv, gv, le, ge = _both("kl_cov", cv, "entflow.kl_cov", ce, t, agg)
    assert near(lv, le) and close(gv, ge)


# --------------------------------------------------------------------------------------------
# Acceptance 2 (second half): any method through either verl path == ef.policy_loss
# --------------------------------------------------------------------------------------------


def _method(name: str):
    return ef.get_method(name, **REQUIRED.get(name, {}))


def _reference(t, method, logp, H, clip=(0.2, 0.2), dual=3.0, pinned=False, old_H=True, ref=True, agg="token-mean"):
    batch = ef.TokenBatch(
        logp, t["old"], t["adv"], t["mask"], entropy=H, old_entropy=t["old_H"] if old_H else None,
        ref_logp=t["ref"] if ref else None, rollout_logp=t.get("rollout"),
    )  # fmt: skip
    return ef.policy_loss(batch, method, ef.LossSpec(clip[0], clip[1], None if pinned else dual, agg)).loss


REGISTRY_METHODS = [m for m in ef.list_methods() if not registry_blockers(_method(m))]


def test_registry_path_supports_the_token_level_methods():
    assert set(REGISTRY_METHODS) >= {"grpo", "clip_higher", "clip_cov", "kl_cov", "rand_pos_clip", "quadrant"}
    assert not {"steer", "opefo", "forking_tokens", "entropy_bonus", "adaptive_entropy", "gtpo"} & set(REGISTRY_METHODS)


@pytest.mark.parametrize("name", REGISTRY_METHODS)
def test_registry_path_equals_policy_loss(name):
    t = rollout(4)
    fn = core_algos.get_policy_loss_fn(f"entflow.{name}")
    cfg = entflow_config(f"entflow.{name}", params=REQUIRED.get(name))
    WORKER_METHODS.clear()
    lv, (gv,) = grads(lambda lp: fn(t["old"], lp, t["adv"], t["mask"], "token-mean", cfg)[0], t["logp"])
    method = _method(name)
    pinned = any(p.pins_clip() for p in method.parts)
    lr, (gr,) = grads(lambda lp: _reference(t, method, lp, None, pinned=pinned, old_H=False, ref=False), t["logp"])
    assert near(lv, lr) and close(gv, gr)


def test_registry_path_refuses_entropy_methods_naming_the_trainer_mode():
    t = rollout(4)
    cfg = entflow_config("entflow.steer")
    with pytest.raises(ConfigError, match="trainer_mode=entflow") as e:
        core_algos.get_policy_loss_fn("entflow.steer")(t["old"], t["logp"], t["adv"], t["mask"], "token-mean", cfg)
    assert "policy_loss.loss_mode" in str(e.value) and "old-policy entropy" in str(e.value)


def test_loss_function_path_with_grpo_equals_verls_own_ppo_loss():
    t = rollout(5)
    data, flat = verl_micro_batch(t)
    data["rollout_is_weights"] = torch.rand(t["mask"].shape, generator=torch.Generator().manual_seed(1)) + 0.5
    kw = dict(clip_ratio_c=1.5, entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.05)
    cv = actor_config(PolicyLossConfig(loss_mode="vanilla"), **kw)
    ce = entflow_config("entflow.grpo", **kw)
    out = {}
    for key, cfg, fn in (("verl", cv, ppo_loss), ("entflow", ce, entflow_ppo_loss)):
        WORKER_METHODS.clear()
        out[key] = grads(lambda lp, h: fn(cfg, {"log_probs": flat(lp), "entropy": flat(h)}, data)[0], t["logp"], t["H"])  # noqa: B023
    (lv, (gv, hv)), (le, (ge, he)) = out["verl"], out["entflow"]
    assert near(lv, le) and close(gv, ge) and close(hv, he)


def test_registry_path_inside_verls_ppo_loss():
    """verl's own ppo_loss (global batch info, metric wrapping) calling the registered entflow loss."""
    t = rollout(5)
    data, flat = verl_micro_batch(t, {"dp_size": 2, "batch_num_tokens": 3 * int(t["mask"].sum())})
    cv = actor_config(PolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=0.1, ppo_kl_coef=0.1))
    ce = entflow_config("entflow.kl_cov", params={"ratio": 0.1, "beta": 0.1})
    WORKER_METHODS.clear()
    lv, (gv,) = grads(lambda lp: ppo_loss(cv, {"log_probs": flat(lp)}, data)[0], t["logp"])
    le, (ge,) = grads(lambda lp: ppo_loss(ce, {"log_probs": flat(lp)}, data)[0], t["logp"])
    assert near(lv, le) and close(gv, ge)
    _, metrics = ppo_loss(ce, {"log_probs": flat(t["logp"])}, data)
    assert metrics["entflow/kl_cov/n_selected"].aggregation == AggregationType.MEAN


@pytest.mark.parametrize("name", [m for m in ef.list_methods() if not verl_blockers(_method(m))])
def test_loss_function_path_equals_policy_loss(name):
    t = rollout(6)
    data, flat = verl_micro_batch(t)
    cfg = entflow_config(f"entflow.{name}", params=REQUIRED.get(name), calculate_entropy=True)
    WORKER_METHODS.clear()
    lv, (gv, hv) = grads(
        lambda lp, h: entflow_ppo_loss(cfg, {"log_probs": flat(lp), "entropy": flat(h)}, data)[0], t["logp"], t["H"]
    )
    method = _method(name)
    pinned = any(p.pins_clip() for p in method.parts)
    lr, (gr, hr) = grads(lambda lp, h: _reference(t, method, lp, h, pinned=pinned), t["logp"], t["H"])
    assert near(lv, lr) and close(gv, gr) and close(hv, hr)


def test_loss_function_path_composition_metrics_and_verl_aggregation():
    t = rollout(7)
    data, flat = verl_micro_batch(t)
    params = {"steer": {"lambda_min": 0.6}, "c": 0.01}  # Hydra's nested node for params.steer.lambda_min
    cfg = entflow_config("entflow", method="clip_higher+steer+entropy_bonus", params=params)
    WORKER_METHODS.clear()
    loss, metrics = entflow_ppo_loss(cfg, {"log_probs": flat(t["logp"]), "entropy": flat(t["H"])}, data)
    method = ef.get_method("clip_higher+steer+entropy_bonus", **{"steer.lambda_min": 0.6, "c": 0.01})
    ref = ef.policy_loss(
        ef.TokenBatch(t["logp"], t["old"], t["adv"], t["mask"], entropy=t["H"], old_entropy=t["old_H"]),
        method, ef.LossSpec(0.2, 0.28, 3.0),
    )  # fmt: skip
    assert near(float(loss), float(ref.loss))
    assert metrics["entflow/steer/weight_min"].aggregation == AggregationType.MIN
    assert metrics["entflow/steer/weight_mean"].aggregation == AggregationType.MEAN
    assert metrics["entflow/steer/weight_min"].values == [pytest.approx(ref.metrics["steer/weight_min"])]
    # two ranks x one micro-batch, as verl's workers aggregate them
    assert Metric.aggregate_dp([Metric("mean", 1.0), Metric("mean", 3.0)]) == pytest.approx(2.0)


# --------------------------------------------------------------------------------------------
# Acceptance 3: verl's own ppo_trainer config, composed with Hydra, with the example's overrides
# --------------------------------------------------------------------------------------------


def example_overrides(script: str, **env) -> list[str]:
    out = subprocess.run(
        ["bash", str(ROOT / "examples" / "verl" / script)],
        env={**os.environ, "ENTFLOW_PRINT_OVERRIDES": "1", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()


def _validate(overrides):
    """What verl.trainer.main_ppo does before it starts Ray, then entflow's cross-section check."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config = compose(overrides)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return config, omega_conf_to_dataclass(config.actor_rollout_ref.actor), check_config(config)


def _error_text(excinfo) -> str:
    e, parts = excinfo.value, []
    while e is not None:
        parts.append(str(e))
        e = e.__cause__
    return "\n".join(parts)


def test_example_config_validates_through_verls_dataclasses():
    ov = example_overrides("run_grpo_1node.sh", METHOD="clip_higher+steer", METHOD_PARAMS="steer.lambda_min=0.7")
    config, actor, method = _validate(ov)
    assert isinstance(actor.policy_loss, EntflowPolicyLossConfig)
    assert config.trainer.v1.trainer_mode == "entflow"
    assert method.parts[1].lambda_min == 0.7 and method.clip_bounds() == (0.2, 0.28)
    multi = example_overrides("run_grpo_multinode.sh", NNODES="4", METHOD="opefo", METHOD_PARAMS="variant=static")
    config, _, method = _validate(multi)
    assert config.trainer.nnodes == 4 and method.variant == "static"


@pytest.mark.parametrize(
    ("env", "extra", "key"),
    [
        ({"METHOD": "steeer"}, [], "actor_rollout_ref.actor.policy_loss.method"),
        ({"METHOD_PARAMS": "steer.lambda_min=1.5"}, [], "actor_rollout_ref.actor.policy_loss.params.steer.lambda_min"),
        ({"METHOD_PARAMS": "steer.lamda_min=0.5"}, [], "actor_rollout_ref.actor.policy_loss.params.steer.lamda_min"),
        ({"METHOD": "opefo", "METHOD_PARAMS": "lam=2"}, [], "actor_rollout_ref.actor.policy_loss.params.lam"),
        ({"METHOD": "steer", "METHOD_PARAMS": "estimator=tabular"}, [], "actor_rollout_ref.actor.policy_loss.method"),
        ({"METHOD": "entropy_bonus", "METHOD_PARAMS": ""}, [], "actor_rollout_ref.actor.calculate_entropy"),
        ({"METHOD": "steer", "METHOD_PARAMS": ""}, ["trainer.v1.trainer_mode=sync"], "trainer.v1.trainer_mode"),
        ({"METHOD": "kl_ref", "METHOD_PARAMS": ""}, [], "actor_rollout_ref.actor.use_kl_loss"),
        ({"STATISTICS": "global"}, ["actor_rollout_ref.actor.loss_agg_mode=token-sum"], "actor.loss_agg_mode"),
        ({}, ["+trainer.v1.sync.parameter_sync_step=2"], "trainer.v1.sync.parameter_sync_step"),
    ],
    ids=[
        "unknown-method",
        "part-param-range",
        "part-unknown-param",
        "param-range",
        "tabular",
        "entropy-grad",
        "trainer-mode",
        "kl-ref",
        "global-token-sum",
        "sync-steps",
    ],
)
def test_bad_entflow_config_fails_at_config_time_naming_the_key(env, extra, key):
    ov = example_overrides("run_grpo_1node.sh", **env) + extra
    with pytest.raises(Exception) as excinfo:  # Hydra wraps what the dataclass raises
        _validate(ov)
    text = _error_text(excinfo)
    assert key in text, text
    assert any(isinstance(c, ConfigError) for c in _causes(excinfo.value))


def test_a_strict_on_policy_method_needs_one_update_per_rollout():
    """A method declaring ``strict_on_policy`` (read through MethodNeeds) makes the config check
    refuse several PPO epochs or mini-batches per rollout batch."""
    from support.throwaway_methods import StrictOnPolicyMethod, registered

    with registered(StrictOnPolicyMethod):
        ov = example_overrides("run_grpo_1node.sh", METHOD="test_strict_on_policy", METHOD_PARAMS="")
        with pytest.raises(ConfigError, match="ppo_mini_batch_size"):  # the example: 4 mini-batches of 64
            check_config(compose(ov))
        one = [*ov, "actor_rollout_ref.actor.ppo_mini_batch_size=256"]
        assert check_config(compose(one)).name == "test_strict_on_policy"
        with pytest.raises(ConfigError, match="ppo_epochs"):
            check_config(compose([*one, "actor_rollout_ref.actor.ppo_epochs=2"]))


def _causes(e):
    while e is not None:
        yield e
        e = e.__cause__


def test_check_cli_names_the_key(capsys):
    from entflow.integrations.verl.check import main

    ov = example_overrides("run_grpo_1node.sh", METHOD="steer", METHOD_PARAMS="floor=-1")
    assert main(ov) == 2
    assert "actor_rollout_ref.actor.policy_loss.params.floor" in capsys.readouterr().err


def test_registry_mode_without_entflow_trainer_validates_for_token_level_methods():
    ov = example_overrides("run_grpo_1node.sh", METHOD="clip_cov", METHOD_PARAMS="ratio=0.001")
    _, actor, method = _validate([*ov, "trainer.v1.trainer_mode=sync"])
    assert spec_from_policy_loss(actor.policy_loss).name == "clip_cov" and method.ratio == 0.001


# --------------------------------------------------------------------------------------------
# The entflow trainer's driver: shaping, controllers once per step, checkpoint / resume
# --------------------------------------------------------------------------------------------


SHAPED = ["gtpo", "ppl_shaping", "entropy_advantage", "w_reinforce", "edge_grpo"]
# verl's own estimators and the pass@k advantages, run by the entflow trainer's driver
SET_BY_ENTFLOW = ["rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "opo", "gpg_advantage",
                  "grpo_passk", "gdpo", "passk_training", "pkpo"]  # fmt: skip


@pytest.mark.parametrize("name", SHAPED + SET_BY_ENTFLOW)
def test_shaping_from_verls_grpo_advantages_equals_compute_advantages(name):
    g = torch.Generator().manual_seed(8)
    N, T = 8, 6
    mask = torch.arange(T)[None] < torch.randint(1, T + 1, (N,), generator=g)[:, None]
    uid = [f"prompt-{i // 4}" for i in range(N)]
    rewards = torch.randint(0, 2, (N,), generator=g).float()
    scores = torch.zeros(N, T)
    scores[torch.arange(N), mask.sum(-1) - 1] = rewards  # verl puts the reward on the last token
    verl_adv, _ = core_algos.compute_grpo_outcome_advantage(scores, mask.float(), index=uid)
    old = -torch.rand(N, T, generator=g) * 2
    H = torch.rand(N, T, generator=g)
    method = _method(name)
    shaped = shape_verl_advantages(method, verl_adv, mask, old, scores, uid, old_entropy=H)
    group = torch.tensor([i // 4 for i in range(N)])
    ref = ef.compute_advantages(
        ef.TokenBatch(old, old, None, mask, old_entropy=H, rewards=rewards, group_index=group), method
    )
    assert close(shaped, ref)


def test_driver_advances_controllers_once_per_step_and_resumes(tmp_path):
    spec = spec_from_policy_loss(entflow_config("entflow", method="adaptive_entropy+pos_adv_reweight").policy_loss)
    driver = Driver(spec)
    for step, H in enumerate([0.1, 0.1, 0.5]):
        seen = driver.after_update({"actor/entropy": H, "actor/entflow/pg_loss": 0.3, "timing/x": 1.0}, step)
    assert seen == {"entropy": 0.5, "pg_loss": 0.3, "step": 2.0}
    ae, pa = driver.method.parts
    assert ae.coef == pytest.approx(1e-4) and pa.lam == pytest.approx(0.95)  # +δ, +δ, −δ ; 1 − δ (capped at 1)
    driver.save(tmp_path / "global_step_3", 3)
    resumed = Driver(spec)
    assert resumed.load(tmp_path / "global_step_3") and (tmp_path / "global_step_3" / CHECKPOINT_FILE).exists()
    assert resumed.method.state_dict() == driver.method.state_dict()
    # workers load the shipped controller state: their loss equals the driver's method's
    t = rollout(9)
    data, flat = verl_micro_batch(t)
    for k, v in driver.extra_info(3, 10).items():
        tu.assign_non_tensor_data(data, k, v)
    cfg = entflow_config("entflow", method="adaptive_entropy+pos_adv_reweight", calculate_entropy=True)
    WORKER_METHODS.clear()
    loss, metrics = entflow_ppo_loss(cfg, {"log_probs": flat(t["logp"]), "entropy": flat(t["H"])}, data)
    ref = _reference(t, driver.method, t["logp"], t["H"])
    assert near(float(loss), float(ref)) and metrics["entflow/pos_adv/weight"].values == [pytest.approx(0.95)]


def test_stochastic_methods_redraw_identically_after_resume():
    t = rollout(10)
    data, flat = verl_micro_batch(t)
    tu.assign_non_tensor_data(data, "entflow_step", 5)
    cfg = entflow_config("entflow.rand_pos_clip", params={"ratio": 0.3})

    def weights():
        return float(entflow_ppo_loss(cfg, {"log_probs": flat(t["logp"])}, data)[0])

    WORKER_METHODS.clear()
    first = weights()
    second = weights()  # same step: the stream continues
    WORKER_METHODS.clear()  # a resumed worker: fresh method, same step → same draws
    assert weights() == first and second != first


def test_trainer_overrides_match_verls_trainer_hooks():
    """The trainer module cannot be imported without verl's rollout stack (transfer_queue, vLLM);
    check by source that each hook it overrides exists on verl's PPOTrainer with the same arguments."""

    def methods(path: Path, cls: str) -> dict[str, list[str]]:
        tree = ast.parse(path.read_text())
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
        return {f.name: [a.arg for a in f.args.args] for f in node.body if isinstance(f, ast.FunctionDef)}

    v1 = Path(verl.__file__).parent / "trainer" / "ppo" / "v1"
    base = methods(v1 / "trainer_base.py", "PPOTrainer") | methods(v1 / "trainer_sync.py", "PPOTrainerSync")
    ours = methods(ROOT / "src" / "entflow" / "integrations" / "verl" / "trainer.py", "EntflowTrainer")
    assert set(ours) == {
        "__init__",
        "on_init_end",
        "_compute_advantage",
        "_update_actor",
        "_save_checkpoint",
        "_load_checkpoint",
    }
    for name, args in ours.items():
        assert base[name] == args, name
    assert "register_trainer" in (v1 / "trainer_base.py").read_text()
    assert "set_loss_fn" in (Path(verl.__file__).parent / "workers" / "engine_workers.py").read_text()


def test_method_param_keys_match_registered_methods():
    for name in ef.list_methods():
        assert method_class(name).name == name


# --------------------------------------------------------------------------------------------
# The rollout–training mismatch corrections: verl's rollout_log_probs as rollout_logp
# --------------------------------------------------------------------------------------------

CORRECTIONS = ["tis", "icepop", "rs_token", "rs_seq_mean", "kpop", "m2po", "ipo"]


@pytest.mark.parametrize("name", CORRECTIONS)
def test_corrections_read_verls_rollout_log_probs_on_the_loss_function_path(name):
    """The loss-function path gives a correction verl's ``rollout_log_probs`` as ``rollout_logp``:
    the loss equals ``policy_loss`` with them, and differs from the loss with other engine log-probs."""
    t = rollout(11, noise=0.2)
    data, flat = verl_micro_batch(t)
    cfg = entflow_config(f"entflow.{name}")
    WORKER_METHODS.clear()
    lv, (gv,) = grads(lambda lp: entflow_ppo_loss(cfg, {"log_probs": flat(lp)}, data)[0], t["logp"])
    method = _method(name)
    lr, (gr,) = grads(lambda lp: _reference(t, method, lp, None, ref=False), t["logp"])
    assert near(lv, lr) and close(gv, gr)
    moved = {**t, "rollout": t["rollout"] - 0.5}
    lm, _ = grads(lambda lp: _reference(moved, method, lp, None, ref=False), t["logp"])
    assert not near(lm, lr)  # the engine's log-probs matter


def test_a_correction_without_rollout_log_probs_names_the_field():
    from entflow.errors import MissingInputError

    t = {k: v for k, v in rollout(12).items() if k != "rollout"}
    data, flat = verl_micro_batch(t)
    WORKER_METHODS.clear()
    with pytest.raises(MissingInputError, match="rollout_logp"):
        entflow_ppo_loss(entflow_config("entflow.icepop"), {"log_probs": flat(t["logp"])}, data)


def test_the_registry_path_refuses_a_correction_naming_rollout_log_probs():
    t = rollout(13)
    cfg = entflow_config("entflow.tis")
    WORKER_METHODS.clear()
    with pytest.raises(ConfigError, match=r"rollout_log_probs.*trainer_mode=entflow"):
        core_algos.get_policy_loss_fn("entflow.tis")(t["old"], t["logp"], t["adv"], t["mask"], "token-mean", cfg)


def test_verls_own_is_weights_next_to_a_correction_are_refused():
    t = rollout(14)
    data, flat = verl_micro_batch(t)
    data["rollout_is_weights"] = torch.ones_like(t["old"])
    WORKER_METHODS.clear()
    with pytest.raises(ConfigError, match="twice") as e:
        entflow_ppo_loss(entflow_config("entflow.tis"), {"log_probs": flat(t["logp"])}, data)
    assert e.value.key == "algorithm.rollout_correction.rollout_is"


@pytest.mark.parametrize(
    ("method", "extra", "key"),
    [
        (
            "icepop",
            ["actor_rollout_ref.rollout.calculate_log_probs=False"],
            "actor_rollout_ref.rollout.calculate_log_probs",
        ),
        ("tis", ["algorithm.rollout_correction.rollout_is=token"], "algorithm.rollout_correction.rollout_is"),
        ("rs_token", ["algorithm.rollout_correction.bypass_mode=True"], "algorithm.rollout_correction.bypass_mode"),
    ],
)
def test_config_check_names_what_a_correction_needs_from_verl(method, extra, key):
    ov = [
        *example_overrides("run_grpo_1node.sh", METHOD=method, METHOD_PARAMS=""),
        "actor_rollout_ref.rollout.calculate_log_probs=True",
    ]
    assert check_config(compose(ov)).name == method  # verl's rollout log-probs on, its own correction off
    with pytest.raises(ConfigError) as e:
        check_config(compose([*ov, *extra]))
    assert e.value.key == key
