"""Rerun the lab verdicts that were published with per-seed values only, so that each gets per-run
facts records: the full 5-seed run (demo and regime settings, seeds 0–4), KL-Cov's 10-seed
follow-up (seeds 10–19) and the knob sweep's follow-ups (seeds 20–24). Each part trains as
``entflow reproduce`` does (the same presets, common overrides and seeds) into ``runs/<part>/``.

It resumes across machines and sessions: before a part it copies the records kept under
``experiments/reruns/kept/<part>/facts/`` (working data until the part is judged and published, so
not under docs/) back into ``runs/<part>/facts/`` (reproduce takes a run whose record matches its
config from the record), and after each chunk it copies the new records there, to be committed.
The full run trains in chunks of run types. A run's record is written to ``runs/<part>/facts/`` as
soon as it finishes, so an interruption loses only the runs in training: to keep a partly trained
chunk across machines, copy ``runs/<part>/facts`` into the kept folder and commit it.

    python experiments/reruns/lab_facts_rerun.py all          # every part, resuming
    python experiments/reruns/lab_facts_rerun.py full5 grpo,kl_cov
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from entflow.evidence.reproduce import registry, reproduce
from entflow.settings.lab import COMMON_OVERRIDES

ROOT = Path(__file__).resolve().parents[2]
KEEP = ROOT / "experiments" / "reruns" / "kept"
FULL5_CHUNKS = [
    "grpo,grpo_law",
    "clip_higher,clip_cov",
    "kl_cov,positive_only",
    "negative_only,pos_adv_reweight",
    "steer,quadrant_uplift",
    "quadrant_suppress,grpo_strict",
    "grpo_random_reward,opefo_strict",
    "ppl_shaping,position_shaping",
    "adaptive_entropy,cispo",
    "gspo,sapo",
    "ce_gppo,archer",
    "siren,entropic",
    "aepo",
]


def _copy(src: Path, dst: Path) -> None:
    if src.is_dir():
        shutil.copytree(src, dst, dirs_exist_ok=True)


def run_part(part: str, runs: list[str] | None = None) -> dict:
    """Train (or take from records) one part; returns reproduce's result."""
    name = part.removesuffix("-judge")
    out = Path("runs") / name
    _copy(KEEP / name / "facts", out / "facts")
    settings = registry().settings
    regime = {"regime": settings["regime"].base()}
    common = list(COMMON_OVERRIDES)
    if part == "klcov10":
        res = reproduce(regime, common, list(range(10, 20)), out, jobs=2, claims=["exploration-klcov"])
    elif part == "sweep20":
        claims = ["sweep-clip-cov", "sweep-steer", "sweep-clip-higher"]
        res = reproduce(regime, common, list(range(20, 25)), out, jobs=2, claims=claims)
    elif part in ("full5", "full5-judge"):
        bases = {n: settings[n].base() for n in ("demo", "regime")}
        if part == "full5":
            res = reproduce(bases, common, [0, 1, 2, 3, 4], out, jobs=2, runs=runs, registered_seeds_only=True)
        else:  # the published file's claims, judged from every record
            old = json.loads((ROOT / "docs" / "results" / "full_5seed_claims.json").read_text())
            ids = [c["id"] for c in old["claims"]]
            res = reproduce(bases, common, [0, 1, 2, 3, 4], out, jobs=2, claims=ids, registered_seeds_only=True)
    else:
        raise SystemExit(f"unknown part {part!r}")
    _copy(out / "facts", KEEP / name / "facts")
    return res


def main() -> None:
    args = sys.argv[1:]
    every = [("klcov10", None), ("sweep20", None)]
    every += [("full5", c.split(",")) for c in FULL5_CHUNKS] + [("full5-judge", None)]
    steps = every if args == ["all"] else [(args[0], args[1].split(",") if len(args) > 1 else None)]
    for part, runs in steps:
        t0 = time.time()
        run_part(part, runs)
        print(f"{part} {runs or ''} done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
