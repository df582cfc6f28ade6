"""A tabular softmax policy: the one setting where first-order entropy theory is exact.

Each of S states has its own logit row z_s ∈ R^V. K tokens are sampled per state with random
advantages; one SGD step on the (on-policy, hence unclipped) PPO objective moves the rows; the
true entropy change of each row is compared with the estimators of docs/design.md §5, scaled by
``lr / n_tokens`` and summed over the tokens sampled in that state. ``entflow estimators`` runs it.

It lives with the trainer because it takes an optimisation step through
:func:`entflow.methods.objective.policy_loss`, the one SGD step of every estimator audit
(:func:`entflow.trainer.estimator_scores.entropy_change_of_step`); ``analysis/`` computes numbers
about runs and imports only ``core``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from entflow.core.batch import TokenBatch
from entflow.core.estimators import ESTIMATORS, entropy_change
from entflow.core.token_stats import entropy_from_logits, token_stats
from entflow.methods.objective import policy_loss
from entflow.trainer.estimator_scores import entropy_change_of_step


@dataclass
class TabularResult:
    """``true_dH`` [S]; ``predicted[name]`` [S] (first-order prediction per state)."""

    true_dH: torch.Tensor
    predicted: dict[str, torch.Tensor]
    lr: float
    n_tokens: int


def tabular_experiment(
    states: int = 256,
    vocab: int = 32,
    samples_per_state: int = 8,
    lr: float = 5.0,
    seed: int = 0,
    logit_scale: float = 2.0,
) -> TabularResult:
    """One SGD step on a random tabular softmax policy (float64), true vs predicted ΔH per state."""
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(states, vocab, generator=g, dtype=torch.float64) * logit_scale).requires_grad_(True)
    with torch.no_grad():
        probs = torch.softmax(logits, -1)
        ids = torch.multinomial(probs, samples_per_state, replacement=True, generator=g)  # [S, K]
    rows = logits.unsqueeze(1).expand(states, samples_per_state, vocab)
    st = token_stats(rows, ids)
    adv = torch.randn(states, samples_per_state, generator=g, dtype=torch.float64)
    batch = TokenBatch(
        logp=st.logp,
        old_logp=st.logp.detach(),
        advantages=adv,
        mask=torch.ones(states, samples_per_state),
        old_entropy=st.entropy.detach(),
        sum_p2=st.sum_p2.detach(),
        sum_p2_logp=st.sum_p2_logp.detach(),
    )
    loss = policy_loss(batch).loss  # token-mean over n = S·K tokens
    true_dH = entropy_change_of_step([logits], loss, lambda: entropy_from_logits(logits), lr)
    n = states * samples_per_state
    predicted = {name: entropy_change(name, batch).sum(-1) * (lr / n) for name in ESTIMATORS}
    return TabularResult(true_dH=true_dH, predicted=predicted, lr=lr, n_tokens=n)
