"""CollapseMonitor (analysis/collapse_monitor.py) on a collapsing history: the logged values are
those of analyze_log on the same records, the warning fires once, and its suggestion is written
for the trainer whose keys the history carries (TRL's config fields, verl's Hydra overrides)."""

from __future__ import annotations

import math

import pytest

from entflow.analysis.collapse import analyze_log
from entflow.analysis.collapse_monitor import CollapseMonitor
from entflow.analysis.log_readers import log_from_records


def history(entropy_key: str, reward_key: str, n: int = 80) -> list[dict]:
    """Entropy decays 1.5 → 0.1 while the reward rises and stalls at 0.5 (a collapse)."""
    return [
        {
            "step": s,
            entropy_key: 0.1 + 1.4 * math.exp(-s / 8),
            reward_key: 0.5 - 0.1 * math.exp(0.1 + 1.4 * math.exp(-s / 8)) + 0.1 * math.exp(0.1),
        }
        for s in range(1, n + 1)
    ]


@pytest.mark.parametrize(
    ("entropy_key", "reward_key", "how"),
    [
        ("entropy", "reward", "EntflowGRPOConfig(entflow_method='kl_cov'"),
        ("actor/entropy", "critic/score/mean", "+actor_rollout_ref.actor.policy_loss.method=kl_cov "),
    ],
    ids=["trl", "verl"],
)
def test_monitor_values_and_one_warning_for_the_trainer(entropy_key, reward_key, how):
    records = history(entropy_key, reward_key)
    mon = CollapseMonitor()
    values, message = mon.check(log_from_records(records))
    _, ref = analyze_log(log_from_records(records))
    assert ref.collapse["verdict"] == "collapsed"
    assert values["entflow/law_ceiling"] == pytest.approx(ref.ceiling, rel=1e-12)
    assert values["entflow/entropy_retention"] == pytest.approx(ref.entropy["retention"], rel=1e-12)
    assert message is not None and message.startswith("entflow: entropy collapse at step 80")
    assert how in message
    assert mon.check(log_from_records(records))[1] is None  # once
