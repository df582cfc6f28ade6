"""verl's trainer across two Ray nodes on this machine, and the loss of one
(``examples/verl/run_cpu.sh`` with ``NODES=2``).

1. ``NODES=2 STEPS=3 SAVE_FREQ=1 METHOD=kl_cov``: a head and a worker node (``ray start``), one
   actor worker on each (``trainer.nnodes=2``, ``trainer.n_gpus_per_node=1``, gloo between them).
   Once step 1 is checkpointed and logged, the worker node's raylet is killed (SIGKILL: the node
   is gone, as when a machine fails). run_cpu.sh must end non-zero, not hang: Ray's error for the
   lost actor raised in main_ppo (``ActorDiedError``, or ``ActorUnavailableError`` when verl's
   TaskRunner itself was on that node), or, where Ray raises nothing, main_ppo stopped by the script
   after ``NODE_LOSS_GRACE``; then its own line naming the lost node, which of the two it was, and
   how to resume; no process of either node left behind.
2. The same command again: a fresh two-node cluster; verl resumes from the last checkpoint
   (``resume_mode=auto``) and logs the remaining steps, each once; ``OUT/ray-nodes.json`` (Ray's
   node and actor tables after the run) shows both nodes alive and one of verl's actor workers and
   one rollout server on each.

Minutes on 2 cores (two runs, each mostly starting Ray), so it runs where asked:
``ENTFLOW_VERL_NODES=1`` (the ``.ci/verl-nodes`` lane), not in the README's test command.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("ENTFLOW_VERL_NODES") != "1",
    reason="two Ray nodes and two verl runs take minutes on 2 cores; set ENTFLOW_VERL_NODES=1 (.ci/verl-nodes)",
)
pytest.importorskip("verl")
pytest.importorskip("transfer_queue", reason="verl's rollout stack (entflow[verl])")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "verl" / "run_cpu.sh"
ENV = {"NODES": "2", "STEPS": "3", "SAVE_FREQ": "1", "METHOD": "kl_cov", "PYTHON": sys.executable}


def start(out: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, **ENV, "OUT": str(out)}
    with open(log, "wb") as f:
        return subprocess.Popen(
            ["bash", str(SCRIPT)], env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )


def session(sid: int) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.getsid(int(p.name)) == sid:
                    pids.append(int(p.name))
            except ProcessLookupError:
                pass
    return pids


def kill_session(sid: int) -> None:  # what is left of a run this test started
    for pid in session(sid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def children(pid: int) -> dict[int, str]:
    """pid -> command name of ``pid``'s children."""
    out = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                stat = (p / "stat").read_text()
            except OSError:
                continue
            comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
            if int(rest[1]) == pid:
                out[int(p.name)] = comm
    return out


def cluster(out: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (out / "ray-cluster.env").read_text().split())


def steps_of(path: Path) -> list[int]:
    return [json.loads(x)["step"] for x in path.read_text().splitlines() if x.strip()]


def checkpointed_and_logged(out: Path, step: int) -> bool:
    latest = out / "checkpoints" / "latest_checkpointed_iteration.txt"
    if not latest.is_file() or latest.read_text().strip() != str(step):
        return False
    return any(step in steps_of(f) for f in (out / "attempts").glob("*.jsonl"))


def test_two_nodes_a_lost_node_and_the_resume(tmp_path):
    out = tmp_path / "run"
    log = tmp_path / "first.log"
    run = start(out, log)
    try:
        t = time.time()
        while not checkpointed_and_logged(out, 1):
            assert run.poll() is None, f"run_cpu.sh ended before step 1 was saved:\n{log.read_text()[-4000:]}"
            assert time.time() - t < 1200, f"no checkpoint at step 1 after 1200 s:\n{log.read_text()[-4000:]}"
            time.sleep(0.5)
        nodes = cluster(out)
        raylets = [pid for pid, comm in children(int(nodes["WORKER_PID"])).items() if comm == "raylet"]
        assert len(raylets) == 1, children(int(nodes["WORKER_PID"]))
        os.kill(raylets[0], signal.SIGKILL)  # the worker node is gone
        killed = time.time()
        rc = run.wait(timeout=420)  # NODE_LOSS_GRACE (120 s) and the teardown (<= 90 s) at most, and then some
        ended_after = time.time() - killed
    finally:
        kill_session(run.pid)
    text = log.read_text()
    assert rc != 0, text[-4000:]
    # main_ppo ends one of two ways. Ray's error for an actor lost with its node: ActorDiedError where
    # the trainer (verl's TaskRunner) survives and calls a dead actor worker, ActorUnavailableError where
    # the TaskRunner itself was on the lost node (Ray places it on either). Or, where the node went mid-
    # rollout, the surviving actors wait on it and Ray raises nothing: run_cpu.sh stops main_ppo after
    # NODE_LOSS_GRACE (seen in CI on 2026-12-07) and says so instead of pointing at an error above
    error = re.search(r"ray\.exceptions\.(ActorDiedError|ActorUnavailableError|NodeDiedError)", text)
    last = int((out / "checkpoints" / "latest_checkpointed_iteration.txt").read_text())
    line = [x for x in text.splitlines() if x.startswith("run_cpu.sh: Ray's worker node died")]
    assert len(line) == 1, text[-4000:]
    assert f"rerun the same command to resume from the checkpoint of step {last}" in line[0], text[-4000:]
    stopped = "main_ppo still running 120 s after Ray's worker node was lost: stopped" in text
    if stopped:
        assert rc == 137 and "was stopped after 120 s (exit 137)" in line[0], line[0]  # 128 + SIGKILL
    else:
        assert error, text[-4000:]
        assert "main_ppo ended (exit" in line[0] and "its error above" in line[0], line[0]
    for pid in (int(nodes["HEAD_PID"]), int(nodes["WORKER_PID"])):
        assert session(pid) == [], f"processes of the node started as {pid} left: {session(pid)}"
    print(
        f"worker raylet killed after step {last}'s checkpoint: run_cpu.sh ended {ended_after:.0f} s later, "
        f"exit {rc}, " + ("main_ppo stopped by run_cpu.sh" if stopped else f"main_ppo's error {error[1]}")
    )

    log2 = tmp_path / "second.log"
    rerun = start(out, log2)
    try:
        rc = rerun.wait(timeout=1500)
    finally:
        kill_session(rerun.pid)
    assert rc == 0, log2.read_text()[-4000:]
    attempts = sorted((out / "attempts").glob("*.jsonl"))
    assert steps_of(attempts[-1]) == list(range(last + 1, 4)), (steps_of(attempts[-1]), last)
    assert steps_of(out / "verl.jsonl") == [1, 2, 3]
    placed = json.loads((out / "ray-nodes.json").read_text())
    assert sorted((n["role"], n["alive"]) for n in placed["nodes"]) == [("head", True), ("worker", True)]
    assert placed["by_node"]["WorkerDict"] == {"head": 1, "worker": 1}, placed["by_node"]
    assert placed["by_node"]["CPURolloutServer"] == {"head": 1, "worker": 1}, placed["by_node"]
    again = cluster(out)
    for pid in (int(again["HEAD_PID"]), int(again["WORKER_PID"])):
        assert session(pid) == [], f"processes of the node started as {pid} left: {session(pid)}"
