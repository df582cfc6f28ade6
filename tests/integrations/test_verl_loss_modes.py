"""entflow's geo_mean / dppo_tv / dppo_kl / gpg / dro == verl 0.9.1's own loss modes of those names.

Float64 tensors, loss value and gradient w.r.t. the current log-probs, both sides through verl's
policy-loss registry (``core_algos.get_policy_loss_fn``: verl's ``<mode>`` against the plugin's
``entflow.<mode>``), in every ``loss_agg_mode`` verl accepts (all five: verl's ``geo_mean``
ignores it, and so does entflow's, which fixes the response mean), with and without global-batch
normalisation (``dp_size``, ``batch_num_tokens``, ``global_batch_size``). Then once through verl's
whole ``ppo_loss`` against the plugin's loss function.

Tolerance: 1e-10 relative to max(1, |value|); 1e-7 for ``geo_mean`` and ``dppo_kl``, where verl adds
1e-8 to a denominator (|y_i| + 1e-8 in GMPO's means; inside DPPO's binary-KL log it only moves a
threshold test, and no token here sits within 1e-7 of one).

The batches make every branch act: clipped and unclipped log-ratios (GMPO), tokens inside and
outside each trust region and weights above the truncation c = ``clip_ratio_c`` (DPPO), A = 0 and
A < 0 responses, ragged masks.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")
pytestmark = pytest.mark.filterwarnings("ignore:Disabled critic:UserWarning")

from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import PolicyLossConfig  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

import entflow as ef  # noqa: E402
from entflow.errors import ParameterError  # noqa: E402
from entflow.integrations.verl.losses import entflow_ppo_loss  # noqa: E402
from entflow.integrations.verl.spec import WORKER_METHODS  # noqa: E402
from support.verl_util import actor_config, close, entflow_config, loss_and_grad, near, verl_micro_batch  # noqa: E402

AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum", "seq-mean-token-sum"]
GLOBAL_INFO = [None, {"dp_size": 2, "batch_num_tokens": 131, "global_batch_size": 16, "loss_scale_factor": None}]
TOL = {"geo_mean": 1e-7, "dppo_kl": 1e-7}
MODES = ["geo_mean", "dppo_tv", "dppo_kl", "gpg", "dro"]
# per mode: verl's PolicyLossConfig extras, entflow params, actor-config clip settings
SETUP = {
    "geo_mean": ({}, None, dict(clip_ratio_low=0.2, clip_ratio_high=0.25)),
    "dppo_tv": ({}, None, dict(clip_ratio_low=0.05, clip_ratio_high=0.08, clip_ratio_c=3.0)),
    "dppo_kl": ({}, None, dict(clip_ratio_low=0.01, clip_ratio_high=0.02, clip_ratio_c=3.0)),
    "gpg": ({}, None, {}),
    "dro": ({"dro_beta": 0.3}, {"dro_beta": 0.3}, {}),
}


def rollout(seed: int, N: int = 10, T: int = 9, noise: float = 0.5) -> dict[str, torch.Tensor]:
    """Float64 tensors [N, T]; every response has >= 1 valid token; response 0 has A = 0, response 1
    A < 0 and log-ratios +1.5 (r ≈ 4.5 > c = 3), response 2 A > 0 and log-ratios +1.2."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    lengths[1] = lengths[2] = T
    mask = torch.arange(T)[None, :] < lengths[:, None]
    old = torch.randn(N, T, generator=g, dtype=torch.float64) * 0.7 - 1.5
    logp = old + noise * torch.randn(N, T, generator=g, dtype=torch.float64)
    logp[1] = old[1] + 1.5
    logp[2] = (old[2] + 1.2).clamp(max=-1e-3)
    adv = torch.randn(N, generator=g, dtype=torch.float64)
    adv[0], adv[1], adv[2] = 0.0, -1.3, 0.9
    return {"old": old, "logp": logp, "adv": (adv[:, None] * mask).contiguous(), "mask": mask}


def both(mode: str, t: dict, agg: str, info: dict | None, **override):
    """(verl loss, grad), (entflow loss, grad) through verl's policy-loss registry."""
    verl_extra, params, kw = SETUP[mode]
    kw = {**kw, **override}
    cv = actor_config(PolicyLossConfig(loss_mode=mode, **verl_extra), loss_agg_mode=agg, **kw)
    ce = entflow_config(f"entflow.{mode}", params=params, loss_agg_mode=agg, **kw)
    for cfg in (cv, ce):
        cfg.global_batch_info.update(info or {})
    fv, fe = core_algos.get_policy_loss_fn(mode), core_algos.get_policy_loss_fn(f"entflow.{mode}")
    WORKER_METHODS.clear()
    v = loss_and_grad(lambda lp: fv(t["old"], lp, t["adv"], t["mask"], agg, cv)[0], t["logp"])
    e = loss_and_grad(lambda lp: fe(t["old"], lp, t["adv"], t["mask"], agg, ce)[0], t["logp"])
    return v, e


def test_the_batches_exercise_every_branch():
    t = rollout(0)
    m, A = t["mask"], t["adv"]
    lr = (t["logp"] - t["old"])[m]
    a = A[m]
    assert bool(((a > 0) & (lr > 0.25)).any()) and bool(((a < 0) & (lr < -0.2)).any())  # GMPO clips
    assert bool(((a != 0) & (lr.abs() < 0.2)).any())  # and leaves some tokens unclipped
    d = (t["logp"].exp() - t["old"].exp())[m]
    assert bool(((a > 0) & (d > 0.08)).any()) and bool(((a < 0) & (d < -0.05)).any())  # outside the TV region
    assert bool(((a != 0) & (d.abs() < 0.05)).any())  # inside it
    assert bool(((a != 0) & (lr.exp() > 3.0)).any())  # weights above the truncation c


@pytest.mark.parametrize("info", GLOBAL_INFO, ids=["local", "global-batch"])
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("mode", MODES)
def test_entflow_equals_verl(mode, agg, info):
    if mode == "geo_mean" and info is not None:
        pytest.skip("verl's geo_mean ignores the global batch: test_geo_mean_global_normalisation")
    t = rollout(0)
    tol = TOL.get(mode, 1e-10)
    (lv, gv), (le, ge) = both(mode, t, agg, info)
    assert near(le, lv, tol) and close(ge, gv, tol)
    assert float(gv.abs().max()) > 0


def test_geo_mean_global_normalisation():
    """verl's geo_mean takes the plain mean over the micro-batch's responses, ignoring
    ``global_batch_size`` and ``dp_size`` (so its gradient grows with the number of micro-batches);
    entflow normalises it as every sequence mean, over the global batch: the ratio is exactly
    n_seq·dp_size / global_batch_size (docs/integrations.md)."""
    t = rollout(0)
    info = GLOBAL_INFO[1]
    (lv, gv), (le, ge) = both("geo_mean", t, "token-mean", info)
    factor = t["mask"].shape[0] * info["dp_size"] / info["global_batch_size"]
    assert factor != 1
    assert near(le, lv * factor, 1e-7) and close(ge, gv * factor, 1e-7)


@pytest.mark.parametrize("mode", ["dppo_tv", "dppo_kl"])
def test_dppo_truncation_is_verls_clip_ratio_c(mode):
    """The IS weight's truncation is the actor's ``clip_ratio_c`` on both sides (c = 10 leaves the
    r ≈ 4.5 tokens untruncated, so the gradient differs from c = 3)."""
    t = rollout(0)
    (lv, gv), (le, ge) = both(mode, t, "token-mean", None, clip_ratio_c=10.0)
    assert near(le, lv, 1e-7) and close(ge, gv, 1e-7)
    _, (_, g3) = both(mode, t, "token-mean", None)
    assert not close(g3, ge, 1e-3)


def test_dro_beta_matters_and_is_required():
    t = rollout(1)
    (_, gv), (_, ge) = both("dro", t, "token-mean", None)
    cv = actor_config(PolicyLossConfig(loss_mode="dro", dro_beta=2.0))
    g2 = loss_and_grad(
        lambda lp: core_algos.get_policy_loss_fn("dro")(t["old"], lp, t["adv"], t["mask"], "token-mean", cv)[0],
        t["logp"],
    )[1]
    assert close(ge, gv, 1e-10) and not close(g2, gv, 1e-3)
    for bad in (None, 0.0, -1.0):
        with pytest.raises(ParameterError, match="dro_beta"):
            ef.get_method("dro", dro_beta=bad)


@pytest.mark.parametrize("mode", MODES)
def test_verls_ppo_loss_equals_entflows_loss_function(mode):
    """verl's whole ``ppo_loss`` (global batch info from the micro-batch, KL loss) with its own loss
    mode == the plugin's loss function with ``entflow.<mode>`` (geo_mean: a micro-batch of the
    whole batch on one rank, where verl's normalisation and entflow's agree)."""
    t = rollout(3)
    t.update(old_H=torch.rand(t["mask"].shape, dtype=torch.float64), ref=t["old"] + 0.1)
    info = {"dp_size": 1, "global_batch_size": t["mask"].shape[0]} if mode == "geo_mean" else {"dp_size": 2}
    data, flat = verl_micro_batch(t, {**info, "batch_num_tokens": int(t["mask"].sum()) * info["dp_size"]})
    verl_extra, params, kw = SETUP[mode]
    kw = {**kw, "use_kl_loss": True, "kl_loss_coef": 0.05}
    cv = actor_config(PolicyLossConfig(loss_mode=mode, **verl_extra), **kw)
    ce = entflow_config(f"entflow.{mode}", params=params, **kw)
    WORKER_METHODS.clear()
    lv, gv = loss_and_grad(lambda lp: ppo_loss(cv, {"log_probs": flat(lp)}, data)[0], t["logp"])
    le, ge = loss_and_grad(lambda lp: entflow_ppo_loss(ce, {"log_probs": flat(lp)}, data)[0], t["logp"])
    tol = TOL.get(mode, 1e-10)
    assert near(le, lv, tol) and close(ge, gv, tol)
