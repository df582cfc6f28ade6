"""entflow.files: the one JSON-safe conversion and the one atomic writer."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from entflow.files import atomic_file, atomic_write_bytes, json_safe, write_json


def test_json_safe_replaces_every_non_finite_float_recursively():
    value = {"a": math.nan, "b": [1.0, math.inf, (2, -math.inf)], "c": {"d": np.float64("nan"), 3: np.int64(4)}}
    got = json_safe(value)
    assert got == {"a": None, "b": [1.0, None, [2, None]], "c": {"d": None, 3: 4}}
    assert type(got["c"][3]) is int  # a NumPy scalar becomes a Python number
    json.dumps(got, allow_nan=False)  # nothing JSON cannot hold is left
    assert json_safe({(1, 2): "x"}) == {"(1, 2)": "x"}  # a key JSON cannot hold becomes its str
    assert json_safe("nan") == "nan" and json_safe(None) is None and json_safe(True) is True


def test_metrics_line_bytes_are_those_of_json_dumps_for_finite_values():
    """The run directory's metrics.jsonl is written through json_safe: finite values are untouched."""
    record = {"step": 3, "loss": 0.1 + 0.2, "entropy": np.float64(1 / 3), "flag": True, "name": "grpo"}
    assert json.dumps(json_safe(record)) == json.dumps(record)


def test_atomic_write_replaces_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "sub" / "x.json"
    write_json(path, {"v": math.nan, "w": [1, 2]}, indent=1)
    assert path.read_text() == '{\n "v": null,\n "w": [\n  1,\n  2\n ]\n}\n'
    atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
    assert os.listdir(path.parent) == ["x.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "x.bin"
    path.write_bytes(b"old")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(path, b"new")
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["x.bin"]


def test_a_streamed_write_replaces_the_file_only_when_its_block_ends(tmp_path, monkeypatch):
    """``atomic_file``: inside the block the target still holds the old bytes; after it the new
    ones, fsynced once before the rename; an error inside the block keeps the old file."""
    path = tmp_path / "ck.pt"
    path.write_bytes(b"old")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    with atomic_file(path) as f:
        f.write(b"ne")
        f.write(b"w")
        assert path.read_bytes() == b"old" and synced == []
    assert path.read_bytes() == b"new" and len(synced) == 1
    with pytest.raises(RuntimeError, match="killed"), atomic_file(path) as f:
        f.write(b"half")
        raise RuntimeError("killed")
    assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["ck.pt"]
