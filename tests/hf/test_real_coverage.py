"""A real run's coverage (``coverage_n`` > 0): ``real_setup`` evaluates the starting and the final
policy's pass@k curves on the held-out problems through the lab's one coverage evaluation and
writes ``coverage.json`` as a lab run does; the warm entry is the model the run started from."""

from __future__ import annotations

import json

import pytest

from entflow.hf.rewards import REWARDS
from entflow.hf.setup import RealTrainConfig, real_setup, train_real
from entflow.trainer.config import build_config
from entflow.trainer.evaluate import pass_at_k_curve
from support.coverage_calls import coverage_seeds
from support.real_tiny import parity_reward, save_tiny_model

N, KS, VAL = 8, [1, 4, 8], 3


def _values(model, out, **extra) -> dict:
    return (
        {
            "model": str(model),
            "task": "basic_arithmetic",
            "task_params": {"max_terms": 2, "max_digits": 1},
            "reward": "parity",
            "name": "r",
            "steps": 1,
            "prompts_per_step": 2,
            "group_size": 4,
            "max_new_tokens": 6,
            "val_size": VAL,
            "eval_k": 2,
            "lr": 1e-2,
            "progress": False,
            "coverage_n": N,
            "coverage_k": KS,
        }
        | {"out_dir": str(out)}
        | extra
    )


def test_a_real_run_writes_its_coverage(tmp_path, monkeypatch):
    monkeypatch.setitem(REWARDS, "parity", parity_reward)
    model = save_tiny_model(tmp_path / "model")
    values = _values(model, tmp_path / "runs")
    cfg = build_config(values, cls=RealTrainConfig)
    run = train_real(cfg)
    cov = json.loads((run / "coverage.json").read_text())
    assert (cov["n"], cov["temperature"], cov["warm"]["step"], cov["final"]["step"]) == (N, 1.0, 0, 1)
    for which in ("warm", "final"):
        (split,) = cov[which]["splits"].values()
        assert list(cov[which]["splits"]) == ["val"] and split["n_problems"] == VAL
        assert len(split["correct"]) == VAL and all(0 <= c <= N for c in split["correct"])
        assert split["pass_at_k"] == {str(k): v for k, v in pass_at_k_curve(N, split["correct"], KS).items()}
        assert split["pass_at_k"]["1"] == pytest.approx(sum(split["correct"]) / (VAL * N))
    assert 0 < sum(cov["warm"]["splits"]["val"]["correct"]) < VAL * N  # the parity reward is varied
    # the warm entry is the starting model's, sampled with the run's coverage seeds
    parts = real_setup(build_config(values, cls=RealTrainConfig))
    assert parts.coverage is not None
    assert parts.coverage(parts.model, parts.tokenizer, parts.task, cfg) == cov["warm"]["splits"]
    assert not list(model.glob("coverage-*.json"))  # a model outside entflow's cache is not written to


def test_the_starting_coverage_of_a_cached_model_is_evaluated_once(tmp_path, monkeypatch):
    """A model in entflow's cache (SmolLM2's conversion) is immutable: runs from it with one seed and
    the same settings (GRPO and Clip-Cov of a seed) share its starting coverage; another seed or
    another generation setting misses; a model outside the cache is never written to."""
    import entflow.hf.setup as hf_setup

    monkeypatch.setitem(REWARDS, "parity", parity_reward)
    monkeypatch.setenv("ENTFLOW_CACHE", str(tmp_path / "cache"))
    model = save_tiny_model(tmp_path / "cache" / "models" / "tiny-0123")
    calls = coverage_seeds(monkeypatch, hf_setup, "_coverage")

    def run(name: str, **extra):
        return train_real(build_config(_values(model, tmp_path / "runs", name=name, **extra), cls=RealTrainConfig))

    a = run("grpo")
    b = run("clip_cov", method="clip_cov")
    assert calls == [0, 0, 0]  # a's start and end, b's end only
    assert len(list(model.glob("coverage-*.json"))) == 1
    warm = [json.loads((d / "coverage.json").read_text())["warm"] for d in (a, b)]
    assert warm[0] == warm[1]
    run("seed1", seed=1)
    run("longer", max_new_tokens=5)
    assert calls == [0, 0, 0, 1, 1, 0, 0] and len(list(model.glob("coverage-*.json"))) == 3


def test_coverage_on_more_problems_than_validation_with_greedy_answers(tmp_path, monkeypatch):
    """``coverage_size`` > ``val_size``: the coverage evaluates the first ``coverage_size``
    held-out problems (the validation set is the first ``val_size`` of them) and, with
    ``coverage_greedy``, each one's greedy answer, which equals transformers' own greedy decoding
    of that prompt alone."""
    import torch

    monkeypatch.setitem(REWARDS, "parity", parity_reward)
    model = save_tiny_model(tmp_path / "model")
    values = _values(model, tmp_path / "runs", coverage_size=5, coverage_greedy=True)
    run = train_real(build_config(values, cls=RealTrainConfig))
    cov = json.loads((run / "coverage.json").read_text())
    parts = real_setup(build_config(values, cls=RealTrainConfig))
    problems = parts.task.coverage_set(5)
    assert [p.prompt for p in problems[:VAL]] == [p.prompt for p in parts.task.validation_set()]
    warm = cov["warm"]["splits"]["val"]
    assert warm["n_problems"] == 5 and len(warm["correct"]) == 5
    expected = []
    tok = parts.tokenizer
    for p in problems:
        ids = tok(p.prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = parts.model.generate(  # the ids and mask only: older tokenizers add token_type_ids
                input_ids=ids["input_ids"],
                attention_mask=ids["attention_mask"],
                do_sample=False,
                max_new_tokens=6,
                pad_token_id=tok.pad_token_id,
            )
        text = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
        expected.append(int(parity_reward([text])[0] > 0))
    assert warm["greedy_correct"] == expected
    assert len(cov["final"]["splits"]["val"]["greedy_correct"]) == 5
    val_steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("val/acc" in r for r in val_steps)
    from entflow.errors import ConfigError

    with pytest.raises(ConfigError, match="coverage_size"):
        build_config(_values(model, tmp_path / "runs", coverage_size=VAL - 1), cls=RealTrainConfig)


def test_a_fixed_coverage_seed_shares_the_starting_coverage_across_run_seeds(tmp_path, monkeypatch, parity):
    """``coverage_seed`` set: runs of different seeds evaluate the cached starting model once, and
    their warm entries are equal; without it each run seed samples its own."""
    import entflow.hf.setup as hf_setup

    monkeypatch.setenv("ENTFLOW_CACHE", str(tmp_path / "cache"))
    model = save_tiny_model(tmp_path / "cache" / "models" / "tiny-4567")
    calls: list[int] = []
    real = hf_setup._coverage
    monkeypatch.setattr(hf_setup, "_coverage", lambda m, t, task, cfg: calls.append(cfg.seed) or real(m, t, task, cfg))

    def run(name: str, **extra):
        values = _values(model, tmp_path / "runs", name=name, **extra)
        return json.loads((train_real(build_config(values, cls=RealTrainConfig)) / "coverage.json").read_text())

    a, b = run("a", seed=0, coverage_seed=7), run("b", seed=1, coverage_seed=7)
    assert calls == [0, 0, 1]  # the start once (for seed 0), then each run's end
    assert a["warm"] == b["warm"]
    run("c", seed=1)  # no coverage_seed: its start is sampled with its own seed, evaluated anew
    assert calls == [0, 0, 1, 1, 1]


def test_a_coverage_size_beyond_the_held_out_set_fails_before_any_model_loads(tmp_path, monkeypatch, parity):
    import entflow.hf.models as models
    from entflow.errors import ConfigError

    def no_model(*a, **k):
        raise AssertionError("the model was loaded before the held-out sizes were checked")

    monkeypatch.setattr(models, "load_model", no_model)
    held_out = {"max_terms": 2, "max_digits": 1, "held_out": [{"name": "judge", "seed": 7, "size": 6}]}
    values = _values("smollm2", tmp_path / "runs", task_params={**held_out, "eval_split": "judge"}, coverage_size=9)
    with pytest.raises(ConfigError) as e:
        real_setup(build_config(values, cls=RealTrainConfig))
    assert e.value.key == "coverage_size" and "holds 6" in str(e.value) and "coverage_size=9" in str(e.value)
    values["val_size"] = 7  # the periodic evaluation alone too large: named as before
    with pytest.raises(ConfigError) as e:
        real_setup(build_config(values | {"coverage_size": None}, cls=RealTrainConfig))
    assert e.value.key == "val_size"
