"""entflow.hf.rewards: math-verify, exact match and format rewards against hand-written cases, TRL's
calling convention, and the guard (a reward that raises or times out scores 0 and is counted)."""

from __future__ import annotations

import time

import pytest

from entflow.errors import ConfigError, UnknownMethodError
from entflow.hf.rewards import (
    GuardedReward,
    exact_match_reward,
    format_reward,
    get_reward,
    math_verify_reward,
)

# (completion, gold, expected math_verify reward)
MATH_CASES = [
    ("So the total is \\boxed{28080}.", "28080", 1.0),  # boxed
    ("He earns 2340 a month, so 2340 * 12 = 28080", "28080", 1.0),  # plain last number
    ("The answer is 28,080.", "28080", 1.0),  # thousands separator
    ("Half of them: \\boxed{\\frac{1}{2}}", "1/2", 1.0),  # LaTeX fraction vs plain fraction
    ("x = 0.5", "\\frac{1}{2}", 1.0),  # decimal vs LaTeX fraction
    ("$\\frac{6}{8}$", "3/4", 1.0),  # unreduced LaTeX fraction
    ("\\boxed{\\sqrt{4}}", "2", 1.0),  # LaTeX expression
    ("First \\boxed{3}, and later I count 5 apples", "3", 1.0),  # boxed wins over the last number
    ("The answer is \\boxed{28081}.", "28080", 0.0),  # wrong
    ("12 + 5 = 17", "16", 0.0),  # wrong last number
    ("I do not know.", "28080", 0.0),  # unparseable
    ("", "7", 0.0),  # empty
]


@pytest.mark.parametrize(("completion", "gold", "expected"), MATH_CASES)
def test_math_verify_reward_hand_cases(completion, gold, expected):
    assert math_verify_reward([completion], answer=[gold]) == [expected]


def test_math_verify_reward_batch_and_trl_kwargs():
    """TRL calls reward(prompts=..., completions=..., completion_ids=..., **dataset columns)."""
    comps = [c for c, _, _ in MATH_CASES]
    golds = [g for _, g, _ in MATH_CASES]
    out = math_verify_reward(
        prompts=["q"] * len(comps),
        completions=comps,
        completion_ids=[[1]] * len(comps),
        answer=golds,
        trainer_state=None,
    )
    assert out == [e for _, _, e in MATH_CASES]
    # conversational completions: the last message's content is scored
    conv = [[{"role": "assistant", "content": "\\boxed{7}"}], [{"role": "assistant", "content": "8"}]]
    assert math_verify_reward(conv, answer=["7", "7"]) == [1.0, 0.0]


def test_math_verify_reward_needs_answer_column():
    with pytest.raises(ConfigError, match="answer"):
        math_verify_reward(["\\boxed{1}"])
    with pytest.raises(ConfigError, match="answer"):
        math_verify_reward(["1", "2"], answer=["1"])


def test_exact_match_and_format():
    cases = [  # (completion, gold, reward)
        (" 25 ", "25", 1.0),
        ("3 + 5 = 8", "8", 1.0),  # the last number
        ("So 1,000 in total.", "1000", 1.0),  # thousands separator
        ("25.0", "25", 1.0),  # equal as numbers
        ("The sum of (2 + 9) is", "11", 0.0),  # restating the question is not an answer (math-verify: 1)
        ("\\boxed{-3} and then 4", "-3", 1.0),  # boxed wins over a later number
        ("3", " -3", 0.0),
        ("", "7", 0.0),
        ("blue", "blue", 1.0),  # no number: the whole text
    ]
    assert exact_match_reward([c for c, _, _ in cases], answer=[g for _, g, _ in cases]) == [r for _, _, r in cases]
    assert math_verify_reward(["The sum of (2 + 9) is"], answer=["11"]) == [1.0]  # why exact_match exists
    cases = {
        "so \\boxed{12}": 1.0,
        "\\boxed{\\frac{1}{2}} done": 1.0,  # nested braces
        "\\boxed{}": 0.0,  # empty
        "\\boxed{12": 0.0,  # unbalanced
        "the answer is 12": 0.0,
    }
    assert format_reward(list(cases)) == list(cases.values())


def test_weighted_sum_spec():
    r = get_reward("math_verify+0.1*format")
    assert r(["\\boxed{4}", "4", "\\boxed{5}"], answer=["4", "4", "4"]) == pytest.approx([1.1, 1.0, 0.1])
    with pytest.raises(UnknownMethodError, match="nonsense"):
        get_reward("math_verify+nonsense")
    with pytest.raises(ConfigError, match="weight"):
        get_reward("x*format")


def test_guard_counts_errors_and_timeouts():
    def flaky(completions, **kwargs):
        text = completions[0]
        if text == "boom":
            raise RuntimeError("parser crashed")
        if text == "slow":
            time.sleep(2.0)
        if text == "nan":
            return [float("nan")]
        return [1.0]

    guard = GuardedReward(flaky, timeout_s=0.2)
    t0 = time.perf_counter()
    out = guard(["ok", "boom", "slow", "nan", "ok"], answer=list("abcde"))
    assert time.perf_counter() - t0 < 1.5  # the slow call was cut at 0.2 s
    assert out == [1.0, 0.0, 0.0, 0.0, 1.0]
    assert guard.pop_counts() == {"calls": 5, "errors": 2, "timeouts": 1}
    assert guard.pop_counts() == {"calls": 0, "errors": 0, "timeouts": 0}
    assert "RuntimeError" in guard.last_error or "NaN" in guard.last_error


def test_guard_slices_columns_per_completion():
    seen = []

    def spy(completions, answer, prompts, extra):
        seen.append((completions, answer, prompts, extra))
        return [0.5]

    g = GuardedReward(spy)
    assert g(["a", "b"], answer=["1", "2"], prompts=["p", "q"], extra="same") == [0.5, 0.5]
    assert seen == [(["a"], ["1"], ["p"], "same"), (["b"], ["2"], ["q"], "same")]
    assert g.__name__ == "spy"
