"""A countdown verifier as a verl reward function (``reward.custom_reward_function.path``).

``ground_truth`` is ``"[numbers, target]"`` (JSON, as ``cpu_prepare.py`` writes it). Score: 1 for
an expression that uses only the given numbers (each at most once) and equals the target (the lab's
countdown rule, entflow.lab.tasks.CountdownTask.reward); below that, format credit so that a tiny
untrained model sees different rewards within a group: 0.2 for a well-formed expression of the given
numbers, 0.1 for any well-formed expression, 0 otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from entflow.lab.tasks import parse_expression, uses_given_numbers


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None, **_: Any) -> float:
    numbers, target = json.loads(ground_truth)
    text = solution_str.strip()
    if not text or len(text) > 64:
        return 0.0
    try:
        value, used = parse_expression(text)
    except ValueError:
        return 0.0
    if not uses_given_numbers(used, numbers):
        return 0.1
    return 1.0 if value == target else 0.2
