"""The run directory (docs/design.md §10): append-only metrics, samples, TensorBoard and atomic checkpoints.

Layout of ``runs/NAME/``::

    config.yaml          complete resolved config
    metrics.jsonl        one JSON object per step, appended and flushed every step
    samples.jsonl        a few prompts / responses / rewards per step
    events.out.tfevents.*  TensorBoard scalars (the same numbers as metrics.jsonl)
    checkpoints/last.pt  model, optimizer, method state, RNG states, step (written atomically)
    checkpoints/final/   the final policy in Hugging Face format (save_pretrained)
"""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path
from typing import Any

import torch
import yaml

from entflow.analysis.runs import read_jsonl as read_jsonl  # the one run-directory reader, re-exported
from entflow.files import atomic_write_bytes, json_safe


def default_cache_dir() -> Path:
    """Where entflow caches warm starts and converted models: ``$ENTFLOW_CACHE`` or
    ``~/.cache/entflow``."""
    return Path(os.environ.get("ENTFLOW_CACHE") or Path.home() / ".cache" / "entflow")


class JsonlWriter:
    """Append-only JSON-lines file, flushed and fsynced after every record."""

    def __init__(self, path: Path):
        self.path = path
        if path.exists() and path.stat().st_size:
            with open(path, "rb+") as f:  # drop a half-written last line left by a crash
                data = f.read()
                if not data.endswith(b"\n"):
                    f.truncate(data.rfind(b"\n") + 1)
        self._f = open(path, "a")

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(json_safe(record)) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    atomic_write_bytes(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False).encode())


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def save_checkpoint(path: Path, **state: Any) -> None:
    """``torch.save`` the state so that ``path`` holds the old checkpoint or the new one, never half."""
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)
