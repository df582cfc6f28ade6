"""The lab's validation (lab/setup.py): the hard split is evaluated by one function, under the
named stream of entflow.trainer.seeds; checked against lab.pretrain.evaluate called by hand with
the seed written out."""

from __future__ import annotations

import pytest

from entflow.lab.config import build_config
from entflow.lab.pretrain import evaluate, load_policy
from entflow.lab.setup import evaluate_hard_set, validate_policy
from entflow.lab.tasks import CountdownRoutesTask, get_task
from entflow.trainer.seeds import REGIME_HARD_SET, step_seed

ROUTES_PARAMS = {"validation_size": 6, "hard_size": 5}


def length_reward(self, problem, response: str) -> float:
    """Stand-in reward (the micro policy solves nothing): 1 when the response's length is a multiple of 3."""
    return 1.0 if len(response) % 3 == 0 else 0.0


def test_hard_split_metrics_draw_from_their_named_streams(micro_policy, monkeypatch):
    monkeypatch.setattr(CountdownRoutesTask, "reward", length_reward)
    cfg = build_config(
        {"policy_path": micro_policy, "task": "countdown_routes", "task_params": ROUTES_PARAMS, "eval_k": 4, "seed": 7}
    )
    model, tok = load_policy(micro_policy)
    task = get_task("countdown_routes", **ROUTES_PARAMS)
    step = 3
    lab = evaluate(model, tok, task, task.hard_set(), k=4, temperature=cfg.temperature, seed=step_seed(7 + 3, step))
    regime = evaluate(model, tok, task, task.hard_set(), k=4, temperature=cfg.temperature, seed=step_seed(7 + 2, step))
    assert validate_policy(model, tok, task, cfg, step)["val/hard_acc"] == lab["acc"]
    assert evaluate_hard_set(model, tok, task, cfg, step) == lab
    assert evaluate_hard_set(model, tok, task, cfg, step, stream=REGIME_HARD_SET) == regime
    assert lab["entropy"] != pytest.approx(regime["entropy"], rel=1e-9)  # the two streams draw differently
