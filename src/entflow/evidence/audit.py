"""The clean estimator audit (docs/design.md §9): how well does each entropy-change estimator of docs/design.md §5
rank the *true* change of token entropy caused by one update?

Three variants, each strictly on-policy (r ≡ 1, no clip) with one plain SGD step, in float64 so
that the measured change is not round-off (the step and the change it causes:
:func:`entflow.trainer.estimator_scores.entropy_change_of_step`, the tabular experiment's too):

- ``batch``: one SGD step on the GRPO loss of a whole rollout batch (P prompts × G responses);
  the true ΔH_t is measured at every response position by a second forward pass and correlated
  (Spearman, per step) with each estimator. A token's entropy here moves because of *every*
  token's update through shared weights — what paper 000's Table 1 measures on a real model.
- ``isolated``: for a sample of tokens, one SGD step on that token's loss alone
  (−A_t·log π(o_t)), the entropy change at that token's own position measured, then the weights
  restored. This separates estimator quality (how well a per-token first-order formula predicts
  a token's *own* effect) from parameter sharing (cross-talk between tokens).
- ``tabular_head``: the same batch step for a *logit-independent* policy, the setting of paper
  000's Theorem 1 and of paper 003's derivation. Every distinct state of the rollout (prompt +
  response prefix) gets its own row of free logits, initialised to the network's logits there;
  one SGD step on the batch's GRPO loss moves each row by its own tokens' gradients only, and
  the exact entropy change of each row is the truth. No network, no cross-talk: what remains is
  how well each formula predicts a softmax row's change, across states of very different
  entropy — exactly where paper 000's Remark 1 locates Cov's error (one batch mean in place of
  each state's own entropy).

Per step the Spearman correlation between truth and estimate is taken over the tokens; the
reported number is the mean over steps and seeds with a 95 % t-interval. After each measured
step the policy is trained on (the batch step kept), so the audit follows a strict on-policy
training trajectory.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from entflow.analysis.correlation import spearman
from entflow.analysis.render import render_markdown
from entflow.analysis.tables import DASH, Column, Interval, Table
from entflow.core.batch import TokenBatch
from entflow.core.estimators import ESTIMATORS, entropy_change
from entflow.core.ppo import LossSpec
from entflow.core.token_stats import STAT_NAMES, entropy_from_logits
from entflow.methods.objective import compute_advantages, policy_loss
from entflow.trainer.estimator_scores import entropy_change_of_step

#: the audit's variants, in the order the table shows them
VARIANTS = ("batch", "isolated", "tabular_head")

#: paper 000 (STEER) Table 1, SRCC of estimated vs true entropy change (its ranges over models)
PAPER_000_TABLE_1 = {"steer": "0.61–0.72", "cov": "0.04–0.08"}


@dataclass
class AuditConfig:
    steps: int = 8  # measured steps per seed
    seeds: tuple[int, ...] = (0, 1, 2)
    prompts_per_step: int = 8
    group_size: int = 8
    # plain SGD step sizes, small enough for the change to be first-order (the estimators are
    # first-order), yet far above float64 round-off
    lr: float = 1e-3  # batch variant (token-mean loss over the whole batch)
    lr_isolated: float = 1e-4  # isolated variant (one token's loss)
    lr_tabular: float = 1.0  # tabular_head variant: rows move by ~lr·|A|/N_tokens ≈ 1e-3 nats
    isolated_tokens: int = 24  # tokens per step in the isolated (per-token step) variant
    temperature: float = 1.0
    task: str = "countdown"
    task_params: dict[str, Any] = field(default_factory=dict)


def _stats(model, roll, tcfg):
    """Every token statistic of ``roll``'s responses under ``model`` (one forward; grad if enabled)."""
    from entflow.trainer.collect import rollout_stats

    return rollout_stats(model, roll, tcfg, STAT_NAMES)


def _entropy(model, roll, tcfg, at: tuple[int, int] | None = None) -> torch.Tensor:
    """The token entropies of ``roll``'s responses under ``model`` (``at``: the one at row, position)."""
    entropy = _stats(model, roll, tcfg).entropy
    return entropy if at is None else entropy[at]


def audit_policy(policy_path: Any, cfg: AuditConfig, progress: bool = False) -> dict[str, Any]:
    """Run every variant from ``policy_path`` (one path, or ``{seed: path}`` to start each seed
    from its own policy, e.g. each seed's GRPO-trained one). Returns ``{"per_step": {variant:
    {estimator: [per-step Spearman…]}}, "summary": rows, "config": …}`` (rows: variant,
    estimator, mean, half-width, n, rank)."""
    from entflow.analysis.stats import t_interval
    from entflow.lab.config import LabConfig
    from entflow.lab.policy import load_policy
    from entflow.lab.tasks import get_task
    from entflow.methods import get_method
    from entflow.trainer.collect import CollectedRollout, rollout_batch
    from entflow.trainer.estimator_scores import score_estimators
    from entflow.trainer.rollout import sample_rollout, step_seed
    from entflow.trainer.step import mini_batch

    task = get_task(cfg.task, **cfg.task_params)
    grpo = get_method("grpo")
    per: dict[str, dict[str, list[float]]] = {v: {e: [] for e in ESTIMATORS} for v in VARIANTS}
    for seed in cfg.seeds:
        model, tok = load_policy(policy_path[seed] if isinstance(policy_path, dict) else policy_path)
        model = model.double()
        tcfg = LabConfig(
            seed=seed, prompts_per_step=cfg.prompts_per_step, group_size=cfg.group_size, temperature=cfg.temperature
        )
        for step in range(1, cfg.steps + 1):
            torch.manual_seed(step_seed(seed, step))
            roll = sample_rollout(model, tok, task, tcfg, step)
            if float(roll.rewards.std()) == 0:
                continue
            model.eval()
            with torch.no_grad():
                old = _stats(model, roll, tcfg)
            b = rollout_batch(CollectedRollout(roll, old, None), tcfg, step)  # the trainer's rollout batch
            adv = compute_advantages(b, grpo, scale=tcfg.adv_scale)
            b.advantages = adv
            estimates = {e: entropy_change(e, b) for e in ESTIMATORS}
            valid = roll.mask > 0

            # isolated: one token's own update, its own entropy change
            rng = random.Random(step_seed(seed, step))
            cand = [(i, t) for i, t in valid.nonzero().tolist() if float(adv[i, t] if adv.dim() == 2 else adv[i]) != 0]
            picks = rng.sample(cand, min(cfg.isolated_tokens, len(cand)))
            if len(picks) >= 3:
                saved = [p.detach().clone() for p in model.parameters()]
                truth = []
                for i, t in picks:
                    sub = _Sub(roll, torch.tensor([i]))
                    cur = _stats(model, sub, tcfg)
                    a = adv[i, t] if adv.dim() == 2 else adv[i]
                    change = entropy_change_of_step(
                        model.parameters(),
                        -a * cur.logp[0, t],
                        partial(_entropy, model, sub, tcfg, (0, t)),
                        cfg.lr_isolated,
                        before=old.entropy[i, t],
                    )
                    truth.append(float(change))
                    with torch.no_grad():
                        for p, s in zip(model.parameters(), saved, strict=True):
                            p.copy_(s)
                idx = torch.tensor(picks)
                for e in ESTIMATORS:
                    est = estimates[e][idx[:, 0], idx[:, 1]]
                    per["isolated"][e].append(spearman(est, torch.tensor(truth, dtype=torch.float64)))

            # tabular_head: the same batch step for free per-state logit rows
            logits = _logits(model, roll, cfg)
            true_tab, state = tabular_head_entropy_change(logits, roll, adv, valid, grpo, cfg.lr_tabular)
            for e in ESTIMATORS:  # a row moves by the sum of its tokens' first-order effects
                est = torch.zeros_like(true_tab).index_add_(0, state, estimates[e][valid].double())
                per["tabular_head"][e].append(spearman(est, true_tab))

            # batch: one SGD step on the whole batch's GRPO loss (the trainer's mini-batch of every
            # row, r ≡ 1); ΔH at every position, scored as the trainer scores its estimators
            cur = _stats(model, roll, tcfg)
            out = policy_loss(mini_batch(b, adv, torch.arange(len(roll.texts)), cur), grpo, LossSpec())
            true_dH = entropy_change_of_step(
                model.parameters(), out.loss, partial(_entropy, model, roll, tcfg), cfg.lr, before=old.entropy
            )
            scores = score_estimators(true_dH, b, torch.ones_like(adv), LossSpec())
            for e in ESTIMATORS:
                per["batch"][e].append(scores[f"audit/{e}/spearman"])
            if progress:
                print(f"audit seed {seed} step {step}/{cfg.steps}", flush=True)
    rows = []
    for variant, d in per.items():
        for e, vals in d.items():
            mean, half, n = t_interval(v for v in vals if v is not None and math.isfinite(v))
            rows.append({"variant": variant, "estimator": e, "mean": mean, "half": half, "n": n})
    for variant in per:
        _rank(rows, variant)
    return {"per_step": per, "summary": rows, "config": cfg.__dict__ | {"seeds": list(cfg.seeds)}}


def _logits(model, roll, cfg) -> torch.Tensor:
    """Tempered logits ``[N, T, V]`` at every response position (no grad), float64."""
    from entflow.trainer.rollout import response_logits

    with torch.no_grad():
        return response_logits(model, roll.prompt_ids, roll.prompt_mask, roll.response_ids).double() / cfg.temperature


def tabular_head_entropy_change(
    logits: torch.Tensor, roll: Any, adv: torch.Tensor, valid: torch.Tensor, method: Any, lr: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """True ΔH of every distinct state ``[S]`` after one SGD step of a logit-independent policy,
    and the state of each valid position ``[n_valid]`` (values in 0..S−1).

    Each distinct state (the prompt's real tokens + the response prefix) owns one row of free
    logits ``u_s = logits`` there (``logits``: ``[N, T, V]``, tempered). The loss is the batch's
    GRPO loss (token-mean, r ≡ 1) with ``log π(o_t) = log_softmax(u_{s(t)})[o_t]``; autograd gives
    each row the sum of its own tokens' gradients, ``u_s ← u_s − lr·∂L/∂u_s``, and the truth is
    ``H(u_s') − H(u_s)``. States repeat within a group (every response's first token shares the
    prompt's state), so estimates are compared per state, summed over the state's tokens.
    """
    keys: dict[tuple[int, ...], int] = {}
    state = torch.full(valid.shape, -1, dtype=torch.long)
    rows = []
    for i, t in valid.nonzero().tolist():
        prompt = roll.prompt_ids[i][roll.prompt_mask[i] > 0].tolist()
        key = (*prompt, -1, *roll.response_ids[i, :t].tolist())
        if key not in keys:
            keys[key] = len(rows)
            rows.append(logits[i, t])
        state[i, t] = keys[key]
    u = torch.stack(rows).clone().requires_grad_(True)  # [S, V]
    idx = state.clamp(min=0)
    logp = torch.log_softmax(u, -1)[idx, roll.response_ids]  # [N, T]
    batch = TokenBatch(logp=logp, old_logp=logp.detach(), advantages=adv, mask=roll.mask)
    loss = policy_loss(batch, method, LossSpec()).loss
    change = entropy_change_of_step([u], loss, lambda: entropy_from_logits(u), lr)  # [S]
    return change, state[valid]


class _Sub:
    """A rollout restricted to some rows (prompt/response tensors only)."""

    def __init__(self, roll, idx: torch.Tensor):
        self.prompt_ids, self.prompt_mask = roll.prompt_ids[idx], roll.prompt_mask[idx]
        self.response_ids = roll.response_ids[idx]


def _rank(rows: list[dict[str, Any]], variant: str) -> None:
    """Rank = 1 + the number of estimators of the variant that are *significantly* better (whose
    95 % interval lies entirely above this one's). Overlapping intervals share a rank."""
    rs = [r for r in rows if r["variant"] == variant and math.isfinite(r["mean"])]

    def lo(r):
        return r["mean"] - (r["half"] if math.isfinite(r["half"]) else 0.0)

    def hi(r):
        return r["mean"] + (r["half"] if math.isfinite(r["half"]) else 0.0)

    for r in rs:
        r["rank"] = 1 + sum(lo(o) > hi(r) for o in rs if o is not r)


_TITLES = {
    "batch": "batch step",
    "isolated": "isolated per-token step",
    "tabular_head": "tabular head (logit-independent)",
}


def audit_table(result: dict[str, Any]) -> Table:
    """The audit as a :class:`~entflow.analysis.tables.Table`: per estimator and variant, the
    Spearman mean ± 95 % CI over seeds and its rank, next to paper 000's Table 1."""
    by = {(r["variant"], r["estimator"]): r for r in result["summary"]}
    variants = [v for v in VARIANTS if any(k[0] == v for k in by)]
    columns = [Column("estimator", align="left")]
    for v in variants:
        columns += [Column(f"{_TITLES[v]}: Spearman (95 % CI)", "+.3f"), Column("rank", "d")]
    columns.append(Column("paper 000 Table 1 SRCC", align="left"))
    rows = []
    for e in ESTIMATORS:
        cells: list[Any] = [e]
        for v in variants:
            r = by[(v, e)]
            cells += [Interval(r["mean"], r["half"], r["n"]), r.get("rank")]
        rows.append((*cells, PAPER_000_TABLE_1.get(e, DASH)))
    ns = sorted({r["n"] for r in result["summary"]})
    seeds = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    notes = (f"Spearman rank correlation of each estimator with the true entropy change, over {seeds} seeds.",)
    return Table("", tuple(columns), rows, notes, name="audit")


def audit_markdown(result: dict[str, Any]) -> str:
    """The audit table (:func:`audit_table`) in markdown."""
    return render_markdown(audit_table(result))
