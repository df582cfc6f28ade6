"""verl's resume on a CPU, measured: a run killed after a checkpoint and resumed against the same run
uninterrupted, and two uninterrupted runs against each other.

Three runs of ``examples/verl/run_cpu.sh`` with the same command (``STEPS=4 SAVE_FREQ=2 METHOD=kl_cov``,
the tiny model, verl's rollout dumps on): A and B uninterrupted; C killed (its whole process session)
once its step-2 checkpoint is saved and step 2 logged, then the same command again, which resumes
from that checkpoint (verl's ``resume_mode=auto``). For A–B and A–C, per step: whether the prompts and
the sampled responses are the same (per step, as a multiset of (prompt, response, score), from verl's
``trainer.rollout_data_dir`` dumps), how many of verl's logged metrics are bit-equal (``verl.jsonl``,
without the ``timing_s/``, ``timing_per_token_ms/`` and ``perf/`` wall-time and memory metrics) and
the largest relative difference; and the actor's parameters at the step-2 and the final checkpoint
(each rank's FSDP shard, tensor by tensor).

    python benchmarks/verl_resume.py --workdir /tmp/vres --out docs/results/verl-cpu/resume/tiny-kl_cov.json
    python benchmarks/verl_resume.py --from-json docs/results/verl-cpu/resume/tiny-kl_cov.json

About 15 min on a 2-core machine (three runs and a resumed attempt, each mostly Ray's start).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _result import machine, markdown_table, write

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "verl" / "run_cpu.sh"
ENV = {"STEPS": "4", "SAVE_FREQ": "2", "METHOD": "kl_cov", "MODEL": "tiny"}
KILL_AFTER = 2
WALL_CLOCK = ("timing_s/", "timing_per_token_ms/", "perf/", "actor/perf/")
RUNS = {
    "A": "uninterrupted",
    "B": "uninterrupted, again",
    "C": f"killed after its step-{KILL_AFTER} checkpoint, then the same command (resumed)",
}


def command(out: Path) -> list[str]:
    return ["bash", str(SCRIPT), f"trainer.rollout_data_dir={out}/rollouts"]


def shown_command() -> str:
    env = " ".join(f"{k}={v}" for k, v in ENV.items())
    return f"{env} OUT=DIR bash examples/verl/run_cpu.sh trainer.rollout_data_dir=DIR/rollouts"


def start(out: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, **ENV, "OUT": str(out)}
    with open(log, "ab") as f:
        return subprocess.Popen(command(out), env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` (the run this script started: main_ppo, Ray, its workers)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getsid(int(proc.name)) == sid:
                os.kill(int(proc.name), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run(out: Path, timeout: float = 1800) -> float:
    t = time.time()
    p = start(out, out.with_suffix(".log"))
    try:
        rc = p.wait(timeout=timeout)
    finally:
        kill_session(p.pid)
    if rc:
        raise SystemExit(f"verl_resume.py: run_cpu.sh exited {rc}; see {out.with_suffix('.log')}")
    return time.time() - t


def checkpointed_and_logged(out: Path, step: int) -> bool:
    latest = out / "checkpoints" / "latest_checkpointed_iteration.txt"
    if not latest.is_file() or latest.read_text().strip() != str(step):
        return False
    return any(f'"step":{step},' in f.read_text() for f in (out / "attempts").glob("*.jsonl"))


def run_killed(out: Path, timeout: float = 1800) -> dict[str, Any]:
    """The first attempt of C, killed once step KILL_AFTER is checkpointed and logged."""
    t = time.time()
    p = start(out, out.with_suffix(".first.log"))
    try:
        while not checkpointed_and_logged(out, KILL_AFTER):
            if p.poll() is not None or time.time() - t > timeout:
                raise SystemExit(f"verl_resume.py: the first attempt ended or hung; see {out}.first.log")
            time.sleep(0.5)
        killed_after = time.time() - t
    finally:
        kill_session(p.pid)
        p.wait()
    if (out / "checkpoints" / f"global_step_{KILL_AFTER + 2}").exists():
        raise SystemExit("verl_resume.py: the first attempt finished before it was killed")
    return {"killed_after_s": round(killed_after, 1), "steps_logged_before_the_kill": logged_steps(out)}


def logged_steps(out: Path) -> list[int]:
    return sorted(
        {json.loads(x)["step"] for f in (out / "attempts").glob("*.jsonl") for x in f.read_text().split("\n") if x}
    )


def metrics(out: Path) -> dict[int, dict[str, float]]:
    rows = [json.loads(x) for x in (out / "verl.jsonl").read_text().splitlines() if x.strip()]
    return {r["step"]: {k: v for k, v in r["data"].items() if not k.startswith(WALL_CLOCK)} for r in rows}


def samples(out: Path, step: int) -> Counter:
    rows = [json.loads(x) for x in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines() if x.strip()]
    return Counter((r["input"], r["output"], r["score"]) for r in rows)


def rel(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def compare_step(a: dict, b: dict) -> dict[str, Any]:
    keys = sorted(set(a) | set(b))
    differ = {k: rel(a[k], b[k]) for k in keys if k in a and k in b and a[k] != b[k]}
    worst = max(differ, key=differ.get) if differ else None
    return {
        "metrics": len(keys),
        "bit_equal": sum(k in a and k in b and a[k] == b[k] for k in keys),
        "differing": sorted(differ),
        "largest_relative_difference": {"metric": worst, "value": differ[worst]} if worst else None,
        "entropy": [a.get("actor/entropy"), b.get("actor/entropy")],
        "score_mean": [a.get("critic/score/mean"), b.get("critic/score/mean")],
    }


def compare_params(a: Path, b: Path, step: int) -> dict[str, Any]:
    """Every rank's saved shard of the actor at ``step``, tensor by tensor."""
    import torch

    tensors = equal = 0
    max_abs = max_rel = 0.0
    for fa in sorted((a / "checkpoints" / f"global_step_{step}" / "actor").glob("model_world_size_*_rank_*.pt")):
        sa = torch.load(fa, weights_only=False, map_location="cpu")
        sb = torch.load(b / fa.relative_to(a), weights_only=False, map_location="cpu")
        for name, ta in sa.items():
            x, y = ta.to_local().double(), sb[name].to_local().double()
            tensors += 1
            equal += bool(torch.equal(x, y))
            d = (x - y).abs().max().item()
            max_abs = max(max_abs, d)
            max_rel = max(max_rel, d / max(x.abs().max().item(), 1e-30))
    return {"step": step, "tensors": tensors, "bit_equal": equal, "max_abs_diff": max_abs, "max_rel_diff": max_rel}


def compare(a: Path, b: Path) -> dict[str, Any]:
    ma, mb = metrics(a), metrics(b)
    steps = []
    for s in sorted(ma):
        sa, sb = samples(a, s), samples(b, s)
        prompts = Counter(p for p, _, _ in sa.elements()) == Counter(p for p, _, _ in sb.elements())
        steps.append({"step": s, "prompts_equal": prompts, "samples_equal": sa == sb, **compare_step(ma[s], mb[s])})
    return {
        "steps": steps,
        "params": [compare_params(a, b, KILL_AFTER), compare_params(a, b, max(ma))],
    }


def measure(workdir: Path) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    outs = {name: workdir / name for name in RUNS}
    wall = {"A": run(outs["A"]), "B": run(outs["B"])}
    kill = run_killed(outs["C"])
    wall["C, resumed attempt"] = run(outs["C"])
    if logged_steps(outs["C"]) != [1, 2, 3, 4]:
        raise SystemExit(f"verl_resume.py: C logged steps {logged_steps(outs['C'])}")
    return {
        "runs": RUNS,
        "run_command": shown_command(),
        "kill": kill,
        "wall_s": {k: round(v, 1) for k, v in wall.items()},
        "A-B": compare(outs["A"], outs["B"]),
        "A-C": compare(outs["A"], outs["C"]),
    }


GROUPS = ("rollout_corr/", "training/rollout_", "global_seqlen/", "actor/entflow/")


def grouped(keys: list[str]) -> str:
    """The differing metrics, those of one family counted together (``rollout_corr/* (7)``)."""
    counts: dict[str, int] = {}
    for k in keys:
        g = next((p + "*" for p in GROUPS if k.startswith(p)), k)
        counts[g] = counts.get(g, 0) + 1
    return ", ".join(f"`{g}`" + (f" ({n})" if n > 1 else "") for g, n in counts.items()) or "none"


def report(record: dict[str, Any]) -> str:
    r = record["results"]
    head = (
        f"Measured {record['date']} on {record['machine']}; entflow at {record.get('entflow_commit', '?')}, "
        f"{record.get('versions', '')}. Command: `{record['command']}`; each run: `{r['run_command']}`. "
        f"A and B: {r['runs']['A']}; C: {r['runs']['C']}, killed {r['kill']['killed_after_s']} s after its "
        f"start. Metrics: verl.jsonl without the wall-time and memory metrics; prompts and responses: "
        f"verl's rollout dumps, as a multiset per step."
    )
    header = ["runs", "step", "prompts, responses", "metrics bit-equal", "the metrics that differ", "actor/entropy"]
    rows = []
    for pair in ("A-B", "A-C"):
        for s in r[pair]["steps"]:
            same = s["prompts_equal"] and s["samples_equal"]
            rows.append(
                [
                    pair.replace("-", " vs "),
                    str(s["step"]),
                    "same" if same else ("same prompts, other responses" if s["prompts_equal"] else "differ"),
                    f"{s['bit_equal']} of {s['metrics']}",
                    grouped(s["differing"]),
                    " / ".join(f"{e:.9g}" for e in s["entropy"]),
                ]
            )
    params = [
        "runs",
        "actor parameters at step",
        "tensors (rank shards) bit-equal",
        "max abs difference",
        "max relative",
    ]
    prows = [
        [pair.replace("-", " vs "), str(p["step"]), f"{p['bit_equal']} of {p['tensors']}", f"{p['max_abs_diff']:.1e}",
         f"{p['max_rel_diff']:.1e}"]
        for pair in ("A-B", "A-C")
        for p in r[pair]["params"]
    ]  # fmt: skip
    return "\n".join([head, "", markdown_table(header, rows), "", markdown_table(params, prows)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default=None, help="the runs' folders (kept)")
    ap.add_argument("--out", default=None, help="write the result JSON here")
    ap.add_argument("--from-json", default=None, help="print the tables of a saved result; run nothing")
    args = ap.parse_args()
    if args.from_json:
        print(report(json.loads(Path(args.from_json).read_text())))
        return
    if not args.workdir:
        ap.error("--workdir is required to measure")
    results = measure(Path(args.workdir).absolute())
    from importlib.metadata import version

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src/entflow/integrations/verl", "examples/verl"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    extra = {
        "entflow_commit": commit.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else ""),
        "versions": ", ".join(f"{p} {version(p)}" for p in ("verl", "ray", "torch", "transformers")),
    }
    if args.out:
        record = write(args.out, results, **extra)
    else:
        import datetime

        record = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "machine": machine(),
                  "command": "python " + " ".join(sys.argv), **extra, "results": results}  # fmt: skip
    print(report(record))


if __name__ == "__main__":
    main()
