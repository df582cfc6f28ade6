"""The run's random streams (trainer/seeds.py): one named home for every offset of the run's seed,
each keeping the value runs have always used, and the per-step seed against its formula."""

from __future__ import annotations

import re
from pathlib import Path

from entflow.trainer import seeds
from entflow.trainer.rollout import step_seed as rollout_step_seed

ROOT = Path(__file__).resolve().parents[2]


def test_step_seed_and_stream_seed_vs_hand():
    for seed, step in [(0, 0), (5, 7), (123, 10_000), (2**62, 3)]:
        want = (seed * 1_000_003 + step * 7_919) % (2**63 - 1)  # Python's exact integers
        assert seeds.step_seed(seed, step) == want
        for offset in range(4):
            assert seeds.stream_seed(seed, offset, step) == (((seed + offset) * 1_000_003 + step * 7_919) % (2**63 - 1))
    assert rollout_step_seed is seeds.step_seed  # its earlier import path still works


def test_offsets_keep_the_values_runs_have_always_used():
    """A changed offset changes every run's metrics.jsonl; two pairs share a value (the module says why)."""
    named = {k: v for k, v in vars(seeds).items() if k.isupper()}
    assert named == {
        "STEP": 0,
        "VALIDATION": 1,
        "COVERAGE": 2,
        "REGIME_HARD_SET": 2,
        "HARD_SET": 3,
        "RANDOM_REWARD": 3,
    }


def test_no_other_module_offsets_the_run_seed():
    """``cfg.seed + N`` is written nowhere but in trainer/seeds.py (as a named offset)."""
    offset = re.compile(r"cfg\.seed\s*\+\s*\d")
    files = [*(ROOT / "src" / "entflow").rglob("*.py"), *(ROOT / "experiments").rglob("*.py")]
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in files
        if p.name != "seeds.py"
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if offset.search(line)
    ]
    assert len(files) > 50 and found == []
