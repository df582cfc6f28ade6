"""core/mismatch.py: the off-policy diagnostics against verl 0.9.1's ``compute_offpolicy_metrics``
(skipped without verl), and the pieces the corrections and the entropy flow share against float64
hand references: the Bernoulli KL, the k3 mean, the entropy quartiles (torch.quantile's cuts) and
the shares per quartile, the rejection statistics at each level."""

from __future__ import annotations

import math

import pytest
import torch

from entflow.core.mismatch import (
    binary_kl,
    entropy_quartiles,
    k3_mean,
    log_ratio,
    offpolicy_metrics,
    quartile_shares,
    rs_statistic,
)

D = torch.float64


def tensors(seed: int = 0, n: int = 10, t: int = 8):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(n, t, generator=g, dtype=D) * 3 - 0.01
    roll = (old + 0.6 * torch.randn(n, t, generator=g, dtype=D)).clamp(max=-1e-4)
    lengths = torch.randint(1, t + 1, (n,), generator=g)
    lengths[1] = 0  # an empty response
    valid = torch.arange(t)[None] < lengths[:, None]
    return old.masked_fill(~valid, 9.0), roll.masked_fill(~valid, -9.0), valid  # garbage on padding


def test_offpolicy_metrics_equal_verl():
    helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
    old, roll, valid = tensors(seed=1)
    verl = helper.compute_offpolicy_metrics(old, roll, valid.to(D))
    ours = {k: float(v) for k, v in offpolicy_metrics(old, roll, valid).items()}
    assert ours.keys() == verl.keys()
    for k in verl:
        assert math.isclose(ours[k], verl[k], rel_tol=1e-6, abs_tol=1e-9), (k, ours[k], verl[k])


def test_k3_kl_and_kl_against_hand_sums():
    old, roll, valid = tensors(seed=2)
    pairs = [(float(old[i, t]), float(roll[i, t])) for i, t in valid.nonzero().tolist()]
    k3 = sum(math.exp(o - r) - (o - r) - 1 for o, r in pairs) / len(pairs)
    k1 = sum(r - o for o, r in pairs) / len(pairs)
    m = offpolicy_metrics(old, roll, valid)
    assert math.isclose(float(m["k3_kl"]), k3, rel_tol=1e-7)
    assert math.isclose(float(m["kl"]), k1, rel_tol=1e-7)
    assert math.isclose(float(k3_mean(log_ratio(old, roll, valid), valid)), k3, rel_tol=1e-12)


def test_binary_kl_against_the_bernoulli_formula():
    lp = torch.tensor([-0.1, -1.0, -3.0, 0.0, -1e-12], dtype=D)
    lq = torch.tensor([-0.5, -0.2, -3.5, -0.3, -2.0], dtype=D)
    for a, b, got in zip(lp.tolist(), lq.tolist(), binary_kl(lp, lq).tolist(), strict=True):
        p, q = (min(max(math.exp(x), 1e-8), 1 - 1e-8) for x in (a, b))
        assert math.isclose(got, p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q)), rel_tol=1e-12)
    # float32 input: computed in float64, finite where p rounds to 1
    assert torch.isfinite(binary_kl(lp.float(), lq.float())).all()


def test_entropy_quartiles_follow_torch_quantile():
    g = torch.Generator().manual_seed(3)
    H = torch.rand(7, 9, generator=g, dtype=D)
    valid = torch.rand(7, 9, generator=g) < 0.7
    bins = entropy_quartiles(H, valid)
    cuts = torch.quantile(H[valid], torch.tensor([0.25, 0.5, 0.75], dtype=D))
    expected = (H > cuts[0]).long() + (H > cuts[1]).long() + (H > cuts[2]).long()
    assert torch.equal(bins[valid], expected[valid])
    affected = torch.rand(7, 9, generator=g) < 0.3
    shares = quartile_shares(affected, H, valid)
    for k in range(4):
        members = valid & (expected == k)
        assert math.isclose(float(shares[k]), float((affected & members).sum()) / float(members.sum()), rel_tol=1e-12)


def test_quartile_shares_of_an_empty_batch_are_zero():
    H = torch.rand(3, 4, dtype=D)
    assert torch.equal(quartile_shares(torch.ones(3, 4, dtype=torch.bool), H, torch.zeros(3, 4, dtype=torch.bool)),
                       torch.zeros(4, dtype=D))  # fmt: skip


@pytest.mark.parametrize("statistic", ["k1", "k2", "k3"])
@pytest.mark.parametrize("level", ["token", "seq_sum", "seq_mean", "seq_max"])
def test_rs_statistics_against_hand_loops(level, statistic):
    old, roll, valid = tensors(seed=4)
    lr = log_ratio(old, roll, valid)
    stat, seq = rs_statistic(lr, valid, level, statistic)

    def k(x):
        x = max(-20.0, min(20.0, x))
        return {"k1": -x, "k2": 0.5 * x * x, "k3": math.exp(x) - 1 - x}[statistic]

    for i in range(valid.shape[0]):
        ts = [t for t in range(valid.shape[1]) if valid[i, t]]
        vals = [k(float(lr[i, t])) for t in ts]
        if level == "token":
            for t, v in zip(ts, vals, strict=True):
                assert math.isclose(float(stat[i, t]), v, rel_tol=1e-12, abs_tol=1e-15)
            continue
        want = {"seq_sum": sum(vals), "seq_mean": sum(vals) / (len(vals) + 1e-8), "seq_max": max(vals, default=0.0)}
        assert math.isclose(float(seq[i]), want[level] if vals else 0.0, rel_tol=1e-12, abs_tol=1e-15)
