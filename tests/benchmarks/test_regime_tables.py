"""benchmarks/regime_tables.py: each printer against hand-made result files with hand-worked numbers,
bad arguments, and the committed comparison against docs/regime.md."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import regime_tables as rg  # noqa: E402  (benchmarks/regime_tables.py)


def _write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def _split(p: dict[int, float], n: int, share: float = 0.5) -> dict:
    return {**{f"pass@{k}": v for k, v in p.items()}, "n": n, "route_share_of_correct": share}


def test_passk_table_gap_and_route_share(tmp_path):
    p = {1: 0.1, 4: 0.2, 16: 0.3, 64: 0.45, 256: 0.6}
    f = _write(tmp_path / "w.json", {"val": _split(p, 256, 0.04), "hard": _split(p, 256, 1.0)})
    rows = rg.passk_table(f).splitlines()
    assert rows[2] == "| val (n = 256) | 0.100 | 0.200 | 0.300 | 0.450 | 0.600 | 0.350 | 0.04 |"
    assert rows[3].endswith("| 0.350 | 1.00 |")


def test_warmstarts_table_reads_pass_at_n(tmp_path):
    p = {1: 0.0834, 64: 0.5}
    f = _write(tmp_path / "w.json", {"val": _split(p, 64), "hard": _split({1: 0.0, 64: 0.25}, 64)})
    assert (
        rg.warmstarts_table([("LS 0.2, 0.95", f)]).splitlines()[2]
        == "| LS 0.2, 0.95 | 64 | 0.083 | 0.500 | 0.000 | 0.250 |"
    )


def test_comparison_table_grpo_first_with_signed_deltas(tmp_path):
    col = {"mean": 0.5, "per_seed": [0.4, 0.6]}
    grpo = {"seeds": [1, 2], **{key: col for _, key in rg.COMPARISON_COLUMNS}}
    other = {
        "seeds": [1],
        **{key: {"mean": 2.5, "per_seed": [2.5], "minus_grpo_mean": 2.0} for _, key in rg.COMPARISON_COLUMNS},
    }
    f = _write(tmp_path / "c.json", {"methods": {"zeta": other, "grpo": grpo}})
    rows = rg.comparison_table(f).splitlines()
    assert rows[2].startswith("| grpo | 1,2 | 0.500 (0.400, 0.600) |")
    assert rows[3].startswith("| zeta | 1 | 2.500; Δ +2.000 |")


def test_long_table_and_plateau(tmp_path):
    evals = [
        {"step": s, "val/acc": a, "val/pass@k": 0.5, "hard/acc": 0.1, "hard/pass@k": 0.2, "val/entropy": h}
        for s, a, h in ((0, 0.1, 0.5), (20, 0.2, 0.25))
    ]
    long = {
        "evals": evals, "plateau_step": 20, "window_evals": 5, "window_slopes_per_100_steps": [[-0.05, 0.01]],
        "mean_acc_after": 0.2, "entropy_at_plateau": 0.25, "entropy_final": 0.25,
    }  # fmt: skip
    out = rg.long_table(_write(tmp_path / "c.json", {"long_grpo": long}))
    assert "| step | 0 | 20 |" in out and "| entropy (nats) | 0.50 | 0.25 |" in out
    assert "Plateau at step 20" in out and "−0.050 ± 0.010" in out


def test_flow_table_ratio_and_low_p_share(tmp_path):
    setting = {
        "P": 16, "G": 16, "temperature": 1.0, "acc": 0.1, "entropy": 1.5, "S_pos": 10.0, "S_neg": 35.0,
        "lambda_star": 0.7, "lambda_star_shuffled": -0.05, "lambda_star_seqnorm": 0.69,
        "cells": {"A<0,p<0.2": {"S_neg_share": 0.83}},
    }  # fmt: skip
    f = _write(tmp_path / "f.json", {"settings": [setting, {**setting, "P": 4, "G": 64}]})
    rows = rg.flow_table([("warm", f)]).splitlines()
    assert rows[2] == "| warm | 16×16, 1.0 | 0.100 | 1.50 | 10.0 | 35.0 | 3.5 | 0.700 | −0.050 | 0.690 | 0.83 |"
    assert rows[3].startswith("|  | 4×64, 1.0 |")


@pytest.mark.parametrize("argv", [["--flow", "no-label.json"], ["--passk", "missing.json"]])
def test_bad_arguments_are_named(argv, capsys):
    with pytest.raises(SystemExit) as e:
        rg.main(argv)
    assert e.value.code == 2 and argv[1] in capsys.readouterr().err


def test_the_docs_comparison_carries_the_committed_values():
    page = (ROOT / "docs" / "regime.md").read_text()
    methods = json.loads((ROOT / "docs/results/regime/comparison.json").read_text())["methods"]
    for name, m in methods.items():
        mean = m["hard_pass@256_n256"]["mean"]
        assert f"| {name} | {','.join(map(str, m['seeds']))} | {mean:.3f}" in page, name
