"""The run directory (docs/design.md §10): append-only metrics, samples, TensorBoard and atomic checkpoints.

Layout of ``runs/NAME/``::

    config.yaml          complete resolved config
    metrics.jsonl        one JSON object per step, appended and flushed every step
    samples.jsonl        a few prompts / responses / rewards per step
    events.out.tfevents.*  TensorBoard scalars (the same numbers as metrics.jsonl)
    checkpoints/last.pt  trainable weights, optimizer, method state, RNG states, step (written atomically,
                         by the checkpoint policy of entflow.trainer.loop)
    checkpoints/final/   the final policy in Hugging Face format (save_pretrained)
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import torch
import yaml

from entflow.analysis.runs import read_jsonl as read_jsonl  # the one run-directory reader, re-exported
from entflow.files import atomic_file, atomic_write_bytes, json_safe
from entflow.trainer.faults import kill_point


def default_cache_dir() -> Path:
    """Where entflow caches warm starts and converted models: ``$ENTFLOW_CACHE`` or
    ``~/.cache/entflow``."""
    return Path(os.environ.get("ENTFLOW_CACHE") or Path.home() / ".cache" / "entflow")


def cache_folder_of(path: str | os.PathLike) -> Path | None:
    """``path`` when it is a folder inside entflow's cache (:func:`default_cache_dir`: the lab's
    warm starts and the converted real models, content-addressed and never changed after they are
    written), else None: a user's own folder is not written to."""
    resolved = Path(path).resolve()
    return resolved if resolved.is_dir() and resolved.is_relative_to(default_cache_dir().resolve()) else None


class JsonlWriter:
    """Append-only JSON-lines file, flushed and fsynced after every record. Opening an existing
    file drops a half-written last line (a process killed mid-write), and, with ``keep_steps``,
    every line from the first whose ``step`` is not in it on (the records of a step a killed
    process did not finish, which the resumed run writes again)."""

    def __init__(self, path: Path, keep_steps: set[int] | None = None):
        self.path = path
        if path.exists() and path.stat().st_size:
            with open(path, "rb+") as f:
                data = f.read()
                end = data.rfind(b"\n") + 1  # drop a half-written last line
                if keep_steps is not None:
                    end = _end_of_steps(data[:end], keep_steps)
                if end < len(data):
                    f.truncate(end)
                    os.fsync(f.fileno())
        self._f = open(path, "a")

    def write(self, record: dict[str, Any]) -> int:
        """Append ``record`` as one line; returns the line's length in bytes (JSON is ASCII)."""
        line = json.dumps(json_safe(record)) + "\n"
        self._f.write(line)
        self._f.flush()
        os.fsync(self._f.fileno())
        return len(line)

    @property
    def file(self):
        return self._f

    def close(self) -> None:
        self._f.close()


def _end_of_steps(data: bytes, steps: set[int]) -> int:
    """The offset in the JSON lines ``data`` of the first line whose ``step`` is not in ``steps``
    (``len(data)`` when every line's is)."""
    offset = 0
    for line in data.splitlines(keepends=True):
        try:
            if json.loads(line).get("step") not in steps:
                break
        except ValueError:  # not a record: nothing after it is kept either
            break
        offset += len(line)
    return offset


def write_config(run_dir: Path, config: dict[str, Any]) -> None:
    atomic_write_bytes(run_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False).encode())


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])


def save_checkpoint(path: Path, **state: Any) -> None:
    """``torch.save`` the state straight into :func:`entflow.files.atomic_file`: ``path`` holds the old checkpoint
    or the new one, never half, and no second in-memory copy of the state is made (its containers are
    rebuilt, :func:`_canonical`; tensors are not copied)."""
    with atomic_file(path) as f:
        torch.save(_canonical(state), f)
        kill_point("checkpoint", state.get("step"), f, f.tell())  # a test hook (trainer/faults.py)


def _canonical(value: Any) -> Any:
    """``value`` with its dicts, lists and tuples rebuilt and its strings interned, so that equal
    states pickle to equal bytes: ``pickle`` writes an object it has written before as a reference
    to it, so the bytes depended on which equal strings happened to be one object (a resumed run's
    optimizer keys were the strings of the checkpoint it loaded, an uninterrupted run's those of
    AdamW's source, one object with ``step``, the checkpoint's own key)."""
    kind = type(value)
    if kind is str:
        return sys.intern(value)
    if kind is dict:
        return {_canonical(k): _canonical(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return kind(_canonical(v) for v in value)
    return value


def load_checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=False)


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``model.state_dict()`` without its frozen parameters (``requires_grad=False``: a LoRA
    adapter's base weights), which the run reloads from the policy it started from. With every
    parameter trainable (full fine-tuning, the lab) it is the whole state dict."""
    frozen = {name for name, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}
    return {k: v for k, v in model.state_dict().items() if k not in frozen}


def load_trainable_state(model: torch.nn.Module, state: dict[str, torch.Tensor], where: Path) -> None:
    """Load a :func:`trainable_state` into ``model``: every key must be the model's, and every key it
    lacks must be a frozen parameter (else the checkpoint belongs to another model or adapter)."""
    from entflow.errors import ConfigError

    result = model.load_state_dict(state, strict=False)
    frozen = {name for name, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}
    missing = [k for k in result.missing_keys if k not in frozen]
    if result.unexpected_keys or missing:
        raise ConfigError(
            "resume",
            f"{where} does not fit this model (unexpected keys: {result.unexpected_keys[:3]}, "
            f"missing trainable keys: {missing[:3]})",
        )
