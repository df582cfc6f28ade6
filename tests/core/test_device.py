"""Device and dtype suite: the same tests on every available device.

``pytest -m device`` selects them; they run on the CPU always and on CUDA when one is present
(untested on a GPU in this session: no GPU was available). Every method, through
``compute_advantages`` and ``policy_loss`` (per call and with ``prepare_statistics``), in float32,
bfloat16 and float16: results live on the input's device, are finite, and match a float64 CPU
computation; generators live on the batch's device and round-trip through ``state_dict``.
"""

from __future__ import annotations

import math

import pytest
import torch

import entflow as ef
from support.method_defaults import BUILD

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
pytestmark = pytest.mark.device

METHODS = [(n, BUILD.get(n, {})) for n in ef.list_methods()] + [
    ("steer", {"scope": "group", "mapping": "binary"}),
    ("clip_cov", {"ratio": 0.05, "cov_low": -1.0, "cov_high": 1.0}),
    ("kl_cov", {"ratio": 0.05}),
]
STOCHASTIC = {"clip_cov", "rand_pos_clip", "quadrant"}
# methods whose weights switch at a data-dependent threshold: rounding may move a token across it
THRESHOLDED = {"clip_cov", "kl_cov", "forking_tokens", "rand_pos_clip", "quadrant", "steer-binary", "erc", "simko"}
# the mismatch corrections' masks and the quantiles of their entropy-quartile metrics (methods/corrections.py)
THRESHOLDED |= {"icepop", "rs_token", "rs_seq_sum", "rs_seq_mean", "rs_seq_max", "kpop", "m2po", "ipo", "tis"}


def batch_fields(n: int = 8, t: int = 7, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    D = torch.float64
    logits = torch.randn(n, t, 5, generator=g, dtype=D) * 1.5
    logpi = torch.log_softmax(logits, -1)
    ids = torch.randint(0, 5, (n, t), generator=g)
    logp = logpi.gather(-1, ids[..., None])[..., 0]
    lengths = torch.randint(2, t + 1, (n,), generator=g)
    pi = logpi.exp()
    return {
        "logp": logp,
        "old_logp": logp + 0.3 * torch.randn(n, t, generator=g, dtype=D),
        "mask": (torch.arange(t) < lengths[:, None]).to(D),
        "entropy": -(pi * logpi).sum(-1),
        "old_entropy": -(pi * logpi).sum(-1) + 0.05,
        "ref_logp": logp + 0.2 * torch.randn(n, t, generator=g, dtype=D),
        "rollout_logp": logp + 0.3 * torch.randn(n, t, generator=g, dtype=D),  # the inference engine's
        "sum_p2": (pi**2).sum(-1),
        "sum_p2_logp": (pi**2 * logpi).sum(-1),
        "rewards": torch.randint(0, 2, (n,), generator=g).to(D),
        "group_index": torch.arange(n) // 4,
        "reward_baselines": torch.rand(n, generator=g, dtype=D),  # remax's greedy rewards
        "topk_logp": logpi.sort(-1, descending=True).values[..., :3],  # simko's candidates
        "expert_mask": torch.arange(n) % 4 == 1,  # chord's expert rows
    }


def run(fields, name, params, device, dtype, metrics="float"):
    """compute_advantages + policy_loss on ``device`` in ``dtype``; returns (loss, grad, weights, metrics, adv)."""
    f = {}
    for k, v in fields.items():
        cast = v.is_floating_point() and k not in ("rewards", "mask")
        f[k] = v.to(device, dtype) if cast else v.to(device)
    logp = f.pop("logp").detach().requires_grad_(True)
    m = ef.get_method(name, **params)
    full = ef.TokenBatch(logp.detach(), advantages=None, step=1, total_steps=5, **f)
    adv = ef.compute_advantages(full, m)
    if "rewards" not in m.needs:  # the loss reads rewards only where the method says so (positive_nll)
        f.pop("rewards")
    b = ef.TokenBatch(logp, advantages=adv, step=1, total_steps=5, **f)
    out = ef.policy_loss(b, m, metrics=metrics)
    out.loss.backward()
    return out.loss, logp.grad, out.token_weights, out.metrics, adv


def key(name, params):
    return name + ("-binary" if params.get("mapping") == "binary" else "")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize(("name", "params"), METHODS, ids=[key(n, p) for n, p in METHODS])
def test_every_method_on_device_and_dtype(device, dtype, name, params):
    fields = batch_fields()
    loss, grad, w, metrics, adv = run(fields, name, params, device, dtype, metrics="tensor")
    for x in (loss, grad, w, adv):
        assert x.device.type == device
    assert grad.dtype == dtype and adv.dtype == dtype
    assert all(v.device.type == device for v in metrics.values() if isinstance(v, torch.Tensor))
    assert bool(torch.isfinite(grad).all()) and math.isfinite(float(loss.detach()))
    vals = ef.read_metrics(metrics)
    assert all(math.isfinite(v) for v in vals.values()), {k: v for k, v in vals.items() if not math.isfinite(v)}
    # against float64 on the CPU (same CPU stream: stochastic methods are compared on the CPU only)
    if name in STOCHASTIC and device != "cpu":
        return
    if key(name, params) in THRESHOLDED and dtype != torch.float32:
        return
    ref_loss, ref_grad, ref_w, _, _ = run(fields, name, params, "cpu", torch.float64)
    tol = {torch.float32: 1e-4, torch.bfloat16: 6e-2, torch.float16: 1e-2}[dtype]
    scale = float(ref_grad.abs().max())
    assert float((grad.double().cpu() - ref_grad).abs().max()) <= tol * scale * 4 + 1e-7
    assert abs(float(loss.detach()) - float(ref_loss.detach())) <= tol * (abs(float(ref_loss.detach())) + 0.1) * 4
    if dtype == torch.float32:
        torch.testing.assert_close(w.double().cpu(), ref_w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_global_statistics_on_device(device):
    fields = {k: v.to(device) for k, v in batch_fields(n=8).items()}
    adv = ef.group_advantages(fields["rewards"], fields["group_index"])
    assert adv.device.type == device
    m = ef.get_method("clip_cov", ratio=0.1, cov_low=-5.0, cov_high=5.0)
    mbs = [
        ef.TokenBatch(fields["logp"][s], fields["old_logp"][s], adv[s], fields["mask"][s], validate=False)
        for s in (slice(0, 4), slice(4, 8))
    ]
    stats = ef.prepare_statistics(mbs, m)
    assert stats[0].denominator.device.type == device
    assert all(v.device.type == device for s in stats for d in s.methods.values() for v in d.values())
    state = m.state_dict()["generator"]["shared"]
    assert state["device"].startswith(device)


@pytest.mark.parametrize("device", DEVICES)
def test_generators_live_on_the_batch_device_per_rank_and_resume(device):
    fields = {k: v.to(device) for k, v in batch_fields(n=8, t=9).items()}
    adv = ef.group_advantages(fields["rewards"], fields["group_index"])
    b = ef.TokenBatch(fields["logp"], fields["old_logp"], adv, fields["mask"])

    def weights(m):
        return ef.policy_loss(b, m).token_weights

    kw = {"ratio": 0.2}
    r1 = ef.get_method("rand_pos_clip", seed=5, **kw)
    r1.set_rank(1)
    twin = ef.get_method("rand_pos_clip", seed=6, **kw)
    twin.set_rank(0)
    r0 = ef.get_method("rand_pos_clip", seed=5, **kw)
    r0.set_rank(0)
    w1 = weights(r1)
    assert torch.equal(w1, weights(twin))  # rank r draws from seed + r
    assert not torch.equal(w1, weights(r0))
    state = r1.state_dict()
    assert state["generator"]["per_call"]["device"].startswith(device)
    fresh = ef.get_method("rand_pos_clip", seed=0, **kw)
    fresh.load_state_dict(state)
    assert torch.equal(weights(fresh), weights(r1))
