"""benchmarks/real_v1_tables.py: each printer against hand-made result files whose numbers are worked out
by hand, and every block that docs/real-models.md prints with it against the committed files' own values."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import real_v1_tables as rt  # noqa: E402  (benchmarks/real_v1_tables.py)


def _run(root: Path, name: str, entropy: list[float], val: dict[int, tuple[float, float]], cov: dict | None) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.yaml").write_text("method: grpo\nseed: 7\nlr: 3.0e-05\n")
    rows = []
    for step in range(len(entropy) + 1):
        r = {"step": step}
        if step:
            r["entropy"] = entropy[step - 1]
        if step in val:
            r["val/acc"], r["val/pass@k"] = val[step]
        rows.append(r)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if cov is not None:
        (d / "coverage.json").write_text(json.dumps(cov))
    return d


def _cov(p1: float, p4: float) -> dict:
    return {"splits": {"val": {"pass_at_k": {"1": p1, "4": p4}}}}


def test_runs_table_retention_periodic_and_coverage(tmp_path):
    # 20 steps: the first 5 % is step 1 (2.0), the last 20 % steps 17-20 (mean 0.5): retention 0.25
    entropy = [2.0] + [1.0] * 15 + [0.4, 0.6, 0.5, 0.5]
    a = _run(
        tmp_path, "a", entropy, {0: (0.1, 0.5), 20: (0.3, 0.75)}, {"warm": _cov(0.2, 0.6), "final": _cov(0.4, 0.5)}
    )
    b = _run(tmp_path, "b", entropy, {0: (0.1, 0.5), 20: (0.3, 0.75)}, None)
    rows = rt.runs_table([a, b], passk=4).splitlines()
    assert rows[0].count("|") == rows[1].count("|") == rows[2].count("|")
    assert rows[2] == (
        "| `a` (grpo, seed 7, lr 3e-05) | 2.00 → 0.50 | 0.250 | 0.100 → 0.300 (steps 0 → 20) | 0.500 → 0.750 | "
        "0.200 → 0.400 | 0.600 → 0.500 |"
    )
    assert rows[3].endswith("| not measured | not measured |")


def test_trl_table_rows_per_seed_and_method(tmp_path):
    files = []
    for seed, device in ((1, "GPU A"), (2, "GPU B")):
        run = {
            "entropy_first": 2.0,
            "entropy_last": 0.409,
            "entropy_retention": 0.2045,  # 0.20, not 0.21: rounded from the stored value
            "coverage": {"pass_at_k": {"1": 0.5, "8": 0.875}},
        }
        d = {
            "config": {"seed": seed},
            "device": device,
            "coverage_n": 8,
            "warm": {"pass_at_k": {"1": 0.125, "8": 0.75}},
            "runs": {"grpo": run, "kl_cov": run},
        }
        files.append(tmp_path / f"s{seed}.json")
        files[-1].write_text(json.dumps(d))
    rows = rt.trl_table(files).splitlines()
    assert len(rows) == 2 + 2 + 2 * 2
    assert rows[2] == "| starting policy | 1 | GPU A | | | 0.125 | 0.750 |"
    assert rows[7] == "| kl_cov | 2 | GPU B | 2.00 → 0.41 | 0.20 | 0.500 | 0.875 |"


def test_eval_and_candidates(tmp_path):
    d = {
        "settings": {"k": 4, "data": "basic_arithmetic", "data_params": {"max_terms": 2}, "prompt_suffix": "",
                     "max_new_tokens": 32},
        "metrics": {"avg@4": {"value": 0.25, "se": 0.0125}, "pass@4": {"value": 0.5, "se": 0.05}},
        "response_len": 12.34, "token_entropy": 1.5, "unparseable_frac": 0.1, "samples_per_s": 3.0,
        "reward_errors": 0.0, "reward_timeouts": 1.0, "wall_s": 1234.4,
    }  # fmt: skip
    path = tmp_path / "e.json"
    path.write_text(json.dumps(d))
    table = rt.eval_table(path)
    assert "| avg@4 | 0.250 | 0.013 |" in table and "| reward errors / timeouts | 0 / 1 | |" in table
    row = rt.candidates_table([path]).splitlines()[2]
    assert "`basic_arithmetic` (max_terms=2), prompt suffix '', 32 tokens, k = 4" in row
    assert row.endswith("| 0.250 ± 0.013 | 0.50 ± 0.05 | 12.3 / 32 | 1.50 | 1,234 |")


def test_a_missing_file_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        rt.main(["--trl", str(tmp_path / "nope.json")])
    assert e.value.code == 2 and "nope.json" in capsys.readouterr().err


def test_the_docs_trl_table_carries_the_committed_values():
    page = (ROOT / "docs" / "real-models.md").read_text()
    for seed in (100, 101, 102):
        d = json.loads((ROOT / f"docs/results/real-trl/crosscheck-s{seed}.json").read_text())
        for name, r in d["runs"].items():
            cells = f"| {name} | {seed} | {d['device']} | {r['entropy_first']:.2f} → {r['entropy_last']:.2f} |"
            assert cells in page, cells
