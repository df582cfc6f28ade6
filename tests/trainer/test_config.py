"""The training config documents itself: every key of TrainConfig, the lab's LabConfig and the
real-model RealTrainConfig carries its help (and its allowed range, where it has one) as dataclass
field metadata, which ``entflow train --help`` prints."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import pytest

from entflow.core.rules import Check, at_least
from entflow.errors import ConfigError
from entflow.hf.evaluate import SamplingConfig
from entflow.hf.setup import RealTrainConfig
from entflow.lab.config import LabConfig
from entflow.lab.policy import PolicyConfig
from entflow.lab.pretrain import PretrainConfig
from entflow.trainer.config import TrainConfig, build_config, describe_keys, key_checks, key_info, setting

CLASSES = [TrainConfig, LabConfig, RealTrainConfig]


def test_every_trainer_key_carries_its_help_as_field_metadata():
    for f in dataclasses.fields(TrainConfig):
        assert isinstance(f.metadata.get("help"), str) and len(f.metadata["help"]) > 10, f.name
        assert f.metadata.get("check") is None or isinstance(f.metadata["check"], Check), f.name


def test_every_real_model_key_carries_its_help_as_field_metadata():
    """The keys RealTrainConfig adds have their own help; a key whose default it only changes keeps
    TrainConfig's (key_info walks the classes)."""
    own = {f.name for f in dataclasses.fields(TrainConfig)}
    for f in dataclasses.fields(RealTrainConfig):
        if f.name not in own:
            assert len(f.metadata.get("help", "")) > 10, f.name
    assert {"lora_rank", "lora_alpha", "model", "val_size"} <= {f.name for f in dataclasses.fields(RealTrainConfig)}


@pytest.mark.parametrize("cls", CLASSES, ids=[c.__name__ for c in CLASSES])
def test_every_key_has_help(cls):
    missing = [f.name for f in dataclasses.fields(cls) if not key_info(cls, f.name)[0]]
    assert missing == []


def test_a_subclass_that_changes_a_default_keeps_the_help():
    assert RealTrainConfig.__dataclass_fields__["steps"].metadata == {}  # redeclared: steps: int = 10
    assert key_info(RealTrainConfig, "steps") == key_info(TrainConfig, "steps")
    assert key_info(TrainConfig, "steps")[1] == ">= 1"
    assert key_info(TrainConfig, "no_such_key") == ("", None)


@pytest.mark.parametrize(
    ("key", "bad"),
    [("steps", 0), ("group_size", 1), ("temperature", 0.0), ("lr", 0.0), ("clip_low", 1.5), ("dual_clip", 1.0)],
)
def test_a_documented_range_is_the_one_validate_enforces(key, bad):
    """The range in the metadata is what validate() refuses outside of: one bad value per key."""
    assert key_info(TrainConfig, key)[1]
    with pytest.raises(ConfigError) as e:
        build_config({key: bad}, cls=LabConfig)
    assert e.value.key == key


def test_describe_keys_prints_the_default_the_help_and_the_range():
    lines = describe_keys(TrainConfig, ["grad_clip", "task_params", "audit"], width=200)
    assert lines == [
        "  grad_clip=1.0",
        "      clip the gradient norm to this value; null: no clipping (allowed: > 0 or null)",
        "  task_params={}",
        "      parameters of the task (or the data), e.g. {validation_size: 32}",
        "  audit=true",
        "      measure the true entropy change of a step against every estimator",
    ]


def test_a_method_that_needs_expert_rows_is_refused_by_name():
    """The generic trainer's rollout supplies no expert rows: CHORD is refused up front, naming the key."""
    with pytest.raises(ConfigError, match="expert rows") as e:
        LabConfig(method="chord").validate()
    assert "'method'" in str(e.value)
    LabConfig(method="positive_nll").validate()  # reads rewards, which the trainer has: accepted


# ---------------------------------------------------------------------------------------------
# A key's rule is one Check: the words --help prints and the test validate() makes. Below, the words
# are read independently of the code (a small reader of ">= 1", "> 0", "in [0, 1)", "a | b",
# "X or null", "A and B", bounds made of other keys) and held against the check on values at and
# around every bound, on every config class that carries rules; words the reader cannot read come
# with examples. A rule whose words and check disagree fails, whichever of the two was changed.

RULED = [TrainConfig, LabConfig, RealTrainConfig, PretrainConfig, PolicyConfig, SamplingConfig]

# rules in words the reader below does not parse: (value, other keys of the config, allowed)
EXAMPLES: dict[str, list[tuple[Any, dict[str, Any], bool]]] = {
    "a number in [0, 1], or inf for no clipping below": [
        *[(0, {}, True), (1, {}, True), (1.5, {}, False), (math.inf, {}, True)],
        *[(-0.1, {}, False), (math.nan, {}, False), (True, {}, False)],
    ],
    "a number in [0, inf], inf for no clipping above": [
        *[(0, {}, True), (5.0, {}, True), (math.inf, {}, True), (-0.1, {}, False), ("0.2", {}, False)],
    ],
    "a number > 1, or None (null in a config) for off": [(None, {}, True), (1.0, {}, False), (1.5, {}, True)],
    "null or {kind: temperature | quantize, value: > 0}": [
        (None, {}, True),
        ({"kind": "temperature", "value": 1.1}, {}, True),
        ({"kind": "quantize", "value": 0.5}, {}, True),
        ({"kind": "noise", "value": 1.1}, {}, False),
        ({"kind": "temperature", "value": 0}, {}, False),
        ({"kind": "temperature"}, {}, False),
    ],
    "integers in [1, coverage_n]": [
        *[([1, 4], {"coverage_n": 4}, True), ([0], {"coverage_n": 4}, False)],
        *[([5], {"coverage_n": 4}, False), ([2.0], {"coverage_n": 4}, False)],
    ],
    "a list of [question, answer] string pairs": [
        *[([["1+1", "2"]], {}, True), ([["1+1"]], {}, False), ("1+1=2", {}, False), ([["1+1", 2]], {}, False)],
    ],
    "a string of characters": [("*", {}, True), ("", {}, True), (3, {}, False)],
    ">= 1 and a divisor of hidden_size leaving an even head dimension (RoPE)": [
        *[(0, {}, False), (4, {"hidden_size": 128}, True), (3, {"hidden_size": 128}, False)],
        *[(128, {"hidden_size": 128}, False), (64, {"hidden_size": 128}, True)],
    ],
}


def _bound(expr: str, owner: Any) -> float:
    """A bound as the words write it: a number (``inf``) or keys of the config multiplied."""
    try:
        return float(expr)
    except ValueError:
        return math.prod(getattr(owner, key) for key in expr.split(" * "))


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(v)


def words_allow(words: str, value: Any, owner: Any) -> bool | None:
    """Whether the rule in ``words`` allows ``value``, read from the words alone (None: not read)."""
    if words.endswith(" or null"):
        inner = words_allow(words.removesuffix(" or null"), value, owner)
        return True if value is None else inner
    if " and " in words:
        parts = [words_allow(w, value, owner) for w in words.split(" and ")]
        return None if None in parts else all(parts)
    if m := re.fullmatch(r"(>=|>|<=) (.+)", words):
        op, bound = m[1], _bound(m[2], owner)
        if not _number(value):
            return False
        return {">=": value >= bound, ">": bound < value < math.inf, "<=": value <= bound}[op]
    if m := re.fullmatch(r"in ([\[(])(\S+), (\S+)([\])])", words):
        lo, hi = float(m[2]), float(m[3])
        if not _number(value):
            return False
        return (lo < value if m[1] == "(" else lo <= value) and (value < hi if m[4] == ")" else value <= hi)
    if re.fullmatch(r"[\w-]+( \| [\w-]+)+", words):
        return value in words.split(" | ")
    return None


def probes(words: str, owner: Any) -> list[Any]:
    """Values at and around every number and key bound the words name, and values of other kinds."""
    out: list[Any] = [None, True, "x", math.nan, -1, 0, 1, 2]
    for expr in re.findall(r"(?:>=|>|<=) ([\w. *]+?)(?= and |$| or )", words) + re.findall(
        r"[\[(]([\w.]+), ([\w.]+)[\])]", words
    ):
        for e in expr if isinstance(expr, tuple) else (expr,):
            b = _bound(e, owner)
            if math.isfinite(b):
                out += [b - 1, b - 0.5, b - 1e-9, b, b + 1e-9, b + 0.5, b + 1, int(b), int(b) + 1, int(b) - 1]
            else:
                out.append(b)
    return out + words.split(" | ") + ["no-such-choice"]


def disagreements(cls: type) -> list[str]:
    """Every (key, value) on which a rule of ``cls``'s keys and its words disagree."""
    found = []
    owner = cls()
    for key, check in key_checks(cls).items():
        words = check.describe.removesuffix(" or null")
        if words in EXAMPLES or check.describe in EXAMPLES:
            cases = EXAMPLES.get(words) or EXAMPLES[check.describe]
            if check.describe.endswith(" or null"):
                cases = [*cases, (None, {}, True)]
            for value, others, allowed in cases:
                if check.allows(value, dataclasses.replace(owner, **others)) != allowed:
                    found.append(f"{cls.__name__}.{key}: {check.describe!r} vs the check on {value!r}")
            continue
        said = [(v, words_allow(check.describe, v, owner)) for v in probes(check.describe, owner)]
        if any(allowed is None for _, allowed in said):
            found.append(f"{cls.__name__}.{key}: words the test cannot read, {check.describe!r}: give examples")
            continue
        found += [
            f"{cls.__name__}.{key}: {check.describe!r} says {allowed} for {v!r}, the check {not allowed}"
            for v, allowed in said
            if check.allows(v, owner) != allowed
        ]
    return found


@pytest.mark.parametrize("cls", RULED, ids=[c.__name__ for c in RULED])
def test_every_key_has_help_and_its_rule_says_what_its_check_does(cls):
    assert [f.name for f in dataclasses.fields(cls) if len(key_info(cls, f.name)[0]) < 10] == []
    assert disagreements(cls) == []


def test_the_help_prints_each_rule_s_words():
    """``--help`` prints a rule's words from the check itself (the one object)."""
    for cls in RULED:
        for key, check in key_checks(cls).items():
            text = " ".join(line.strip() for line in describe_keys(cls, [key], width=10_000))
            assert text.endswith(f"(allowed: {check.describe})"), (cls.__name__, key, text)


@dataclasses.dataclass
class _BoundMoved(TrainConfig):
    steps: int = setting(140, "rollout steps (each: sample, score, update)", allowed=Check(">= 1", at_least(2).ok))


@dataclasses.dataclass
class _WordsMoved(TrainConfig):
    steps: int = setting(140, "rollout steps (each: sample, score, update)", allowed=Check(">= 2", at_least(1).ok))


@dataclasses.dataclass
class _ExampleDrift(PretrainConfig):
    trace_exclude: str = setting("", "characters a trace avoids", allowed=Check("a string of characters", bool))


@pytest.mark.parametrize(
    ("cls", "needle"),
    [
        (_BoundMoved, "_BoundMoved.steps: '>= 1' says True for 1"),
        (_WordsMoved, "_WordsMoved.steps: '>= 2' says False for 1"),
        (_ExampleDrift, "_ExampleDrift.trace_exclude: 'a string of characters' vs the check on ''"),
    ],
    ids=["bound-changed-in-the-check", "bound-changed-in-the-words", "check-written-by-hand"],
)
def test_a_rule_whose_words_and_check_disagree_is_found(cls, needle):
    """Fault injection: the bound of ``steps`` moved in the check only, or in the words only, and a
    hand-written check that refuses the empty string its words allow."""
    found = disagreements(cls)
    assert any(f.startswith(needle) for f in found), found


def test_words_the_reader_cannot_read_need_examples():
    @dataclasses.dataclass
    class Unread(TrainConfig):
        steps: int = setting(140, "rollout steps (each: sample, score, update)", allowed=Check("positive", bool))

    assert disagreements(Unread) == ["Unread.steps: words the test cannot read, 'positive': give examples"]


@pytest.mark.parametrize(
    ("cls", "key", "bad"),
    [
        (LabConfig, "steps", 0),
        (LabConfig, "group_size", 1),
        (LabConfig, "mini_batches", 1000),
        (LabConfig, "agg", "mean"),
        (LabConfig, "coverage_k", [9]),
        (PretrainConfig, "label_smoothing", 1.0),
        (PretrainConfig, "min_lr_ratio", -0.1),
        (SamplingConfig, "top_p", 0.0),
        (PolicyConfig, "num_heads", 3),
    ],
)
def test_validate_refuses_what_the_rule_refuses_naming_the_key(cls, key, bad):
    """validate() refuses with the key's own rule: the message is its words."""
    from entflow.errors import EntflowError

    cfg = cls(**({key: bad} | ({"coverage_n": 8} if key == "coverage_k" else {})))
    with pytest.raises(EntflowError) as e:
        cfg.validate()
    check = key_checks(cls)[key]
    assert (getattr(e.value, "key", None) or e.value.param) == key
    assert f"must be {check.describe}" in str(e.value)
