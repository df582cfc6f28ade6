"""A client of TensorBoard's own readers: every scalar of one run's event files as series.

The fast path is TensorBoard's data server (``tensorboard_data_server``, the Rust loader behind
``tensorboard --load_fast``: about 0.5 M scalars a second here), loaded once with every scalar kept
and queried over its gRPC API (:func:`read_with_data_server`); where it cannot run,
``EventAccumulator`` (pure Python: about 20 k scalars a second, so a 10,000-step log of 60 tags takes
~30 s; :func:`read_with_event_accumulator`). A step logged twice (a resumed run) keeps its latest
value. Used by the ``tensorboard`` reader of :mod:`entflow.analysis.log_readers`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["read_scalars", "read_with_data_server", "read_with_event_accumulator"]

Series = dict[str, tuple[np.ndarray, np.ndarray]]


def read_scalars(target: Path, fast: bool = True) -> Series:
    """``{tag: (steps [n], values [n])}`` of the run in the folder ``target``: through the data
    server when ``fast`` and it can run, else through ``EventAccumulator``."""
    series = read_with_data_server(target) if fast else None
    return read_with_event_accumulator(target) if series is None else series


def _latest_per_step(steps: np.ndarray, walls: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted by step; of a step logged twice, the value written last."""
    order = np.lexsort((walls, steps))
    steps, values = steps[order], values[order]
    keep = np.ones(steps.size, dtype=bool)
    keep[:-1] = steps[1:] != steps[:-1]
    return steps[keep], values[keep]


def read_with_event_accumulator(target: Path) -> Series:
    """Every scalar of the run in ``target`` through ``EventAccumulator``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(target), size_guidance={"scalars": 0})
    acc.Reload()
    series = {}
    for tag in acc.Tags().get("scalars", []):
        ev = acc.Scalars(tag)
        steps = np.fromiter((e.step for e in ev), dtype=np.float64, count=len(ev))
        walls = np.fromiter((e.wall_time for e in ev), dtype=np.float64, count=len(ev))
        vals = np.fromiter((e.value for e in ev), dtype=np.float64, count=len(ev))
        series[tag] = _latest_per_step(steps, walls, vals)
    return series


def _wait_for_load(proc: Any, drain: Any, timeout_s: float) -> bool:
    """True once the data server logs the end of its (only) load cycle; False if it exits first or
    ``timeout_s`` passes. Its stderr is read to the end by the thread ``drain`` (so a silent server
    cannot hang us, nor a chatty one fill the pipe)."""
    import threading

    done = threading.Event()

    def read() -> None:
        for raw in proc.stderr:
            if b"Finished load cycle" in raw:
                done.set()
        done.set()  # end of stderr: the server exited

    drain.append(threading.Thread(target=read, daemon=True))
    drain[0].start()
    return done.wait(timeout_s) and proc.poll() is None


def read_with_data_server(target: Path, timeout_s: float = 120.0) -> Series | None:
    """All scalars of the run in ``target`` through TensorBoard's data server; None if it cannot run."""
    import subprocess
    import tempfile

    try:
        import grpc
        from tensorboard.data import grpc_provider
        from tensorboard.data.proto import data_provider_pb2
        from tensorboard_data_server import server_binary
    except ImportError:
        return None
    binary = server_binary()
    if not binary or not os.path.isfile(binary):
        return None
    with tempfile.TemporaryDirectory(prefix="entflow_tb_") as tmp:
        port_file = Path(tmp) / "port"
        args = [binary, f"--logdir={target}", "--reload=once", "--port=0", f"--port-file={port_file}"]
        args += ["--samples-per-plugin=scalars=all", "--die-after-stdin", "--verbose"]
        try:
            proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError:
            return None
        drain: list[Any] = []
        loaded = False
        try:
            loaded = _wait_for_load(proc, drain, timeout_s)
            if not loaded:
                return None
            port = int(port_file.read_text().strip())
            channel = grpc.insecure_channel(f"localhost:{port}", options=[("grpc.max_receive_message_length", 1 << 30)])
            stub = grpc_provider.make_stub(channel)
            req = data_provider_pb2.ReadScalarsRequest()
            req.plugin_filter.plugin_name = "scalars"
            req.downsample.num_points = 2**31 - 1
            res = stub.ReadScalars(req, timeout=timeout_s)
            channel.close()
        except (grpc.RpcError, OSError, ValueError):
            return None
        finally:
            if not loaded:
                proc.kill()
            if proc.stdin:
                proc.stdin.close()  # --die-after-stdin
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if drain:
                drain[0].join(timeout=2)
            if proc.stderr and not (drain and drain[0].is_alive()):  # closing blocks on a pending read
                proc.stderr.close()
    series = {}
    for run in res.runs:
        for tag in run.tags:
            d = tag.data
            series[tag.tag_name] = _latest_per_step(
                np.asarray(d.step, dtype=np.float64), np.asarray(d.wall_time), np.asarray(d.value, dtype=np.float64)
            )
    return series
