"""Global statistics across micro-batches and data-parallel ranks.

``prepare_statistics`` + ``policy_loss(..., stats=...)`` on two gloo ranks, each holding half
the batch in two micro-batches, must give summed gradients equal to one process on the full
batch (per call, no stats), to 1e-6 in float64. One spawn runs every method. The same
equality is checked in one process (gradient accumulation, no group) for every method with a
batch-level statistic and every aggregation; and the per-call default is shown to be per call.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import entflow as ef
from support.gloo import ACCEPTANCE_CASES, report_from_rank0, spawn_ranks

D = torch.float64
N, T, F = 16, 6, 3
WORLD = 2
# (method, params, agg): the six of acceptance 1 first, then other batch-level statistics
CASES = [
    *ACCEPTANCE_CASES,
    ("steer", {"scope": "group", "mapping": "binary"}, "seq-mean-token-mean"),
    ("steer", {"mapping": "linear"}, "seq-mean-token-sum-norm"),
    ("rand_pos_clip", {"ratio": 0.1, "seed": 3}, "token-mean"),
    ("quadrant", {"preset": "uplift", "I": "mask:0.5", "seed": 2}, "token-mean"),
    ("opefo_target", {"target": 0.7}, "token-mean"),
    ("clip_higher+steer+clip_cov", {"clip_cov.ratio": 0.1, "cov_low": -10.0, "cov_high": 10.0}, "seq-mean-token-mean"),
]
TOL = 1e-6


def full_data() -> dict[str, torch.Tensor]:
    """One deterministic float64 batch with ragged masks, 4 groups of 4, off-policy logp."""
    g = torch.Generator().manual_seed(7)
    base = -torch.rand(N, T, generator=g, dtype=D) * 2.5 - 0.02
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T) < lengths[:, None]).to(D)
    rewards = torch.randint(0, 2, (N,), generator=g).to(D)
    group_index = torch.arange(N) // 4
    return {
        "base": base,
        "feats": torch.randn(N, T, F, generator=g, dtype=D),
        "old_logp": base + 0.3 * torch.randn(N, T, generator=g, dtype=D),
        "old_entropy": torch.rand(N, T, generator=g, dtype=D) * 2,
        "mask": mask,
        "adv": ef.group_advantages(rewards, group_index),
        "group_index": group_index,
    }


def grads(data, rows_per_mb, method, agg, group=None, trim=False):
    """Gradients w.r.t. a shared parameter θ [F] and per token ``[N, T]`` (rows outside
    ``rows_per_mb`` stay 0), each micro-batch with its own forward and backward and its
    ``stats``; ``rows_per_mb`` None: one process, the full batch, per call (no stats).
    ``trim``: cut each micro-batch's padding to its longest response (T differs between them)."""
    theta = torch.zeros(F, dtype=D, requires_grad=True)
    token_grad = torch.zeros(N, T, dtype=D)

    def cols(s):
        return slice(None) if not trim else slice(0, int(data["mask"][s].sum(-1).max()))

    def batch(s, with_grad):
        s = (s, cols(s))
        lp = data["base"][s] + data["feats"][s] @ theta  # a tiny "model": logp depends on θ
        if with_grad:
            lp.retain_grad()
        else:
            lp = lp.detach()
        b = ef.TokenBatch(
            lp,
            data["old_logp"][s],
            data["adv"][s[0]],
            data["mask"][s],
            old_entropy=data["old_entropy"][s],
            group_index=data["group_index"][s[0]],
        )
        return b, lp

    if rows_per_mb is None:
        rows_per_mb, stats = [slice(None)], [None]
    else:
        stats = ef.prepare_statistics(
            [batch(s, False)[0] for s in rows_per_mb], method, ef.LossSpec(agg=agg), group=group
        )
    weights = []
    for s, st in zip(rows_per_mb, stats, strict=True):
        b, lp = batch(s, True)
        out = ef.policy_loss(b, method, ef.LossSpec(agg=agg), stats=st)
        out.loss.backward()
        token_grad[s, cols(s)] = lp.grad
        weights.append(out.token_weights)
    return theta.grad, token_grad, weights


def reference(data, name, params, agg):
    m = ef.get_method(name, **params)
    m.set_rank(0)  # the single-process run is rank 0 of a world of one
    return grads(data, None, m, agg)


def _worker(rank: int, port: int, out_path: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        data = full_data()
        half = N // WORLD
        lo = rank * half
        mbs = [slice(lo, lo + half // 2), slice(lo + half // 2, lo + half)]
        report = {}
        for name, params, agg in CASES:
            ref_theta, ref_tok, ref_w = reference(data, name, params, agg)
            g_theta, g_tok, w = grads(data, mbs, ef.get_method(name, **params), agg, group=dist.group.WORLD)
            dist.all_reduce(g_theta)  # summed over ranks
            dist.all_reduce(g_tok)  # each rank filled its own rows; the rest are 0
            n_zeroed = int(((torch.cat(w) == 0) & data["mask"][lo : lo + half].bool()).sum())
            t = torch.tensor([n_zeroed], dtype=torch.long)
            dist.all_reduce(t)
            report[f"{name}{params}/{agg}"] = {
                "theta": float((g_theta - ref_theta).abs().max()),
                "token": float((g_tok - ref_tok).abs().max()),
                "grad_norm": float(ref_tok.abs().max()),
                "zeroed": int(t),
                "zeroed_ref": int(((ref_w[0] == 0) & data["mask"].bool()).sum()),
            }
        # per call (no stats), rank r draws from seed + r, read from torch.distributed
        b = ef.TokenBatch(data["base"], data["old_logp"], data["adv"], data["mask"])
        w = ef.policy_loss(b, ef.get_method("rand_pos_clip", ratio=0.3, seed=11)).token_weights
        twin = ef.get_method("rand_pos_clip", ratio=0.3, seed=11 + rank)
        twin.set_rank(0)
        both = [torch.empty_like(w) for _ in range(WORLD)]
        dist.all_gather(both, w)
        ok = torch.tensor([int(torch.equal(w, ef.policy_loss(b, twin).token_weights))])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # on every rank
        report["per_call_streams"] = {
            "equals_seed_plus_rank": bool(ok),
            "ranks_differ": not torch.equal(both[0], both[1]),
        }
        # controllers see rank-averaged metrics: one all_reduce
        local = {"entropy": torch.tensor(float(rank), dtype=D), "x": 2.0 * rank}
        report["average_metrics"] = ef.average_metrics(local)
        report_from_rank0(rank, report, out_path)
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_two_micro_batches_equal_one_process(tmp_path):
    report = spawn_ranks(_worker, WORLD, tmp_path / "report.json")
    assert report.pop("average_metrics") == {"entropy": 0.5, "x": 1.0}
    assert report.pop("per_call_streams") == {"equals_seed_plus_rank": True, "ranks_differ": True}
    assert len(report) == len(CASES)
    for key, r in report.items():
        assert r["grad_norm"] > 1e-3, key  # a real gradient
        assert r["theta"] < TOL and r["token"] < TOL, (key, r)
        assert r["zeroed"] == r["zeroed_ref"], (key, r)  # the same tokens dropped
    for key in ("clip_cov", "rand_pos_clip", "forking_tokens"):  # selections are not trivial
        assert next(r for k, r in report.items() if k.startswith(key))["zeroed"] >= 2, key


# ------------------------------------------------------------------------------------------
# one process: gradient accumulation over micro-batches of different sizes and padded lengths
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_gradient_accumulation_equals_the_full_batch_for_every_statistic(agg):
    data = full_data()
    mbs = [slice(0, 5), slice(5, 11), slice(11, N)]
    assert len({int(data["mask"][s].sum(-1).max()) for s in mbs}) > 1  # micro-batches of different T
    for name, params, _ in CASES:
        ref_theta, ref_tok, _ = reference(data, name, params, agg)
        g_theta, g_tok, _ = grads(data, mbs, ef.get_method(name, **params), agg, trim=True)
        torch.testing.assert_close(g_tok, ref_tok, rtol=0, atol=TOL, msg=f"{name}{params}")
        torch.testing.assert_close(g_theta, ref_theta, rtol=0, atol=TOL, msg=f"{name}{params}")


def test_global_draws_continue_the_shared_stream_and_resume():
    data = full_data()
    kw = {"ratio": 0.1, "cov_low": -10.0, "cov_high": 10.0, "seed": 5}
    a, b = ef.get_method("clip_cov", **kw), ef.get_method("clip_cov", **kw)
    mbs = [slice(0, 8), slice(8, N)]
    w1 = torch.cat(grads(data, mbs, a, "token-mean")[2])
    state = a.state_dict()
    w2 = torch.cat(grads(data, mbs, a, "token-mean")[2])
    assert not torch.equal(w1, w2)  # the shared stream advances between steps
    b.load_state_dict(state)
    assert torch.equal(torch.cat(grads(data, mbs, b, "token-mean")[2]), w2)  # and resumes exactly
    assert set(state["generator"]) == {"shared"} and state["generator"]["shared"]["device"] == "cpu"


def test_per_call_default_takes_statistics_over_the_call_only():
    data = full_data()
    m = ef.get_method("steer", mapping="linear")
    g_global = grads(data, [slice(0, 8), slice(8, N)], m, "token-mean")[1]
    logp = data["base"].clone().requires_grad_(True)
    for s in (slice(0, 8), slice(8, N)):  # no stats: max/min |Ω| of each micro-batch, its own token count
        b = ef.TokenBatch(
            logp[s], data["old_logp"][s], data["adv"][s], data["mask"][s], old_entropy=data["old_entropy"][s]
        )
        ef.policy_loss(b, m).loss.backward()
    assert float((logp.grad - g_global).abs().max()) > 1e-3


def test_stats_must_match_the_loss_call():
    data = full_data()
    m = ef.get_method("steer")
    b = ef.TokenBatch(data["base"], data["old_logp"], data["adv"], data["mask"], old_entropy=data["old_entropy"])
    (st,) = ef.prepare_statistics([b], m, ef.LossSpec(agg="token-mean"))
    with pytest.raises(ef.ParameterError, match="agg"):
        ef.policy_loss(b, m, ef.LossSpec(agg="seq-mean-token-mean"), stats=st)
    with pytest.raises(ef.ParameterError, match="clip"):
        ef.policy_loss(b, m, ef.LossSpec(clip_high=0.3), stats=st)
    with pytest.raises(ef.ParameterError, match="prepared for method 'steer', not 'opefo'"):
        ef.policy_loss(b, ef.get_method("opefo"), stats=st)
    small = ef.TokenBatch(data["base"][:4], data["old_logp"][:4], data["adv"][:4], data["mask"][:4])
    with pytest.raises(ef.ShapeError, match="stats"):
        ef.policy_loss(small, m, stats=st)
