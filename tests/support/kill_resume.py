"""Kill-and-resume runs of ``entflow train``: a run SIGKILLed at a named point by the
trainer's test hook (``ENTFLOW_TEST_KILL_AT``, :mod:`entflow.trainer.faults`), resumed with
``--resume``, compared with an uninterrupted run of the same config byte for byte."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

TEMPORARY = ".*.*"  # what files.atomic_file leaves of an unfinished write (".last.pt.k3j9x_")


def _environment(kill_at: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ENTFLOW_TEST_KILL_AT"}
    return env if kill_at is None else env | {"ENTFLOW_TEST_KILL_AT": kill_at}


def _check(returncode: int, kill_at: str | None, output: str) -> str:
    if kill_at is None:
        assert returncode == 0, output[-3000:]
    else:
        assert returncode == -signal.SIGKILL, (kill_at, returncode, output[-3000:])
    return output


class TrainServer:
    """``entflow train`` processes forked from one that has imported torch, transformers and scipy
    (``support/train_server.py``): the same command, without the ~5 s of imports each time."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("train_server.py"))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=_environment(None),
            start_new_session=True,  # its children with it, should one hang
        )
        self._n = 0

    def train(self, args: list[str], kill_at: str | None = None, timeout: float = 240) -> str:
        """``entflow train ARGS`` in a child; with ``kill_at`` ("PHASE:STEP") it SIGKILLs itself
        there, which is checked. Returns its output (stdout and stderr)."""
        import selectors

        self._n += 1
        log = self.logs / f"train-{self._n}.log"
        request = {
            "argv": ["train", *args],
            "env": {"ENTFLOW_TEST_KILL_AT": kill_at} if kill_at else {},
            "log": str(log),
        }
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self._proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                os.killpg(self._proc.pid, signal.SIGKILL)
                raise TimeoutError(f"entflow train {args} ran past {timeout} s")
        answer = self._proc.stdout.readline()
        assert answer, f"the train server exited: {self._proc.wait()}"
        return _check(json.loads(answer)["returncode"], kill_at, log.read_text())

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=60)
        self._proc.stdout.close()


def entflow_train(args: list[str], kill_at: str | None = None, timeout: float = 240) -> str:
    """``python -m entflow train ARGS`` in a fresh process; with ``kill_at`` ("PHASE:STEP") it
    SIGKILLs itself there, which is checked. Returns its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "entflow", "train", *args],
        capture_output=True,
        text=True,
        env=_environment(kill_at),
        timeout=timeout,
    )
    return _check(done.returncode, kill_at, done.stderr)


def kill_and_resume(server: TrainServer, run_dir: Path, args: list[str], kill_at: str) -> str:
    """Train ``args`` (which name ``run_dir``) killed at ``kill_at``, then resume it to the end;
    returns the resume's output."""
    server.train(args, kill_at)
    return server.train(["--resume", str(run_dir)])


def steps_of(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def _same(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def assert_same_run(reference: Path, run: Path) -> None:
    """``run`` (killed and resumed) is ``reference`` (uninterrupted): ``metrics.jsonl``,
    ``samples.jsonl``, the last checkpoint (weights, optimizer, method state, RNG states, step) and
    the final model byte for byte; ``timing.jsonl`` (wall-clock times) one line per step, in order;
    TensorBoard's scalars the same values at the same steps; no unfinished write left behind."""
    # the checkpoint read back first: a failure names the entry that differs
    _same(
        torch.load(reference / "checkpoints/last.pt", weights_only=False),
        torch.load(run / "checkpoints/last.pt", weights_only=False),
        "last.pt",
    )
    for name in ("metrics.jsonl", "samples.jsonl", "checkpoints/last.pt", "checkpoints/final/model.safetensors"):
        assert (run / name).read_bytes() == (reference / name).read_bytes(), name
    assert steps_of(run / "timing.jsonl") == steps_of(reference / "timing.jsonl")
    assert not list(run.glob(TEMPORARY)) and not list((run / "checkpoints").glob(TEMPORARY))
    if importlib.util.find_spec("tensorboard") is not None:  # the `lab` extra; without it no events are written
        assert tensorboard_scalars(run) == tensorboard_scalars(reference)


def tensorboard_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard shows for ``run`` (its own reader: a resumed run's purged steps are
    gone), as ``{tag: [(step, value), ...]}``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in sorted(acc.Tags()["scalars"])}
