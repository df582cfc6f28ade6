"""Diagnostics of one rollout batch (docs/design.md §9), logged as ``diag/*`` on validation steps."""

from __future__ import annotations

import math
from typing import Any

import torch

from entflow.core.token_stats import TokenStats
from entflow.trainer.config import TrainConfig
from entflow.trainer.rollout import Rollout
from entflow.trainer.tokens import position_ids_from_mask

POSITION_BINS = 5  # relative-position bins of the positional entropy profile (paper 004 Fig. 6a)


@torch.no_grad()
def rollout_diagnostics(
    model: Any, roll: Rollout, old: TokenStats, weights: torch.Tensor, cfg: TrainConfig
) -> dict[str, float]:
    """docs/design.md §9 diagnostics of one rollout batch, as ``diag/*`` metrics (logged on validation steps):

    - diversity over whole groups (the G responses of a prompt, characters as tokens): distinct
      n-grams ``diag/distinct_n`` (n = 1…4, averaged) and ``diag/self_bleu`` (paper 002 App. C.1);
    - calibration from the rollout policy's mean token log-prob of correct vs incorrect responses
      (paper 002 §5.3): ``diag/calib/{logp_correct,logp_incorrect,gap,auroc}``;
    - positional entropy (paper 004 Fig. 6a): ``diag/pos_entropy/{correct,incorrect}/b{i}``;
    - the gradient-norm proxy G_t = |w_t|·sqrt(1 − 2p + Σπ²)·‖h_t‖ (paper 004 Eq. 4) with w_t
      the weight the update put on the token (A_t times the method's token weight, r = 1):
      ``diag/gnorm/mean`` and ``diag/gnorm/top20_entropy_share`` (share of ΣG carried by the 20 %
      highest-entropy tokens).
    """
    from entflow.analysis.calibration import calibration, sequence_mean_logp
    from entflow.analysis.diversity import groups_from_index, ngram_diversity, self_bleu
    from entflow.analysis.token_profiles import grad_norm_proxy, positional_entropy

    out: dict[str, float] = {}
    groups = groups_from_index(roll.texts, roll.group_index.tolist())
    out["diag/distinct_n"] = ngram_diversity(groups)
    out["diag/self_bleu"] = self_bleu(groups)
    cal = calibration(sequence_mean_logp(old.logp, roll.mask), roll.rewards)
    out.update(
        {
            "diag/calib/logp_correct": cal.mean_correct,
            "diag/calib/logp_incorrect": cal.mean_incorrect,
            "diag/calib/gap": cal.gap,
            "diag/calib/auroc": cal.auroc,
        }
    )
    prof = positional_entropy(old.entropy, roll.mask, roll.rewards, n_bins=POSITION_BINS)
    for kind in ("correct", "incorrect"):
        for i, v in enumerate(prof[kind]):
            out[f"diag/pos_entropy/{kind}/b{i}"] = float(v)
    input_ids = torch.cat([roll.prompt_ids, roll.response_ids], dim=1)
    attention = torch.cat([roll.prompt_mask, torch.ones_like(roll.response_ids)], dim=1)
    hidden = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids_from_mask(attention),
        output_hidden_states=True,
        logits_to_keep=1,  # only the hidden states are read: the head runs on one position, not all
    ).hidden_states[-1]  # after the final norm: the input of the LM head
    lp = roll.prompt_ids.shape[1]
    G = grad_norm_proxy(weights, old.logp, old.sum_p2, hidden[:, lp - 1 : -1], roll.mask)
    valid = roll.mask > 0
    g, h = G[valid], old.entropy[valid]
    out["diag/gnorm/mean"] = float(g.mean()) if g.numel() else math.nan
    if g.numel() and float(g.sum()) > 0:
        top = h >= torch.quantile(h, 0.8)
        out["diag/gnorm/top20_entropy_share"] = float(g[top].sum() / g.sum())
    return out
