"""The power plan of the headline claims' fresh series (docs/reproduction.md, "Decisions"): for each
headline claim, the noise of its margin from the committed per-seed values, the looks and maximum
that give 80 % power at its declared δ (:func:`entflow.evidence.decision.plan_claim`), and whether
the budget allows that maximum. Writes ``src/entflow/evidence/plans/<part>.json``; commit it before
the series' first run (the series' driver, ``series.py``, refuses to run without it, and runs the
code of the commit that last changed it).

    python experiments/sequential/plan.py lab --budget-h 12 --run-cost demo=S regime=S
    python experiments/sequential/plan.py real --budget-h 12 --run-cost real_v2=S

Noise. A claim's σ is the sample std (ddof 1) of its margins s·(x − b) over every earlier draw
listed in SOURCES for its setting: a published claims JSON's per-seed values where no per-run
records exist (the first full run), else the values recomputed from the per-run records of a facts
set with the registry's own metric (:meth:`Claim.value`). The same seed on another machine is a
fresh draw, so both machines' values count (docs/results/history.json).

Budget. A run's cost is the wall seconds of one run of its setting measured on this machine
(``--run-cost``, one run at a time). The planned maximum of a claim costs its runs × maximum seeds;
runs shared by claims are paid once, at the largest maximum among them. Claims are admitted
cheapest first while the total stays within the budget; a claim that needs more than ``--cap``
seeds, or that does not fit, is "not decidable at this budget", declared here, and never run.
A family (Holm) runs the largest number k of its headline members whose k cheapest (alone) are all
decidable within the budget at α / k (the first step of the step-down); the fresh series is a new
experiment, corrected over the claims it judges.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path
from typing import Any

from entflow.evidence.claims import Claim, load_registry
from entflow.evidence.decision import ALPHA, LADDER, NOT_DECIDABLE, POWER, margins, plan_claim
from entflow.evidence.records import cpu_model, read_record, record_name
from entflow.files import json_safe

ROOT = Path(__file__).resolve().parents[2]
PLANS = ROOT / "src" / "entflow" / "evidence" / "plans"
# earlier draws of each part: (kind, path, what it is). "claims": a published claims JSON's per-seed
# values (used for claims it lists); "facts": a facts set's per-run records (values recomputed)
SOURCES: dict[str, list[tuple[str, str, str]]] = {
    "lab": [
        (
            "claims",
            "docs/results/full_5seed_claims.json",
            "the first full run, seeds 0–4 (2026-11-25, AMD EPYC; no per-run records)",
        ),
        (
            "facts",
            "docs/results/facts/full5",
            "the full run retrained, seeds 0–4 (2026-11-28/29, Intel Xeon; per-run records)",
        ),
        ("facts", "docs/results/facts/passk40", "the pass@k objectives' run, seeds 40–44 (per-run records)"),
    ],
    "real": [
        ("facts", "docs/results/facts/real-v2", "the real-v2 study, seeds 0–7 (per-run records)"),
    ],
}
SETTINGS = {"lab": ("demo", "regime"), "real": ("real_v2",)}
# the fresh series' seeds: never used by any earlier run (those used 0–64 and the design seeds 100–102)
FIRST_SEED = {"lab": 1000, "real": 2000}


def earlier_values(claim: Claim, part: str) -> list[dict[str, Any]]:
    """The claim's per-seed values in each earlier draw of ``part``: [{source, what, seeds, values}]."""
    out = []
    for kind, rel, what in SOURCES[part]:
        path = ROOT / rel
        if kind == "claims":
            rows = {r["id"]: r for r in json.loads(path.read_text())["claims"]}
            row = rows.get(claim.id)
            if row and row.get("values"):
                seeds = row.get("preregistered_seeds") or []
                out.append({"source": rel, "what": what, "seeds": list(seeds), "values": list(row["values"])})
            continue
        folder = path / claim.setting
        if not folder.is_dir():
            continue
        seeds = sorted({int(p.stem.rsplit("-s", 1)[1]) for p in folder.glob("*-s*.json")})
        vals, used = [], []
        for seed in seeds:
            files = {r: folder / record_name(r, seed) for r in claim.runs}
            if not all(f.is_file() for f in files.values()):
                continue
            facts = {r: read_record(f)["facts"] for r, f in files.items()}
            try:
                v = claim.value(facts)
            except (KeyError, TypeError, ValueError):
                continue
            if v is not None and math.isfinite(v):
                vals.append(v)
                used.append(seed)
        if vals:
            out.append({"source": rel, "what": what, "seeds": used, "values": vals})
    return out


def run_costs(claim: Claim) -> list[str]:
    """The run keys a claim's fresh series trains: ``<setting>/<run>``."""
    return [f"{claim.setting}/{r}" for r in claim.runs]


def plan_rows(
    claims: list[Claim], part: str, family_size: dict[str, int], cap: int, sims: int
) -> dict[str, dict[str, Any]]:
    """Each claim's noise and looks at its level (α, or α / m in a family of m)."""
    rows: dict[str, dict[str, Any]] = {}
    for c in claims:
        draws = earlier_values(c, part)
        values = [v for d in draws for v in d["values"]]
        m = margins(values, c.rule, c.bound)
        sigma = float(m.std(ddof=1)) if m.size >= 2 else math.nan
        alpha = ALPHA / family_size[c.family] if c.family else ALPHA
        row: dict[str, Any] = {
            "setting": c.setting,
            "runs": run_costs(c),
            "rule": c.rule,
            "bound": c.bound,
            "delta": c.headline.delta,
            "delta_reason": c.headline.reason,
            "declared": c.headline.declared,
            "family": c.family,
            "family_size": family_size.get(c.family) if c.family else None,
            "alpha": alpha,
            "earlier": draws,
            "n_earlier": int(m.size),
            "mean_margin_earlier": float(m.mean()) if m.size else math.nan,
            "sigma": sigma,
        }
        if not math.isfinite(sigma) or sigma <= 0:
            row |= {"decision": NOT_DECIDABLE, "why": "no noise estimate: fewer than 2 earlier values"}
        else:
            p = plan_claim(sigma, c.headline.delta, cap, alpha=alpha, sims=sims)
            row |= {"plan": p}
            if not p["decidable"]:
                fixed = p["fixed_sample_seeds"]
                why = f"80 % power at δ needs more than {cap} seeds (a fixed-size test: {fixed})"
                row |= {"decision": NOT_DECIDABLE, "why": why}
        rows[c.id] = row
    return rows


def admit(rows: dict[str, dict[str, Any]], budget_s: float, cost: dict[str, float]) -> tuple[float, dict[str, int]]:
    """Admit the decidable claims cheapest first while the runs' cost at their maxima fits the
    budget; the others become not decidable at this budget. Returns (cost, seeds paid per run)."""
    paid: dict[str, int] = {}  # run key -> seeds paid for
    spent = 0.0

    def extra(row: dict[str, Any]) -> float:
        n = row["plan"]["maximum"]
        return sum(cost[k.split("/")[0]] * max(0, n - paid.get(k, 0)) for k in row["runs"])

    open_ = [cid for cid, r in rows.items() if "decision" not in r]
    while open_:
        cid = min(open_, key=lambda i: (extra(rows[i]), i))
        open_.remove(cid)
        row, more = rows[cid], extra(rows[cid])
        if spent + more > budget_s:
            row |= {"decision": NOT_DECIDABLE,
                    "why": f"its maximum ({row['plan']['maximum']} seeds) needs {more / 3600:.1f} h of runs not yet "
                           f"paid for, more than the {(budget_s - spent) / 3600:.1f} h left of the budget"}  # fmt: skip
            continue
        spent += more
        for k in row["runs"]:
            paid[k] = max(paid.get(k, 0), row["plan"]["maximum"])
        row |= {"decision": "planned", "cost_s": round(more, 1)}
    return spent, paid


def make_plan(part: str, budget_s: float, cost: dict[str, float], cap: int, sims: int) -> dict[str, Any]:
    claims = [c for c in load_registry().claims if c.headline and c.setting in SETTINGS[part] and not c.retired]
    # a family of the fresh series is corrected over the members it runs (Holm over the claims it
    # judges): with k members each is planned at α / k. The family runs the largest k whose k cheapest
    # members (cheapest alone, at α) are all decidable within the budget at α / k; the others are not
    # decidable at this budget, with the reason of the k that was tried last for them
    fams = sorted({c.family for c in claims if c.family})
    alone = plan_rows(claims, part, dict.fromkeys(fams, 1), cap, sims)
    admit({cid: dict(r) for cid, r in alone.items()}, math.inf, cost)

    def cost_alone(cid: str) -> float:
        r = alone[cid]
        if "plan" not in r or not r["plan"]["decidable"]:
            return math.inf
        return sum(cost[k.split("/")[0]] for k in r["runs"]) * r["plan"]["maximum"]

    chosen: set[str] = {c.id for c in claims if not c.family}
    tried: dict[str, dict[str, Any]] = {}
    for fam in fams:
        ids = sorted((c.id for c in claims if c.family == fam), key=lambda i: (cost_alone(i), i))
        for k in range(len(ids), 0, -1):
            subset = set(ids[:k])
            rows = plan_rows([c for c in claims if c.id in chosen | subset], part, {fam: k}, cap, sims)
            admit(rows, budget_s, cost)
            tried |= {cid: rows[cid] for cid in subset if cid not in tried or k < len(ids)}
            if all(rows[cid]["decision"] == "planned" for cid in subset):
                chosen |= subset
                break
    size = {fam: sum(1 for c in claims if c.family == fam and c.id in chosen) for fam in fams}
    rows = plan_rows([c for c in claims if c.id in chosen], part, size, cap, sims)
    spent, paid = admit(rows, budget_s, cost)
    rows = {c.id: rows.get(c.id) or tried[c.id] for c in claims}  # registry order
    for cid, r in rows.items():
        if cid not in chosen and r["decision"] == "planned":  # planned only within a smaller family try
            r |= {"decision": NOT_DECIDABLE, "why": "the family's budget goes to its cheaper members"}
    n_max = max([r["plan"]["maximum"] for r in rows.values() if r["decision"] == "planned"], default=0)
    return {
        "part": part,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": cpu_model(),
        "command": "python " + " ".join(sys.argv),
        "alpha": ALPHA,
        "power": POWER,
        "ladder": list(LADDER),
        "cap": cap,
        "budget_s": budget_s,
        "run_cost_s": cost,
        "planned_cost_s": round(spent, 1),
        "seeds": list(range(FIRST_SEED[part], FIRST_SEED[part] + n_max)),
        "runs_paid": paid,
        "sources": [{"kind": k, "path": p, "what": w} for k, p, w in SOURCES[part]],
        "claims": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=sorted(SOURCES))
    ap.add_argument("--budget-h", type=float, required=True, help="hours of runs, one at a time")
    ap.add_argument("--run-cost", nargs="+", required=True, help="SETTING=SECONDS: one run's wall time here")
    ap.add_argument("--cap", type=int, default=LADDER[-1], help="most seeds a claim may plan for (budget decides)")
    ap.add_argument("--sims", type=int, default=20_000, help="simulated series per power estimate")
    a = ap.parse_args()
    cost = {k: float(v) for k, v in (x.split("=", 1) for x in a.run_cost)}
    if missing := [s for s in SETTINGS[a.part] if s not in cost]:
        raise SystemExit(f"--run-cost needs every setting of {a.part}: missing {missing}")
    plan = make_plan(a.part, a.budget_h * 3600, cost, a.cap, a.sims)
    path = PLANS / f"{a.part}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_safe(plan), indent=1, allow_nan=False) + "\n")
    for cid, r in plan["claims"].items():
        p = r.get("plan", {})
        print(f"{cid:34s} σ={r['sigma']:.4f} δ={r['delta']:<5} looks={p.get('looks')} power={p.get('power', 0):.2f}"
              f" -> {r['decision']}")  # fmt: skip
    print(f"planned cost {plan['planned_cost_s'] / 3600:.1f} h of {a.budget_h} h; wrote {path}")


if __name__ == "__main__":
    main()
