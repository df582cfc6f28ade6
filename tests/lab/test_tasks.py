"""Lab tasks: verifiers, traces, validation split (docs/design.md §10)."""

import random

import pytest

from entflow.errors import ParameterError, UnknownMethodError
from entflow.lab.tasks import TASKS, CountdownAnswer, Problem, get_task, parse_expression

CD = Problem("3 5 7>15:", CountdownAnswer((3, 5, 7), 15))


@pytest.mark.parametrize(
    "response",
    ["3*5", "5*3", "3+5+7", "7+5+3", "(3+7)+5", "3*5 ", " 3 * 5", "(3*5)", "7+3+5"],
)
def test_countdown_accepts_correct(response):
    assert get_task("countdown").reward(CD, response) == 1.0


@pytest.mark.parametrize(
    "response",
    [
        "15",  # the target itself is not one of the numbers
        "5+5+5",  # 5 used three times
        "3*5*1",  # 1 is not given
        "7*3-6",  # 6 is not given
        "3*5+7",  # wrong value (22)
        "3+5*7",  # precedence: 38, not 56 and not 15
        "-3+7+5+6",
        "03*5",  # leading zero
        "3**5",
        "3*",
        "(3*5",
        "3*5)",
        "",
        "   ",
        "abc",
        "3*5\ufffd",
        ">:=",
        "3" * 200,
        "(" * 100 + "3" + ")" * 100,
    ],
)
def test_countdown_rejects_wrong_and_garbage(response):
    assert get_task("countdown").reward(CD, response) == 0.0


def test_countdown_reward_never_raises_on_non_strings():
    task = get_task("countdown")
    assert task.reward(CD, None) == 0.0  # type: ignore[arg-type]
    assert task.reward(CD, b"3*5") == 0.0  # type: ignore[arg-type]


def test_parse_expression_precedence_and_literals():
    assert parse_expression("2+3*4") == (14, [2, 3, 4])
    assert parse_expression("(2+3)*4") == (20, [2, 3, 4])
    assert parse_expression("9-4-3") == (2, [9, 4, 3])  # left-associative
    assert parse_expression("9-(4-3)") == (8, [9, 4, 3])
    with pytest.raises(ValueError):
        parse_expression("2+")


def test_arithmetic_verifier():
    task = get_task("arithmetic")
    p = Problem("47+38=", 85)
    assert task.reward(p, "85") == 1.0
    assert task.reward(p, " 85 ") == 1.0
    for bad in ["84", "085", "8 5", "", "85=", "-85", "\ufffd", "9" * 100]:
        assert task.reward(p, bad) == 0.0, bad
    neg = Problem("3-9=", -6)
    assert task.reward(neg, "-6") == 1.0 and task.reward(neg, "6") == 0.0


@pytest.mark.parametrize("name", sorted(TASKS))
def test_problems_fit_the_char_level_format(name):
    task = get_task(name)
    rng = random.Random(0)
    for p in task.sample_problems(200, rng):
        assert len(p.prompt) <= 20
        assert set(p.prompt) <= set(task.alphabet)
        for t in task.solution_traces(p, rng, 4):
            assert set(t) <= set(task.alphabet)
            assert len(t) + 1 <= task.max_response_len  # room for <eos>
    assert task.max_response_len <= 16


@pytest.mark.parametrize("name", sorted(TASKS))
def test_solution_traces_are_all_correct(name):
    task = get_task(name)
    rng = random.Random(1)
    for p in task.sample_problems(100, rng) + task.validation_set():
        traces = task.solution_traces(p, rng, 6)
        assert len(traces) == 6
        assert all(task.reward(p, t) == 1.0 for t in traces), (p, traces)


def test_countdown_traces_are_diverse():
    task = get_task("countdown")
    rng = random.Random(2)
    problems = task.sample_problems(100, rng)
    distinct = []
    for p in problems:
        n_sol = len(task.solutions(p))
        assert n_sol >= task.min_solutions  # several correct answers per prompt
        traces = task.solution_traces(p, rng, 8)
        assert len(set(traces)) == min(8, n_sol)  # no repeats until every solution was used
        distinct.append(len(set(traces)))
    assert sum(distinct) / len(distinct) >= 4
    # traces are drawn at random: two draws for the same problem differ in order or content
    p = problems[0]
    draws = {tuple(task.solution_traces(p, random.Random(s), 3)) for s in range(10)}
    assert len(draws) > 1


@pytest.mark.parametrize("name", sorted(TASKS))
def test_validation_set_fixed_and_held_out(name):
    a, b = get_task(name), get_task(name)
    va = a.validation_set()
    assert len(va) == 64 and len({p.prompt for p in va}) == 64
    assert va == a.validation_set() == b.validation_set()
    random.seed(123)  # the global RNG must not matter
    assert get_task(name).validation_set() == va
    held = {p.prompt for p in va}
    train = a.sample_problems(3000, random.Random(0))
    assert not held & {p.prompt for p in train}
    assert all(a.is_validation(p) for p in va) and not any(a.is_validation(p) for p in train[:50])


def test_sampling_is_seeded():
    task = get_task("countdown")
    assert task.sample_problems(20, random.Random(5)) == task.sample_problems(20, random.Random(5))
    assert task.sample_problems(20, random.Random(5)) != task.sample_problems(20, random.Random(6))
    assert task.sample_problems(0, random.Random(5)) == []


def test_countdown_params_change_the_task():
    t4 = get_task("countdown", n_numbers=4)
    p = t4.sample_problems(1, random.Random(0))[0]
    assert len(p.answer.numbers) == 4 and t4.max_response_len <= 16
    assert t4.validation_set() != get_task("countdown").validation_set()


def test_get_task_errors():
    with pytest.raises(UnknownMethodError, match="nope"):
        get_task("nope")
    with pytest.raises(ParameterError, match="n_numbers"):
        get_task("countdown", n_numbers=9)
    with pytest.raises(ParameterError):
        get_task("countdown", bogus=1)
    with pytest.raises(ParameterError):
        get_task("countdown").sample_problems(-1, random.Random(0))


def test_agrees_with_reasoning_gym_scorer_when_all_numbers_are_used():
    """Our verifier is reasoning-gym's countdown rule minus 'use every number': on responses that
    use every number, both must agree."""
    rg = pytest.importorskip("reasoning_gym.games.countdown")
    scorer = rg.CountdownDataset(rg.CountdownConfig(size=1, seed=0))
    task = get_task("countdown")
    rng = random.Random(3)
    checked = 0
    for p in task.sample_problems(30, rng):
        numbers, target = p.answer
        entry = {"metadata": {"numbers": list(numbers), "target": target}}
        full = [s for s in task.solutions(p) if len(parse_expression(s)[1]) == len(numbers)]
        wrong = list(task.solutions(Problem(p.prompt, CountdownAnswer(numbers, target + 1))))[:1]
        for s in full[:2] + [f for f in wrong if len(parse_expression(f)[1]) == len(numbers)]:
            ours = task.reward(p, s)
            theirs = scorer.score_answer(s, entry)
            assert ours == (1.0 if theirs == 1.0 else 0.0), (p, s, theirs)
            checked += 1
    assert checked >= 20


def test_wrong_traces_are_well_formed_and_wrong():
    import random

    from entflow.lab.tasks import get_task, parse_expression

    rng = random.Random(0)
    task = get_task("countdown")
    for p in task.sample_problems(20, rng):
        for t in task.wrong_traces(p, rng, 5):
            value, used = parse_expression(t)
            assert value != p.answer.target and task.reward(p, t) == 0.0
            pool = list(p.answer.numbers)
            for u in used:
                pool.remove(u)  # only the prompt's numbers, each at most once
    arith = get_task("arithmetic")
    for p in arith.sample_problems(20, rng):
        assert all(arith.reward(p, t) == 0.0 and t.lstrip("-").isdigit() for t in arith.wrong_traces(p, rng, 5))
