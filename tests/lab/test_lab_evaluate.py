"""The lab's evaluation (lab/evaluate.py): a policy's held-out metrics (their ranges, the seed, a
perfect policy counted as perfect); the run's validation, whose hard split is evaluated by one
function under the named stream of entflow.trainer.seeds, checked against ``evaluate`` called by
hand with the seed written out."""

from __future__ import annotations

import math

import pytest
import torch

import entflow.lab.evaluate as lab_evaluate
from entflow.errors import ParameterError
from entflow.lab.config import build_config
from entflow.lab.evaluate import evaluate, evaluate_hard_set, validate_policy
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer, load_policy
from entflow.lab.tasks import CountdownRoutesTask, get_task
from entflow.trainer.rollout import Generation
from entflow.trainer.seeds import REGIME_HARD_SET, step_seed

TINY = PolicyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, max_positions=32)

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


def test_evaluate_ranges_and_seed():
    task = get_task("countdown")
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, TINY, seed=0)
    model.train()
    probs = task.validation_set()[:8]
    r = evaluate(model, tok, task, probs, k=3, greedy=True, seed=0)
    assert model.training  # mode restored
    assert 0 <= r["acc"] <= r["pass@k"] <= 1
    assert 0 <= r["acc_greedy"] <= 1
    assert all(isinstance(v, (int, float)) for v in r.values())
    assert 0 < r["entropy"] <= math.log(len(tok)) + 1e-5  # random init: near uniform
    assert 1 <= r["response_len"] <= task.max_response_len
    assert 0 <= r["distinct_correct"] <= 3
    assert evaluate(model, tok, task, probs, k=3, seed=0)["entropy"] == r["entropy"]
    assert evaluate(model, tok, task, probs, k=3, seed=0)["acc_greedy"] == r["acc_greedy"]  # always computed
    with pytest.raises(ParameterError):
        evaluate(model, tok, task, probs, k=0)


def test_evaluate_counts_a_perfect_policy_as_perfect(monkeypatch):
    """Feed evaluate a policy that always answers a known solution: acc = pass@k = 1."""
    task = get_task("countdown")
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, TINY, seed=0)
    probs = task.validation_set()[:4]
    sols = [task.solutions(p)[0] for p in probs]

    def fake(model, tok, prompts, n, max_new_tokens, *, greedy=False, **settings):
        texts = [sols[[p.prompt for p in probs].index(q)] for q in prompts for _ in range(n)]
        ids = torch.full((len(texts), 3), tok.pad_token_id, dtype=torch.long)
        ids[:, 0] = tok.eos_token_id
        mask = torch.zeros(len(texts), 3)
        mask[:, 0] = 1.0
        return [Generation(ids, mask, ids, mask, texts, None, torch.zeros(len(texts), 3))]

    monkeypatch.setattr(lab_evaluate, "generate_in_batches", fake)
    r = evaluate(model, tok, task, probs, k=2, greedy=True)
    assert r["acc"] == r["pass@k"] == r["acc_greedy"] == 1.0 and r["distinct_correct"] == 1.0
