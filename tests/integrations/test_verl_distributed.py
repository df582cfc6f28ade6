"""verl's loss-function path (``entflow_ppo_loss``) on two gloo ranks
with global statistics equals one process on the full batch.

Each rank holds half the responses as one micro-batch in verl's layout, with verl's
``dp_size = 2``, ``batch_num_tokens`` and ``global_batch_size`` of the whole mini-batch. verl's
FSDP engine averages parameter gradients over ranks, so the full-batch gradient w.r.t. a token's
log-prob is its rank's gradient / 2, and verl logs the rank-average of the losses; both must equal
``ef.policy_loss`` on the concatenated batch (float64, 1e-6). With per-micro-batch statistics
(the default) STEER's max |Ω| is per rank, and the same comparison fails: the test can fail.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("verl")

import entflow as ef
from entflow.integrations.verl.losses import entflow_ppo_loss
from entflow.integrations.verl.spec import WORKER_METHODS
from support.gloo import ACCEPTANCE_CASES, report_from_rank0, spawn_ranks

D = torch.float64
N, T, WORLD = 12, 7, 2
TOL = 1e-6
CASES = [  # (method, params, verl loss_agg_mode)
    *ACCEPTANCE_CASES,
    ("rand_pos_clip", {"ratio": 0.2, "seed": 3}, "token-mean"),
    ("steer", {"mapping": "linear"}, "seq-mean-token-mean"),
    ("opefo", {}, "seq-mean-token-sum-norm"),
    ("clip_higher+steer+entropy_bonus", {"steer": {"lambda_min": 0.5}, "c": 0.05}, "token-mean"),
]


def full_data() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(1, T + 1, (N,), generator=g)
    lengths[0] = T
    mask = torch.arange(T)[None] < lengths[:, None]
    old = -torch.rand(N, T, generator=g, dtype=D) * 2.5 - 0.02
    rewards = torch.randint(0, 2, (N,), generator=g).to(D)
    adv = ef.group_advantages(rewards, torch.arange(N) // 4)[:, None].expand(N, T) * mask
    return {
        "old": old,
        "logp": (old + 0.3 * torch.randn(N, T, generator=g, dtype=D)).clamp(max=-1e-3),
        "adv": adv.contiguous(),
        "mask": mask,
        "old_H": torch.rand(N, T, generator=g, dtype=D) * 2,
        "H": torch.rand(N, T, generator=g, dtype=D) * 2,
        "ref": old,
    }


def _flat_params(params: dict) -> dict:
    out = {}
    for k, v in params.items():
        out.update({f"{k}.{kk}": vv for kk, vv in v.items()} if isinstance(v, dict) else {k: v})
    return out


def reference(t, name, params, agg):
    """One process, the full batch, per call: loss and gradients w.r.t. logp and entropy."""
    method = ef.get_method(name, **_flat_params(params))
    method.set_rank(0)
    lp, h = t["logp"].clone().requires_grad_(), t["H"].clone().requires_grad_()
    batch = ef.TokenBatch(lp, t["old"], t["adv"], t["mask"], entropy=h, old_entropy=t["old_H"])
    pinned = any(p.pins_clip() for p in method.parts)
    loss = ef.policy_loss(batch, method, ef.LossSpec(0.2, 0.2, None if pinned else 3.0, agg)).loss
    g_lp, g_h = torch.autograd.grad(loss, [lp, h], allow_unused=True)
    return float(loss), g_lp, (torch.zeros_like(h) if g_h is None else g_h)


def _worker(rank: int, port: int, out_path: str) -> None:
    from support.verl_util import entflow_config, verl_micro_batch

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        t = full_data()
        rows = slice(rank * N // WORLD, (rank + 1) * N // WORLD)
        mine = {k: v[rows] for k, v in t.items()}
        info = {"dp_size": WORLD, "batch_num_tokens": int(t["mask"].sum()), "global_batch_size": N}
        data, flat = verl_micro_batch(mine, info, seed=rank)
        report = {}
        for statistics in ("global", "micro_batch"):
            for name, params, agg in CASES:
                cfg = entflow_config("entflow", name, params, statistics=statistics, loss_agg_mode=agg)
                WORKER_METHODS.clear()
                lp, h = mine["logp"].clone().requires_grad_(), mine["H"].clone().requires_grad_()
                loss, _ = entflow_ppo_loss(cfg, {"log_probs": flat(lp), "entropy": flat(h)}, data, dist.group.WORLD)
                g_lp, g_h = torch.autograd.grad(loss, [lp, h], allow_unused=True)
                full = torch.zeros(2, N, T, dtype=D)  # FSDP averages over ranks: rank's grad / WORLD
                full[0, rows] = g_lp / WORLD
                full[1, rows] = (torch.zeros_like(h) if g_h is None else g_h) / WORLD
                mean_loss = torch.tensor([float(loss) / WORLD], dtype=D)
                dist.all_reduce(full)
                dist.all_reduce(mean_loss)
                ref_loss, ref_lp, ref_h = reference(t, name, params, agg)
                report[f"{statistics}/{name}/{agg}"] = {
                    "loss": abs(float(mean_loss) - ref_loss) / max(1.0, abs(ref_loss)),
                    "grad": float((full[0] - ref_lp).abs().max()),
                    "grad_entropy": float((full[1] - ref_h).abs().max()),
                    "grad_norm": float(ref_lp.abs().max()),
                }
        report_from_rank0(rank, report, out_path)
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_with_global_statistics_equal_one_process(tmp_path):
    report = spawn_ranks(_worker, WORLD, tmp_path / "report.json")
    for name, _, agg in CASES:
        r = report[f"global/{name}/{agg}"]
        assert r["grad_norm"] > 1e-3, name
        assert r["loss"] < TOL and r["grad"] < TOL and r["grad_entropy"] < TOL, (name, agg, r)
    # per micro-batch (verl's own Clip-Cov/KL-Cov semantics) the batch statistics are per rank
    for name in ("steer", "opefo", "kl_cov", "forking_tokens"):
        assert report[f"micro_batch/{name}/token-mean"]["grad"] > 1e-4, name
    assert report["micro_batch/grpo/token-mean"]["grad"] < TOL  # the denominators are verl's global ones
