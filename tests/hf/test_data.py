"""entflow.hf.data: files (JSONL, parquet, datasets dirs) with named errors, reasoning-gym tasks with
fixed seeded splits, lab tasks under the same interface, and the chat-templated task adapter."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from entflow.errors import ConfigError, UnknownMethodError
from entflow.hf.data import ChatTask, load_data, read_jsonl_examples


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_rows_and_extra_columns(tmp_path):
    p = _write(
        tmp_path / "d.jsonl",
        [json.dumps({"prompt": "1+1?", "answer": 2, "level": 1}), "", '{"prompt": "2+2?", "answer": "4"}'],
    )
    d = load_data(str(p))
    assert [(e.prompt, e.answer) for e in d.validation] == [("1+1?", "2"), ("2+2?", "4")]
    assert d.validation[0].columns == {"level": 1}
    assert d.reward == "math_verify"


def test_malformed_jsonl_names_line_number(tmp_path):
    p = _write(tmp_path / "bad.jsonl", ['{"prompt": "a", "answer": "1"}', '{"prompt": "b", "answer": ', '{"x": 1}'])
    with pytest.raises(ConfigError, match="line 2 is not valid JSON"):
        read_jsonl_examples(p)
    p2 = _write(tmp_path / "list.jsonl", ['{"prompt": "a", "answer": "1"}', "[1, 2]"])
    with pytest.raises(ConfigError, match="line 2 is not a JSON object"):
        load_data(str(p2))


def test_missing_fields_are_named(tmp_path):
    p = _write(tmp_path / "q.jsonl", [json.dumps({"question": "1+1?", "answer": "2"})])
    with pytest.raises(ConfigError, match=r"'prompt'.*row 1.*fields seen: answer, question"):
        load_data(str(p))
    p2 = _write(tmp_path / "a.jsonl", [json.dumps({"prompt": "1+1?", "solution": "2"})])
    with pytest.raises(ConfigError, match=r"'answer'"):
        load_data(str(p2))
    # other field names by parameter
    d = load_data(str(p), prompt_field="question")
    assert d.validation[0].prompt == "1+1?"


def test_parquet_and_datasets_dir_and_objects(tmp_path):
    import datasets

    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(5)]
    ds = datasets.Dataset.from_list(rows)
    ds.to_parquet(str(tmp_path / "d.parquet"))
    ds.save_to_disk(str(tmp_path / "dsdir"))
    for spec in (str(tmp_path / "d.parquet"), str(tmp_path / "dsdir"), ds, rows):
        d = load_data(spec)
        assert [(e.prompt, e.answer) for e in d.validation] == [(r["prompt"], r["answer"]) for r in rows]
    with pytest.raises(ConfigError, match="'prompt'"):
        load_data(datasets.Dataset.from_list([{"text": "x", "answer": "1"}]))


def test_file_validation_holdout_is_seeded_and_disjoint(tmp_path):
    rows = [{"prompt": f"q{i}", "answer": str(i)} for i in range(10)]
    a, b = load_data(rows, val_size=3, val_seed=1), load_data(rows, val_size=3, val_seed=1)
    assert [e.prompt for e in a.validation] == [e.prompt for e in b.validation]
    train = {e.prompt for e in a.sample_train(200, random.Random(0))}
    assert train.isdisjoint({e.prompt for e in a.validation}) and len(train) == 7
    with pytest.raises(ConfigError, match="val_size"):
        load_data(rows, val_size=10)


def test_unknown_names_and_missing_files():
    with pytest.raises(UnknownMethodError, match=r"gsm_symbolc.*basic_arithmetic.*countdown.*gsm_symbolic"):
        load_data("gsm_symbolc")
    with pytest.raises(ConfigError, match="no such file"):
        load_data("missing/file.jsonl")


@pytest.mark.parametrize("name", ["gsm_symbolic", "basic_arithmetic"])
def test_reasoning_gym_splits_are_fixed_and_disjoint(name):
    a = load_data(name, val_size=20)
    b = load_data(name, val_size=20)
    assert [(e.prompt, e.answer) for e in a.validation] == [(e.prompt, e.answer) for e in b.validation]
    assert len({e.prompt for e in a.validation}) == 20
    small = load_data(name, val_size=5)  # a smaller validation set is a prefix of a larger one
    assert [e.prompt for e in small.validation] == [e.prompt for e in a.validation[:5]]
    train = a.sample_train(50, random.Random(0))
    assert train == b.sample_train(50, random.Random(0))  # seeded by the rng
    assert {e.prompt for e in train}.isdisjoint({e.prompt for e in a.validation})
    # the gold answers are reasoning-gym's own (its scorer accepts them)
    import reasoning_gym

    ds = reasoning_gym.create_dataset(name, seed=a._train_ds.config.seed, size=3)
    assert ds.score_answer(str(ds[0]["answer"]), ds[0]) == 1.0
    assert a.reward == {"gsm_symbolic": "math_verify", "basic_arithmetic": "exact_match"}[name] and "boxed" in a.suffix


def test_reasoning_gym_params_pass_through():
    d = load_data("basic_arithmetic", val_size=10, max_terms=2, max_digits=1, operators=("+",))
    for e in d.validation:
        expr = e.prompt.removeprefix("Calculate ").rstrip(".")
        assert eval(expr) == int(e.answer)
    with pytest.raises(ConfigError, match="data_params"):
        load_data("basic_arithmetic", val_size=2, no_such_param=1)


def test_lab_task_under_the_same_interface():
    from entflow.lab.tasks import get_task

    d = load_data("arithmetic")
    task = get_task("arithmetic")
    assert [e.prompt for e in d.validation] == [p.prompt for p in task.validation_set()]
    ex = d.validation[0]
    right, wrong = ex.answer, str(int(ex.answer) + 1)
    assert d.reward([right, wrong], problem=[ex.columns["problem"]] * 2) == [1.0, 0.0]
    cd = load_data("countdown")
    e = cd.validation[0]
    sol = get_task("countdown").solutions(e.columns["problem"])[0]
    assert cd.reward([sol, "1+"], problem=[e.columns["problem"]] * 2) == [1.0, 0.0]


def test_chat_task_templates_prompts_and_scores():
    from entflow.hf.models import prepare_tokenizer
    from support.real_tiny import build_tokenizer

    tok = prepare_tokenizer(build_tokenizer())
    rows = [{"prompt": "What is 2+2?", "answer": "4"}, {"prompt": "What is 3+3?", "answer": "6"}]
    task = ChatTask(load_data(rows), tok, max_new_tokens=8, prompt_suffix=" Answer:", val_size=1)
    (p,) = task.validation_set()
    assert p.prompt == "<|im_start|>user\nWhat is 2+2? Answer:<|im_end|>\n<|im_start|>assistant\n"
    assert task.max_response_len == 8
    assert task.reward(p, "It is \\boxed{4}") == 1.0 and task.reward(p, "5") == 0.0
    assert task.pop_metrics() == {"reward/errors": 0.0, "reward/timeouts": 0.0}
    probs = task.sample_problems(3, random.Random(0))
    assert all(q.prompt.startswith("<|im_start|>user\n") for q in probs)
    # worked examples come first, their questions with the same suffix as the problem's
    shot = ChatTask(load_data(rows), tok, 8, prompt_suffix=" Answer:", val_size=1, few_shot=[["What is 1+1?", "2"]])
    (q,) = shot.validation_set()
    assert q.prompt == (
        "<|im_start|>user\nWhat is 1+1? Answer:<|im_end|>\n<|im_start|>assistant\n2<|im_end|>\n" + p.prompt
    )
    assert shot.reward(q, "4") == 1.0
