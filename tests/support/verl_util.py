"""Helpers shared by the verl integration tests: verl's real config objects and a micro-batch in
the exact layout verl's actor workers hand to the loss function."""

from __future__ import annotations

import torch
from verl.utils import tensordict_utils as tu
from verl.workers.config import ActorConfig

from entflow.integrations.verl.config import EntflowPolicyLossConfig


def random_token_tensors(N: int, T: int, g: torch.Generator, min_len: int = 1) -> dict[str, torch.Tensor]:
    """Random per-token inputs ``[N, T]`` for a loss comparison: right-padded response mask (lengths
    ``min_len..T``), old and current log-probs, per-sequence advantages, entropies, a reference."""
    mask = torch.arange(T)[None] < torch.randint(min_len, T + 1, (N,), generator=g)[:, None]
    old = -torch.rand(N, T, generator=g) * 2
    return {
        "old": old,
        "logp": old + 0.2 * torch.randn(N, T, generator=g),
        "adv": (torch.randn(N, generator=g)[:, None] * mask).contiguous(),
        "mask": mask,
        "old_H": torch.rand(N, T, generator=g),
        "H": torch.rand(N, T, generator=g),
        "ref": old,
    }


def actor_config(policy_loss, **kw) -> ActorConfig:
    """verl's real actor config dataclass (what its workers pass to the loss)."""
    return ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=1, policy_loss=policy_loss, **kw)


def entflow_config(loss_mode: str = "entflow", method=None, params=None, statistics="micro_batch", **kw) -> ActorConfig:
    pl = EntflowPolicyLossConfig(loss_mode=loss_mode, method=method, params=params or {}, statistics=statistics)
    return actor_config(pl, **kw)


def verl_micro_batch(t: dict, non_tensor: dict | None = None, P: int = 5, seed: int = 0):
    """``(data, flat)``: one micro-batch as verl's actor workers hand it to the loss — left-padded
    prompts, right-padded responses, attention mask, the old-log-prob pass's ``entropy`` — and
    ``flat(x)`` that lays a per-token ``[N, T]`` tensor out as the model's flat (no-padding) output,
    shifted by one token (the layout verl's ``no_padding_2_padding`` reads)."""
    g = torch.Generator().manual_seed(seed)
    N, T = t["mask"].shape
    plen = torch.randint(1, P + 1, (N,), generator=g)
    rlen = t["mask"].sum(-1)
    am = torch.zeros(N, P + T, dtype=torch.long)
    for i in range(N):
        am[i, P - plen[i] : P] = 1
        am[i, P : P + rlen[i]] = 1
    info = {"dp_size": 1, "batch_num_tokens": int(t["mask"].sum()), "global_batch_size": N, **(non_tensor or {})}
    data = tu.get_tensordict(
        {
            "prompts": torch.randint(0, 50, (N, P), generator=g),
            "responses": torch.randint(0, 50, (N, T), generator=g),
            "attention_mask": am,
            "response_mask": t["mask"].long(),
            "old_log_probs": t["old"],
            "advantages": t["adv"],
            "entropy": t["old_H"],  # the old-policy entropy verl's old-log-prob pass stores in the batch
            "ref_log_prob": t["ref"],
            # the rollout engine's log-probs (rollout.calculate_log_probs), when the test gives them
            **({"rollout_log_probs": t["rollout"]} if "rollout" in t else {}),
        },
        info,
    )

    def flat(x: torch.Tensor) -> torch.Tensor:
        parts = []
        for i in range(N):
            parts += [x.new_zeros(int(plen[i]) - 1), x[i, : int(rlen[i])], x.new_zeros(1)]
        return torch.cat(parts)

    return data, flat


def loss_and_grad(fn, x: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(``fn(x)``, its gradient w.r.t. ``x``) on a fresh leaf copy of ``x``."""
    leaf = x.detach().clone().requires_grad_()
    loss = fn(leaf)
    (g,) = torch.autograd.grad(loss, leaf)
    return float(loss.detach()), g


def near(a: float, b: float, tol: float) -> bool:
    """|a − b| <= tol · max(1, |b|)."""
    return abs(a - b) <= tol * max(1.0, abs(b))


def close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    """max|a − b| <= tol · max(1, max|b|)."""
    return float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))
