"""Why OPEFO's λ* is large in the lab: S⁺/S⁻ of paper 001 Eq. 6/9 on rollout batches of a policy,
decomposed and under controlled changes (docs/regime.md, "OPEFO's λ*").

    PYTHONPATH=src python experiments/regime/flow_balance.py POLICY_DIR --task countdown \
        --batches 8 --out flow.json

For each setting it draws ``batches`` rollout batches (the lab trainer's ``sample_rollout``: P
prompts × G samples at temperature τ), computes the strict on-policy ΔH_t of the ``opefo``
estimator (−A (1−p)² (log p + H), paper 001 Eq. 6; r ≡ 1 so w = A) and reports S⁺, S⁻ and
λ* = (S⁻ − S⁺)/(S⁻ + S⁺) (Eq. 9, ``core.flow.flow_balance``), plus
- the share of S⁻ and S⁺ from each (sign A, p < 0.2 / p > 0.8 / middle) cell;
- the same λ* with rewards shuffled within each group (breaks the link between which tokens were
  sampled and the reward, keeping the reward counts): expected ≈ 0 if the imbalance comes from
  that link;
- the λ* with each token's ΔH divided by its response length (sequence-normalised sums).
Settings: the temperature and the group size G are varied around the trainer defaults.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from entflow.core.advantages import group_advantages
from entflow.core.batch import TokenBatch
from entflow.core.estimators import entropy_change
from entflow.core.flow import balance, flow_sums
from entflow.core.token_stats import token_stats
from entflow.lab.config import LabConfig as TrainConfig
from entflow.lab.pretrain import load_policy
from entflow.lab.tasks import get_task
from entflow.trainer.config import parse_override
from entflow.trainer.rollout import sample_rollout


def delta_h(logp, ent, mask, rewards, group_index):
    adv = group_advantages(rewards, group_index).unsqueeze(-1).expand_as(logp)
    b = TokenBatch(logp=logp, old_logp=logp, advantages=adv, mask=mask, old_entropy=ent)
    return entropy_change("opefo", b), adv, b.valid  # paper 001 Eq. 6, strict on-policy (w = A)


def one_setting(model, tok, task, P: int, G: int, tau: float, batches: int, seed: int) -> dict:
    cfg = TrainConfig(task=task.name, prompts_per_step=P, group_size=G, temperature=tau, seed=seed)
    rows = []
    for b in range(batches):
        torch.manual_seed(seed * 1000 + b)
        roll = sample_rollout(model, tok, task, cfg, step=b + 1)
        st = token_stats(roll.logits, roll.response_ids, temperature=tau, stats=("logp", "entropy"))
        mask = roll.mask.bool()
        dH, adv, valid = delta_h(st.logp, st.entropy, mask, roll.rewards, roll.group_index)
        s_pos, s_neg = flow_sums(dH, valid)
        p = st.logp.exp()
        cells = {}
        for sa, amask in (("A>0", adv > 0), ("A<0", adv < 0)):
            for pb, pm in (("p<0.2", p < 0.2), ("0.2<=p<=0.8", (p >= 0.2) & (p <= 0.8)), ("p>0.8", p > 0.8)):
                m = amask & pm & valid
                cp, cn = flow_sums(dH * m, m)
                cells[f"{sa},{pb}"] = {
                    "tokens": int(m.sum()),
                    "S_pos_share": float(cp / s_pos.clamp(min=1e-12)),
                    "S_neg_share": float(cn / s_neg.clamp(min=1e-12)),
                }
        # rewards shuffled within each group
        perm = torch.cat([torch.nonzero(roll.group_index == g).flatten()[torch.randperm(G)] for g in range(P)])
        dHs, _, _ = delta_h(st.logp, st.entropy, mask, roll.rewards[perm], roll.group_index)
        # sequence-normalised: ΔH_t / |y|
        lens = mask.sum(1, keepdim=True).clamp(min=1)
        sp_n, sn_n = flow_sums(dH / lens, valid)
        rows.append(
            {
                "S_pos": float(s_pos),
                "S_neg": float(s_neg),
                "lambda_star": float(balance(s_pos, s_neg)),
                "lambda_star_shuffled": float(balance(*flow_sums(dHs, valid))),
                "lambda_star_seqnorm": float(balance(sp_n, sn_n)),
                "acc": float(roll.rewards.mean()),
                "entropy": float((st.entropy * mask).sum() / mask.sum()),
                "tokens": int(valid.sum()),
                "cells": cells,
            }
        )

    def mean(key):
        return statistics.mean(r[key] for r in rows)

    out = {
        k: mean(k)
        for k in (
            "S_pos",
            "S_neg",
            "lambda_star",
            "lambda_star_shuffled",
            "lambda_star_seqnorm",
            "acc",
            "entropy",
            "tokens",
        )
    }
    out["lambda_star_per_batch"] = [round(r["lambda_star"], 4) for r in rows]
    out["lambda_star_shuffled_per_batch"] = [round(r["lambda_star_shuffled"], 4) for r in rows]
    out["cells"] = {
        c: {k: statistics.mean(r["cells"][c][k] for r in rows) for k in rows[0]["cells"][c]} for c in rows[0]["cells"]
    }
    out |= {"P": P, "G": G, "temperature": tau, "batches": batches}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("policy")
    ap.add_argument("--task", default="countdown")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--out")
    ap.add_argument("params", nargs="*")
    a = ap.parse_args()
    torch.set_num_threads(1)
    task = get_task(a.task, **dict(parse_override(x) for x in a.params))
    model, tok = load_policy(a.policy)
    res = {"policy": a.policy, "task": repr(task), "settings": []}
    for P, G, tau in ((16, 16, 1.0), (16, 16, 0.7), (16, 16, 1.3), (64, 4, 1.0), (4, 64, 1.0)):
        r = one_setting(model, tok, task, P, G, tau, a.batches, a.seed)
        res["settings"].append(r)
        print(
            f"P={P} G={G} tau={tau}: acc {r['acc']:.3f} H {r['entropy']:.3f} S+ {r['S_pos']:.2f} "
            f"S- {r['S_neg']:.2f} lambda* {r['lambda_star']:.3f} shuffled {r['lambda_star_shuffled']:.3f} "
            f"seqnorm {r['lambda_star_seqnorm']:.3f}"
        )
        print(
            "   ",
            {c: (round(v["S_pos_share"], 2), round(v["S_neg_share"], 2), v["tokens"]) for c, v in r["cells"].items()},
        )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
