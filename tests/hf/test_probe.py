"""entflow.hf.probe and a real run's evaluation metrics: the fixed-text probe's entropy against a
float64 computation one pair at a time (no padding, no batching), its sampling (seeded, saved and
loaded by digest), a real run that logs ``val/probe_entropy`` on the same stored tokens at every
validation, and the truncation rate's definition."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from entflow.errors import ConfigError
from entflow.hf.evaluate import _truncated
from entflow.hf.models import load_model
from entflow.hf.probe import Probe, probe_entropy, sample_probe
from support.real_tiny import save_tiny_model, tiny_run_overrides


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    model, tok = load_model(str(path))
    return path, model, tok


def float64_probe_entropy(model, probe: Probe, temperature: float) -> float:
    """Σ over all response tokens of −Σ_v p_v log p_v (float64, p = softmax(logits / T)) / #tokens,
    one unpadded pair per forward."""
    total, count = 0.0, 0
    with torch.no_grad():
        for p, r in zip(probe.prompt_ids, probe.response_ids, strict=True):
            logits = model(torch.tensor([p + r])).logits[0].double() / temperature  # [Lp + T, V]
            z = logits[len(p) - 1 : len(p) + len(r) - 1]  # [T, V]: the positions that predict r
            logp = torch.log_softmax(z, dim=-1)
            total += float(-(logp.exp() * logp).sum())
            count += len(r)
    return total / count


def _hand_probe(tok) -> Probe:
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompts = ["Calculate 3 + 4.", "What is 12 - 5? It is", "0 1 2"]
    responses = [" The answer is 7.", " 7", " 3 4 5 6 7 8 9"]
    return Probe([enc(p) for p in prompts], [enc(r) for r in responses], prompts, responses, {})


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("batch_rows", [1, 2, 32])
def test_probe_entropy_equals_float64_by_hand(tiny, temperature, batch_rows):
    _, model, tok = tiny
    probe = _hand_probe(tok)
    assert len({len(p) for p in probe.prompt_ids}) > 1 and len({len(r) for r in probe.response_ids}) > 1
    want = float64_probe_entropy(model, probe, temperature)
    got = probe_entropy(model, probe, tok.pad_token_id, temperature, batch_rows=batch_rows)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_probe_entropy_weighs_every_token_the_same(tiny):
    """The mean is over tokens, not over pairs: a pair of 1 token and a pair of many tokens."""
    _, model, tok = tiny
    probe = _hand_probe(tok)
    singles = [
        probe_entropy(model, Probe([p], [r], [a], [b], {}), tok.pad_token_id)
        for p, r, a, b in zip(probe.prompt_ids, probe.response_ids, probe.prompts, probe.responses, strict=True)
    ]
    lengths = [len(r) for r in probe.response_ids]
    token_mean = sum(h * n for h, n in zip(singles, lengths, strict=True)) / sum(lengths)
    assert probe_entropy(model, probe, tok.pad_token_id) == pytest.approx(token_mean, rel=1e-5)
    assert abs(token_mean - sum(singles) / len(singles)) > 1e-4  # the two means differ here


def test_sample_probe_is_seeded_and_round_trips(tiny, tmp_path):
    _, model, tok = tiny
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
               for q in ("Calculate 3 + 4.", "What is 12 - 5?", "Calculate 1 + 1.")]  # fmt: skip
    a = sample_probe(model, tok, prompts, 6, 1.0, seed=5)
    b = sample_probe(model, tok, prompts, 6, 1.0, seed=5)
    c = sample_probe(model, tok, prompts, 6, 1.0, seed=6)
    assert a.digest() == b.digest() and a.digest() != c.digest()
    assert len(a.response_ids) == 3 and all(1 <= len(r) <= 6 for r in a.response_ids)
    for p_ids, p in zip(a.prompt_ids, prompts, strict=True):  # the unpadded prompt tokens
        assert p_ids == tok(p, add_special_tokens=False)["input_ids"]
    loaded = Probe.load(a.save(tmp_path / "probe.jsonl"))
    assert loaded.digest() == a.digest() and loaded.responses == a.responses
    lines = (tmp_path / "probe.jsonl").read_text().splitlines()
    row = json.loads(lines[1])
    row["response_ids"] = [*row["response_ids"][:-1], row["response_ids"][-1] + 1]
    (tmp_path / "bad.jsonl").write_text("\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n")
    with pytest.raises(ConfigError, match="digest"):
        Probe.load(tmp_path / "bad.jsonl")
    with pytest.raises(ConfigError, match="probe_file"):
        Probe.load(tmp_path / "missing.jsonl")


def test_truncated_means_all_tokens_used_and_no_final_eos():
    eos, pad = 2, 0
    gen = SimpleNamespace(
        response_ids=torch.tensor([[5, 6, 7], [5, 6, eos], [5, eos, pad], [5, 6, 7]]),
        mask=torch.tensor([[1.0, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]]),
    )
    assert _truncated(gen, 3, eos) == [True, False, False, True]
    assert _truncated(gen, 4, eos) == [False, False, False, False]  # room was left: nothing was cut


def _run_overrides(out: Path, **extra) -> list[str]:
    keys = {"group_size": 2, "mini_batches": 1, "max_new_tokens": 5, "probe_prompts": 2, "probe_seed": 3}
    return tiny_run_overrides(out, **(keys | extra))


def test_real_run_logs_probe_entropy_on_its_stored_tokens(tiny, tmp_path, capsys, parity):
    from entflow.cli.main import main

    path, warm, _ = tiny
    rc = main(["train", "--model", str(path), "--data", "basic_arithmetic", "--name", "r", *_run_overrides(tmp_path)])
    assert rc == 0, capsys.readouterr().err
    run = tmp_path / "r"
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    probe = Probe.load(run / "probe.jsonl")
    assert len(probe.prompt_ids) == 2 and [r["step"] for r in lines] == [0, 1, 2]
    for r in lines:
        assert r["val/probe_tokens"] == probe.n_tokens and 0.0 <= r["val/truncated_frac"] <= 1.0
    # step 0 measures the starting policy on the probe it sampled; training (lr 1e-2) moves it
    assert lines[0]["val/probe_entropy"] == pytest.approx(float64_probe_entropy(warm, probe, 1.0), rel=1e-5)
    assert any(r["batch/degenerate_group_frac"] < 1 for r in lines[1:])  # the updates had a signal
    assert lines[2]["val/probe_entropy"] != pytest.approx(lines[0]["val/probe_entropy"], rel=1e-4)
    # a second run (another seed) given the probe file measures the very same tokens
    rc = main(["train", "--model", str(path), "--data", "basic_arithmetic", "--name", "r2",
               *_run_overrides(tmp_path, seed=9, probe_file=str(run / "probe.jsonl"), steps=1)])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    assert Probe.load(tmp_path / "r2" / "probe.jsonl").digest() == probe.digest()
    first = json.loads((tmp_path / "r2" / "metrics.jsonl").read_text().splitlines()[0])
    assert first["val/probe_entropy"] == pytest.approx(lines[0]["val/probe_entropy"], rel=1e-6)


def test_probe_prompts_beyond_val_size_is_refused(tiny, tmp_path, capsys, parity):
    from entflow.cli.main import main

    path, _, _ = tiny
    rc = main(["train", "--model", str(path), "--data", "basic_arithmetic", "--name", "bad",
               *_run_overrides(tmp_path, probe_prompts=4)])  # fmt: skip
    assert rc != 0 and "probe_prompts" in capsys.readouterr().err
    assert not (tmp_path / "bad" / "metrics.jsonl").exists()


def test_a_real_run_measures_the_probe_by_default_without_changing_its_training(tiny, tmp_path, capsys, parity):
    """With no ``probe_prompts`` key the probe has ``val_size`` pairs (config.yaml says so), and it
    changes nothing the run trains on: every other metric equals that of the same run with the
    probe off (``probe_prompts=0``)."""
    from entflow.cli.main import main

    path, _, _ = tiny
    runs = {}
    for name, extra in (("on", {}), ("off", {"probe_prompts": 0})):
        args = [f"{k}={v}" for k, v in extra.items()]
        overrides = [a for a in _run_overrides(tmp_path) if not a.startswith("probe_prompts=")] + args
        rc = main(["train", "--model", str(path), "--data", "basic_arithmetic", "--name", name, *overrides])
        assert rc == 0, capsys.readouterr().err
        runs[name] = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    assert "probe_prompts: 3" in (tmp_path / "on" / "config.yaml").read_text()  # val_size = 3
    assert len(Probe.load(tmp_path / "on" / "probe.jsonl").prompt_ids) == 3
    assert not (tmp_path / "off" / "probe.jsonl").exists()
    assert all("val/probe_entropy" in r for r in runs["on"]) and not any("val/probe_entropy" in r for r in runs["off"])
    assert any(r["batch/degenerate_group_frac"] < 1 for r in runs["off"][1:])  # the updates had a signal
    for on, off in zip(runs["on"], runs["off"], strict=True):
        assert {k: v for k, v in on.items() if not k.startswith("val/probe_")} == off
