"""countdown_routes (held-out route-requiring split) and the route-biased warm start option
(``PretrainConfig.trace_exclude``), docs/regime.md. Route requirements are checked against an
independent brute force over every +/- expression (Python's own arithmetic), not the task's solver."""

from __future__ import annotations

import hashlib
import itertools
import json
import random

import pytest

from entflow.errors import ParameterError
from entflow.lab.pretrain import FORMAT_VERSION, PretrainConfig, _route_biased_batch
from entflow.lab.tasks import get_task


def _reachable_without_mul(numbers: tuple[int, ...], target: int) -> bool:
    """Brute force: any ordered choice of ≥ 2 numbers joined by + and − (no '*': parentheses only
    flip signs, and a flipped sign is another +/− pattern over the same numbers) equals target?"""
    for k in range(2, len(numbers) + 1):
        for perm in itertools.permutations(numbers, k):
            for ops in itertools.product("+-", repeat=k - 1):
                expr = str(perm[0]) + "".join(o + str(n) for o, n in zip(ops, perm[1:], strict=True))
                if eval(expr) == target:  # digits and +/- only, built here
                    return True
    return False


def test_hard_split_requires_the_route_and_is_held_out():
    task = get_task("countdown_routes", hard_size=48, validation_size=48)
    hard, val = task.hard_set(), task.validation_set()
    assert len(hard) == 48 and len({p.prompt for p in hard}) == 48
    assert not {p.prompt for p in hard} & {p.prompt for p in val}
    for p in hard:
        assert not _reachable_without_mul(p.answer.numbers, p.answer.target), p.prompt
        assert all("*" in s for s in task.solutions(p))
    # the validation split is the training distribution: it has problems with a +/- solution
    assert any(_reachable_without_mul(p.answer.numbers, p.answer.target) for p in val)
    train = task.sample_problems(400, random.Random(3))
    held = {p.prompt for p in hard} | {p.prompt for p in val}
    assert not {p.prompt for p in train} & held
    # requires_route agrees with the brute force on training problems of both kinds
    for p in train[:100]:
        assert task.requires_route(p) == (not _reachable_without_mul(p.answer.numbers, p.answer.target))


def test_hard_split_is_fixed_for_given_parameters():
    a = [p.prompt for p in get_task("countdown_routes", hard_size=16).hard_set()]
    b = [p.prompt for p in get_task("countdown_routes", hard_size=16).hard_set()]
    assert a == b


@pytest.mark.parametrize(("kwargs", "field"), [({"route": "/"}, "route"), ({"hard_size": 0}, "hard_size")])
def test_bad_task_parameters_name_the_field(kwargs, field):
    with pytest.raises(ParameterError, match=field):
        get_task("countdown_routes", **kwargs)


def test_default_cache_keys_are_unchanged():
    """The new fields enter the key only when set: at their defaults the key is the one computed
    the old way (every field but ``threads``), so cached demo warm starts stay valid."""
    for cfg in (PretrainConfig(), PretrainConfig(task="arithmetic", label_smoothing=0.1)):
        old = {k: v for k, v in cfg.to_dict().items() if k not in ("threads", "trace_exclude", "trace_exclude_frac")}
        blob = json.dumps({"format": FORMAT_VERSION, "config": old}, sort_keys=True, default=str)
        assert cfg.key() == hashlib.sha256(blob.encode()).hexdigest()[:12]
    base = PretrainConfig(task="countdown_routes")
    assert PretrainConfig(task="countdown_routes", trace_exclude="*").key() != base.key()
    assert (
        PretrainConfig(task="countdown_routes", trace_exclude="*", trace_exclude_frac=0.5).key()
        != PretrainConfig(task="countdown_routes", trace_exclude="*").key()
    )


def test_route_biased_batch_excludes_the_route():
    task = get_task("countdown_routes", hard_size=8, validation_size=8)
    cfg = PretrainConfig(task="countdown_routes", trace_exclude="*", batch_size=64)
    problems, traces = _route_biased_batch(task, cfg, random.Random(0))
    assert len(problems) == len(traces) == 64
    assert all("*" not in t for t in traces)
    assert all(task.reward(p, t) == 1.0 for p, t in zip(problems, traces, strict=True))
    assert not any(task.requires_route(p) for p in problems)  # problems without a +/- answer skipped
    # frac 0: the exclusion never applies, so "*" traces (and route-requiring problems) appear
    cfg0 = PretrainConfig(task="countdown_routes", trace_exclude="*", trace_exclude_frac=0.0, batch_size=64)
    problems0, traces0 = _route_biased_batch(task, cfg0, random.Random(0))
    assert any("*" in t for t in traces0) and any(task.requires_route(p) for p in problems0)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"task": "countdown_routes", "trace_exclude_frac": 1.5}, "trace_exclude_frac"),
        ({"task": "arithmetic"}, "trace_exclude"),  # a task that does not list its solutions
    ],
)
def test_bad_pretrain_options_name_the_field(kwargs, field):
    with pytest.raises(ParameterError, match=field):
        PretrainConfig(trace_exclude="*", **kwargs).validate()
