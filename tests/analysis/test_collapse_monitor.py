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


def test_every_caller_takes_the_verdict_settings_from_analysis_collapse():
    """One home for the defaults 0.15 / 0.5 / 0.1: analyze_series, the monitor, the TRL callback and
    `entflow analyze` all default to analysis/collapse.py's constants (EARLY_FRAC is analysis/law.py's,
    which the early prediction of the law uses). Without TRL (a core or [real] install) the TRL
    callback's part is left out."""
    import importlib.util
    import inspect

    from entflow.analysis import collapse, law
    from entflow.cli.main import build_parser

    home = {
        "early_frac": collapse.EARLY_FRAC,
        "retention_threshold": collapse.RETENTION_THRESHOLD,
        "stall_ratio": collapse.STALL_RATIO,
    }
    assert home == {"early_frac": 0.15, "retention_threshold": 0.5, "stall_ratio": 0.1}
    assert collapse.EARLY_FRAC is law.EARLY_FRAC
    assert inspect.signature(law.early_prediction).parameters["frac"].default is law.EARLY_FRAC
    callers = [collapse.analyze_series, CollapseMonitor.__init__]
    if importlib.util.find_spec("trl") is not None:
        from entflow.integrations.trl.callbacks import EntropyMonitorCallback

        assert {k: EntropyMonitorCallback().monitor.options[k] for k in home} == home
    for fn in callers:
        params = inspect.signature(fn).parameters
        assert {k: params[k].default for k in home} == home, fn.__qualname__
    assert {k: CollapseMonitor().options[k] for k in home} == home
    args = build_parser(only="analyze").parse_args(["analyze", "some.jsonl"])
    assert (args.early_frac, args.retention_threshold) == (collapse.EARLY_FRAC, collapse.RETENTION_THRESHOLD)
