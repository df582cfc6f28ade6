"""The headline claims' fresh series, run one at a time from a worktree at a fixed commit, resumed
from wherever it stopped, each run's facts committed as it finishes (docs/reproduction.md,
"Decisions").

    python experiments/sequential/series.py status lab     # verdicts so far and the runs still due
    python experiments/sequential/series.py run lab        # train the due runs, one at a time, niced
    python experiments/sequential/series.py judge lab      # write docs/results/sequential/lab_verdicts.json

The plan (``src/entflow/evidence/plans/<part>.json``, written by ``plan.py``) fixes each claim's
δ, looks, maximum and the series' seeds. Every run trains with the code of the commit that last
changed the plan file, checked out as a detached worktree (``.cache/series-<part>``, made if
missing), so later changes to the package cannot change a run; 1 torch thread (the lab's default)
and ``nice``. A run's facts record goes to ``docs/results/sequential/<part>/<setting>/<run>-s<seed>.json``
and is committed at once with ``git commit -- <path>`` (nothing else); ``judge`` re-judges the
committed records into ``docs/results/sequential/<part>_verdicts.json``, which the docs print. A claim is looked at when
all its runs of its next look's seeds are in; a decided claim's runs stop unless another open claim
needs them. Where a run stopped half way (a machine that went away) it trains again from the start:
runs are deterministic on one machine, and a seed on another machine is a fresh draw anyway.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PLANS = ROOT / "src" / "entflow" / "evidence" / "plans"
STOP = ".stop"  # create <worktree>/.stop to stop after the run in progress
# a real run writes a 1.6 GB resume checkpoint (and its temporary twin while saving) and 0.5 GB of
# final weights; on 2026-12-07 a full disk failed a checkpoint save mid-run, and CI's install beside it
MIN_FREE_GB = 8.0


def plan_path(part: str) -> Path:
    return PLANS / f"{part}.json"


def load_plan(part: str) -> dict[str, Any]:
    path = plan_path(part)
    if not path.is_file():
        raise SystemExit(f"no plan for {part!r}: {path} (write it with experiments/sequential/plan.py and commit it)")
    return json.loads(path.read_text())


def records_dir(part: str) -> Path:
    """The series' per-run records (not a facts set of ``--verify``: its verdicts are sequential)."""
    return ROOT / "docs" / "results" / "sequential" / part


def verdicts_path(part: str) -> Path:
    return ROOT / "docs" / "results" / "sequential" / f"{part}_verdicts.json"


def plan_commit(part: str) -> str:
    """The commit that last changed the part's plan file: the code every run of the series uses."""
    rel = plan_path(part).relative_to(ROOT)
    out = subprocess.run(["git", "log", "-1", "--format=%H", "--", str(rel)], cwd=ROOT, capture_output=True, text=True)
    commit = out.stdout.strip()
    if not commit:
        raise SystemExit(f"{rel} is not committed: commit the plan before the first run")
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", str(rel)], cwd=ROOT).returncode:
        raise SystemExit(f"{rel} has uncommitted changes: commit them (with the reason) before running")
    return commit


# ------------------------------------------------------------------------------------------ judging
def judge(part: str) -> dict[str, Any]:
    """Every claim's verdict from the committed records, and the runs still due (seed order)."""
    from entflow.evidence.claims import load_registry
    from entflow.evidence.decision import (
        CONTINUE,
        NOT_DECIDABLE,
        Design,
        family_decisions,
        margins,
        sequential_decision,
    )
    from entflow.evidence.records import read_record, record_name

    plan = load_plan(part)
    claims = {c.id: c for c in load_registry().claims}
    seeds = plan["seeds"]
    folder = records_dir(part)

    def value(cid: str, seed: int) -> float | None:
        c = claims[cid]
        files = {r: folder / c.setting / record_name(r, seed) for r in c.runs}
        if not all(f.is_file() for f in files.values()):
            return None
        return c.value({r: read_record(f)["facts"] for r, f in files.items()})

    rows: dict[str, dict[str, Any]] = {}
    series: dict[str, list[float]] = {}
    for cid, p in plan["claims"].items():
        c = claims[cid]
        if p["decision"] == NOT_DECIDABLE:
            rows[cid] = {"verdict": NOT_DECIDABLE, "why": p["why"], "n": 0}
            continue
        vals: list[float] = []
        for seed in seeds[: p["plan"]["maximum"]]:
            v = value(cid, seed)
            if v is None:
                break
            vals.append(v)
        series[cid] = vals
        design = Design(tuple(p["plan"]["looks"]), p["alpha"])
        if not c.family:
            res = sequential_decision(margins(vals, c.rule, c.bound), p["delta"], design)
            rows[cid] = {**res.as_dict(), "values": vals}
    families = {claims[cid].family for cid in series if claims[cid].family}
    for fam in sorted(families):
        members = {cid: (margins(series[cid], claims[cid].rule, claims[cid].bound), plan["claims"][cid]["delta"],
                         Design(tuple(plan["claims"][cid]["plan"]["looks"]), 0.025))
                   for cid in series if claims[cid].family == fam}  # fmt: skip
        for cid, res in family_decisions(members).items():
            rows[cid] = {**res.as_dict(), "values": series[cid], "family": fam}
    due: list[tuple[str, str, int]] = []
    for cid, row in rows.items():
        if row["verdict"] != CONTINUE:
            continue
        c, p = claims[cid], plan["claims"][cid]
        nxt = next(n for n in p["plan"]["looks"] if n > len(series[cid]))
        for seed in seeds[:nxt]:
            for r in c.runs:
                if not (folder / c.setting / record_name(r, seed)).is_file():
                    due.append((c.setting, r, seed))
    order = {s: i for i, s in enumerate(seeds)}
    due = sorted(set(due), key=lambda d: (order[d[2]], d[0], d[1]))
    return {"part": part, "claims": rows, "due": due}


def write_judged(part: str) -> Path:
    """``docs/results/sequential/<part>_verdicts.json``: the verdicts with the plan they follow."""
    from entflow.files import json_safe

    res = judge(part)
    out = verdicts_path(part)
    doc = {
        "part": part,
        "plan": str(plan_path(part).relative_to(ROOT)),
        "plan_commit": plan_commit(part),
        "records": str(records_dir(part).relative_to(ROOT)),
        "claims": res["claims"],
        "runs_due": [list(d) for d in res["due"]],
    }
    out.write_text(json.dumps(json_safe(doc), indent=1, allow_nan=False) + "\n")
    return out


# ------------------------------------------------------------------------------------------ running
def worktree(part: str) -> Path:
    """The detached worktree at the plan's commit (made, or moved to that commit, if needed)."""
    commit = plan_commit(part)
    where = ROOT / ".cache" / f"series-{part}"
    if where.is_dir():
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True).stdout.strip()
        if head == commit:
            return where
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], cwd=ROOT, check=True)
    subprocess.run(["git", "worktree", "prune"], cwd=ROOT, check=True)
    subprocess.run(["git", "worktree", "add", "--detach", str(where), commit], cwd=ROOT, check=True)
    return where


def train_one(part: str, setting: str, run: str, seed: int, out: Path) -> Path:
    """Train one run as ``entflow reproduce`` does (its preset, the common overrides, no audit) into
    ``out``; returns its record. Runs inside the worktree's own code (``run`` starts it there)."""
    from entflow.evidence.records import record_name
    from entflow.evidence.reproduce import registry, reproduce

    s = registry().settings[setting]
    common = list(s.runner.common_overrides)  # its kind's (entflow.settings: the lab's or a real model's)
    reproduce({setting: s.base()}, common, [seed], out, jobs=1, runs=[run])
    return out / "facts" / setting / record_name(run, seed)


def git_commit(paths: list[Path], message: str) -> None:
    rel = [str(p.relative_to(ROOT)) for p in paths]
    for attempt in range(30):
        add = subprocess.run(["git", "add", "--", *rel], cwd=ROOT, capture_output=True, text=True)
        done = (
            add.returncode == 0
            and subprocess.run(
                ["git", "commit", "-q", "-m", message, "--", *rel], cwd=ROOT, capture_output=True, text=True
            ).returncode
            == 0
        )
        if done:
            return
        time.sleep(2 + attempt)  # another git command holds the index
    raise SystemExit(f"could not commit {rel}")


def run(part: str, max_runs: int | None = None) -> None:
    """Train the due runs one at a time (niced, in the worktree), committing each record as it comes,
    until nothing is due, ``max_runs`` ran, or ``<worktree>/.stop`` exists. The verdicts file (and
    the docs printed from it) is written by ``judge`` and committed with the docs, so that a record
    landing never leaves a printed table stale."""
    from entflow.evidence.records import record_name

    tree = worktree(part)
    out = tree / "runs" / f"seq-{part}"
    ran = 0
    while max_runs is None or ran < max_runs:
        if (tree / STOP).exists():
            print("stop file found: stopping", flush=True)
            return
        due = judge(part)["due"]
        if not due:
            print("nothing due: every planned claim is decided or at its maximum", flush=True)
            break
        setting, name, seed = due[0]
        free_gb = shutil.disk_usage(tree).free / 2**30
        if free_gb < MIN_FREE_GB:
            raise SystemExit(f"{free_gb:.1f} GB free on {tree}'s disk, under the {MIN_FREE_GB:.0f} GB a run needs")
        t0 = time.time()
        env = {**os.environ, "PYTHONPATH": str(tree / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        # one folder per seed: reproduce names a single seed's run folder by the run alone, so two
        # seeds in one folder would meet (the second refused as a changed resume)
        where = out / f"s{seed}"
        cmd = ["nice", "-n", "10", sys.executable, str(tree / "experiments" / "sequential" / "series.py"),
               "train-one", part, setting, name, str(seed), str(where)]  # fmt: skip
        subprocess.run(cmd, cwd=tree, env=env, check=True)
        rec = where / "facts" / setting / record_name(name, seed)
        dest = records_dir(part) / setting / rec.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(rec, dest)
        try:
            left = str(len(judge(part)["due"]))
        except Exception as err:  # the record lands even when the main tree's code is mid-change
            print(f"judging after {rec.name} failed ({err!r}); committing the record", flush=True)
            left = "?"
        git_commit(
            [dest],
            f"seq-{part}: {setting}/{name} seed {seed} trained in {time.time() - t0:.0f} s at the plan's commit "
            f"{plan_commit(part)[:7]} ({left} run{'' if left == '1' else 's'} due at the open claims' next looks)",
        )
        drop_resume_state(where / setting / name)
        ran += 1
        print(f"{setting}/{name} seed {seed}: {time.time() - t0:.0f} s; {left} due", flush=True)


def drop_resume_state(run_dir: Path) -> None:
    """Remove a finished run's resume checkpoint (``checkpoints/last.pt``, 1.6 GB for a real run): its
    record is committed and a finished run never resumes; its final weights stay."""
    from entflow.trainer.loop import checkpoint_path

    checkpoint_path(run_dir).unlink(missing_ok=True)


def print_status(part: str) -> None:
    res = judge(part)
    for cid, row in res["claims"].items():
        n = row.get("n", 0)
        extra = f" mean margin {row['mean']:+.4f} [{row['low']:+.4f}, {row['high']:+.4f}]" if n >= 3 else ""
        print(f"{cid:34s} {row['verdict']:30s} n={n}{extra}")
    print(f"{len(res['due'])} runs due: {res['due'][:6]}{' …' if len(res['due']) > 6 else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("status", "run", "judge"):
        p = sub.add_parser(name)
        p.add_argument("part", choices=["lab", "real"])
        if name == "run":
            p.add_argument("--max-runs", type=int, default=None)
    t = sub.add_parser("train-one", help="(used by run, inside the worktree)")
    t.add_argument("part")
    t.add_argument("setting")
    t.add_argument("run")
    t.add_argument("seed", type=int)
    t.add_argument("out", type=Path)
    a = ap.parse_args()
    if a.cmd == "status":
        print_status(a.part)
    elif a.cmd == "judge":
        print(write_judged(a.part))
    elif a.cmd == "run":
        run(a.part, a.max_runs)
    else:
        import entflow

        if not Path(entflow.__file__).resolve().is_relative_to(Path(__file__).resolve().parents[2]):
            raise SystemExit(f"entflow imported from {entflow.__file__}, not from this worktree")
        print(train_one(a.part, a.setting, a.run, a.seed, a.out))


if __name__ == "__main__":
    main()
