"""entflow's cispo / gspo / sapo == verl 0.9.1's own ``cispo`` / ``gspo`` / ``sapo`` policy losses.

Loss value and gradient w.r.t. the current log-probs, on the same float32 tensors, through
verl's registry (``core_algos.get_policy_loss_fn``) for both sides, in every aggregation verl
offers (and with a global batch: ``dp_size``, ``batch_num_tokens``, ``global_batch_size``);
then once more through verl's whole ``ppo_loss`` against entflow's loss function. verl's
``sapo`` always aggregates ``seq-mean-token-mean`` (it ignores ``loss_agg_mode``), so it is
compared there. Tolerance: 1e-6 relative to max(1, |value|), as tests/test_integration_verl.py.

The batches are built so that every branch acts: clipped ratios on both sides, a response with
A < 0 whose ratio exceeds verl's dual-clip constant (verl's three losses have no dual clip, and
neither have ours, although the plugin passes ``clip_ratio_c`` to methods that do), A = 0
responses, ragged masks.
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
from entflow.integrations.verl.losses import entflow_ppo_loss  # noqa: E402
from entflow.integrations.verl.spec import WORKER_METHODS  # noqa: E402
from support.verl_util import actor_config, close, entflow_config, loss_and_grad, near, verl_micro_batch  # noqa: E402

TOL = 1e-6
AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum", "seq-mean-token-sum"]
GLOBAL_INFO = [None, {"dp_size": 2, "batch_num_tokens": 131, "global_batch_size": 16, "loss_scale_factor": None}]


def rollout(seed: int, N: int = 10, T: int = 9, noise: float = 0.5) -> dict[str, torch.Tensor]:
    """Float32 tensors [N, T]; every response has >= 1 valid token; response 0 has A = 0, response
    1 has A < 0 and log-ratios ≈ +1.5 (r ≈ 4.5 > verl's dual-clip constant 3)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    lengths[1] = T
    mask = torch.arange(T)[None, :] < lengths[:, None]
    old = torch.randn(N, T, generator=g) * 0.7 - 1.5
    logp = old + noise * torch.randn(N, T, generator=g)
    logp[1] = old[1] + 1.5
    adv = torch.randn(N, generator=g)
    adv[0], adv[1] = 0.0, -1.3
    return {"old": old, "logp": logp, "adv": (adv[:, None] * mask).contiguous(), "mask": mask}


def both(verl_mode: str, ef_mode: str, t: dict, agg: str, info: dict | None, params: dict | None = None, **kw):
    """(verl loss, grad), (entflow loss, grad) through verl's policy-loss registry."""
    cv = actor_config(PolicyLossConfig(loss_mode=verl_mode), loss_agg_mode=agg, **kw)
    ce = entflow_config(ef_mode, params=params, loss_agg_mode=agg, **kw)
    for cfg in (cv, ce):
        cfg.global_batch_info.update(info or {})
    fv, fe = core_algos.get_policy_loss_fn(verl_mode), core_algos.get_policy_loss_fn(ef_mode)
    WORKER_METHODS.clear()
    v = loss_and_grad(lambda lp: fv(t["old"], lp, t["adv"], t["mask"], agg, cv)[0], t["logp"])
    e = loss_and_grad(lambda lp: fe(t["old"], lp, t["adv"], t["mask"], agg, ce)[0], t["logp"])
    return v, e


@pytest.mark.parametrize("info", GLOBAL_INFO, ids=["local", "global-batch"])
@pytest.mark.parametrize("agg", AGG_MODES)
def test_cispo_equals_verl(agg, info):
    t = rollout(0)
    lo, hi = 0.3, 0.25
    r = (t["logp"] - t["old"]).exp()[t["mask"]]
    assert bool((r > 1 + hi).any()) and bool((r < 1 - lo).any())  # the weight is truncated on both sides
    (lv, gv), (le, ge) = both("cispo", "entflow.cispo", t, agg, info, clip_ratio_low=lo, clip_ratio_high=hi)
    assert near(le, lv, TOL) and close(ge, gv, TOL)
    assert float(gv.abs().max()) > 0


@pytest.mark.parametrize("info", GLOBAL_INFO, ids=["local", "global-batch"])
@pytest.mark.parametrize("agg", AGG_MODES)
def test_gspo_equals_verl(agg, info):
    t = rollout(1, noise=0.4)
    lo, hi = 0.2, 0.25
    m = t["mask"].float()
    s = (((t["logp"] - t["old"]) * m).sum(-1) / m.sum(-1)).exp()
    A = t["adv"][:, 0]
    assert bool(((A > 0) & (s > 1 + hi)).any()) or bool(((A < 0) & (s < 1 - lo)).any())  # a response is clipped
    assert bool(((A != 0) & (s > 1 - lo) & (s < 1 + hi)).any())  # and one is not
    assert float(s[1]) > 3.0 and float(A[1]) < 0  # above the dual-clip constant: neither side caps it
    (lv, gv), (le, ge) = both("gspo", "entflow.gspo", t, agg, info, clip_ratio_low=lo, clip_ratio_high=hi)
    assert near(le, lv, TOL) and close(ge, gv, TOL)


@pytest.mark.parametrize("info", GLOBAL_INFO, ids=["local", "global-batch"])
@pytest.mark.parametrize("taus", [(1.0, 1.05), (0.6, 2.0)], ids=["default", "custom"])
def test_sapo_equals_verl(taus, info):
    t = rollout(2)
    tau_pos, tau_neg = taus
    params = None if taus == (1.0, 1.05) else {"tau_pos": tau_pos, "tau_neg": tau_neg}
    agg = "seq-mean-token-mean"  # verl's sapo aggregates this way whatever loss_agg_mode says
    (lv, gv), (le, ge) = both("sapo", "entflow.sapo", t, agg, info, params=params, tau_pos=tau_pos, tau_neg=tau_neg)
    assert near(le, lv, TOL) and close(ge, gv, TOL)
    # the temperatures matter: the other pair gives a different gradient
    other = {"tau_pos": 1.7, "tau_neg": 0.4}
    _, (_, g_other) = both("sapo", "entflow.sapo", t, agg, info, params=other, tau_pos=1.7, tau_neg=0.4)
    assert not close(g_other, gv, TOL)


def test_sapo_defaults_are_verls():
    cfg = actor_config(PolicyLossConfig(loss_mode="sapo"))
    m = ef.get_method("sapo")
    assert (m.tau_pos, m.tau_neg) == (cfg.tau_pos, cfg.tau_neg) == (1.0, 1.05)


@pytest.mark.parametrize("name", ["cispo", "gspo", "sapo"])
def test_verls_ppo_loss_equals_entflows_loss_function(name):
    """verl's whole ``ppo_loss`` (global batch info from the micro-batch, KL loss, entropy
    bonus) with its own loss mode == entflow's loss function with ``entflow.<name>``."""
    t = rollout(3)
    t.update(old_H=torch.rand(t["mask"].shape), ref=t["old"] + 0.1)
    data, flat = verl_micro_batch(t, {"dp_size": 2, "batch_num_tokens": 3 * int(t["mask"].sum())})
    kw = dict(use_kl_loss=True, kl_loss_coef=0.05, clip_ratio_low=0.25, clip_ratio_high=0.3)
    if name == "sapo":
        kw["loss_agg_mode"] = "seq-mean-token-mean"
    cv = actor_config(PolicyLossConfig(loss_mode=name), **kw)
    ce = entflow_config(f"entflow.{name}", **kw)
    WORKER_METHODS.clear()
    lv, gv = loss_and_grad(lambda lp: ppo_loss(cv, {"log_probs": flat(lp)}, data)[0], t["logp"])
    le, ge = loss_and_grad(lambda lp: entflow_ppo_loss(ce, {"log_probs": flat(lp)}, data)[0], t["logp"])
    assert near(le, lv, TOL) and close(ge, gv, TOL)
