"""The real-v2 setting's problem sets: train, design_eval and judge share no problem (compared by
normalised text), each set is fixed by its own seed, and the design preset differs from the
registered one only in which set it evaluates. Only problem *texts* are generated here: no model
reads the judge set."""

from __future__ import annotations

import random
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

from entflow.errors import ConfigError
from entflow.hf.data import SplitGymData, load_data, normalize_problem

CONFIGS = Path(str(files("entflow.hf") / "configs"))


def _preset(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text())


def test_design_preset_differs_from_the_registered_one_only_in_the_evaluated_set():
    reg, design = _preset("real_v2.yaml"), _preset("real_v2_design.yaml")
    assert reg["task_params"].pop("eval_split") == "judge"
    assert design["task_params"].pop("eval_split") == "design_eval"
    sizes = {s["name"]: s["size"] for s in reg["task_params"]["held_out"]}
    # the start / end evaluation covers the whole evaluated set; the periodic one its first problems
    assert reg.pop("coverage_size") == sizes["judge"] and design.pop("coverage_size") == sizes["design_eval"]
    assert reg["val_size"] <= sizes["design_eval"] and reg["probe_prompts"] <= reg["val_size"]
    assert reg == design


@pytest.fixture(scope="module")
def v2_sets() -> SplitGymData:
    params = _preset("real_v2_design.yaml")["task_params"]
    data = load_data("basic_arithmetic", **params)
    assert isinstance(data, SplitGymData)
    return data


def test_train_design_eval_and_judge_share_no_problem(v2_sets):
    design, judge = v2_sets.splits["design_eval"], v2_sets.splits["judge"]
    sizes = {s["name"]: s["size"] for s in _preset("real_v2.yaml")["task_params"]["held_out"]}
    assert len(design) == sizes["design_eval"] and len(judge) == sizes["judge"] >= 128
    d = {normalize_problem(e.prompt) for e in design}
    j = {normalize_problem(e.prompt) for e in judge}
    assert len(d) == len(design) and len(j) == len(judge)  # no problem twice within a set
    assert not d & j
    train = {normalize_problem(e.prompt) for e in v2_sets.train_problems(limit=20_000)}
    assert len(train) > 1000 and not train & (d | j)
    drawn = {normalize_problem(e.prompt) for e in v2_sets.sample_train(2000, random.Random(0))}
    assert not drawn & (d | j)
    assert [e.prompt for e in v2_sets.validation] == [e.prompt for e in design]  # the design preset's list


def test_worked_examples_are_in_no_held_out_set(v2_sets):
    shots = _preset("real_v2.yaml")["few_shot"]
    assert shots == _preset("real_v2_design.yaml")["few_shot"] and len(shots) >= 1
    worked = {normalize_problem(q) for q, _ in shots}
    for name, split in v2_sets.splits.items():
        assert not worked & {normalize_problem(e.prompt) for e in split}, name
    # each worked answer is right: the equation's last number is the problem's value
    for q, a in shots:
        expr = q.removeprefix("Calculate ").removesuffix(".")
        assert a == f"{expr} = {eval(expr)}"


def test_sets_are_fixed_by_their_seeds_and_normalisation_catches_spacing():
    assert normalize_problem("  Calculate 3 +  4.\n") == normalize_problem("calculate 3 + 4.")
    params = {"max_terms": 2, "max_digits": 1}
    held = [{"name": "a", "seed": 1, "size": 20}, {"name": "b", "seed": 2, "size": 20}]
    one = load_data("basic_arithmetic", held_out=held, eval_split="a", train_seed=3, **params)
    two = load_data("basic_arithmetic", held_out=held, eval_split="b", train_seed=3, **params)
    assert [e.prompt for e in one.splits["b"]] == [e.prompt for e in two.splits["b"]]
    assert [e.prompt for e in two.validation] == [e.prompt for e in one.splits["b"]]
    # set a does not depend on what comes after it
    alone = load_data("basic_arithmetic", held_out=held[:1], eval_split="a", train_seed=3, **params)
    assert [e.prompt for e in alone.splits["a"]] == [e.prompt for e in one.splits["a"]]
    # the same seed twice: the second set still gets 20 problems, none of the first's
    same = load_data("basic_arithmetic", held_out=[held[0], {**held[1], "seed": 1}], eval_split="a", **params)
    a = {normalize_problem(e.prompt) for e in same.splits["a"]}
    b = {normalize_problem(e.prompt) for e in same.splits["b"]}
    assert len(b) == 20 and not a & b


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"eval_split": "c"}, "eval_split"),
        ({"eval_split": None}, "eval_split"),
        ({"eval_split": "a", "val_seed": 4}, "val_seed"),
        ({"eval_split": "a", "val_size": 21}, "val_size"),
        ({"eval_split": "a", "held_out": [{"name": "a", "seed": 1}]}, "held_out"),
        ({"eval_split": "a", "held_out": [{"name": "a", "seed": 1, "size": 243}]}, "held_out[0].size"),
    ],
)
def test_bad_held_out_settings_name_the_key(kwargs, key):
    """(One-digit sums and differences have 242 distinct problems, so 243 cannot be drawn.)"""
    small = {"max_terms": 2, "max_digits": 1, "operators": ["+", "-"], "allow_negation": False}
    args = {"held_out": [{"name": "a", "seed": 1, "size": 20}], **small, "allow_parentheses": False} | kwargs
    with pytest.raises(ConfigError) as e:
        load_data("basic_arithmetic", **args)
    assert e.value.key == key


def test_design_runs_draw_no_judge_problem_replayed_with_todays_design_preset():
    """The committed design runs' training draws, replayed (benchmarks/docs_tables.design_judge_draws):
    their own configs excluded a 400-problem judge set, so they drew some of the registered set's last
    48 problems; with the judge set today's presets exclude (all of it, the same list in both files)
    the same seeds and steps draw none."""
    import sys

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    from docs_tables import design_judge_draws

    design, reg = _preset("real_v2_design.yaml"), _preset("real_v2.yaml")
    assert design["task_params"]["held_out"] == reg["task_params"]["held_out"]  # one list of held-out sets
    judge_size = next(h["size"] for h in reg["task_params"]["held_out"] if h["name"] == "judge")
    then = design_judge_draws(root)
    assert then["runs"] and then["drawn"] and all(p >= 400 for p in then["positions"])
    now = design_judge_draws(root, judge_size=judge_size)
    assert now["runs"] == then["runs"] and now["drawn"] == []
