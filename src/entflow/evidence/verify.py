"""``entflow reproduce --verify [DIR]``: recompute every published verdict from committed files.

Every claims JSON under ``DIR`` (default ``docs/results``; a file named ``claims.json`` or
``*_claims.json`` / ``*-claims.json``) is read, and each judged claim in it is recomputed with the
harness's own functions (:func:`entflow.evidence.claims.interval_row`, ``any_of_verdict``,
``one_sided_p``, ``holm``, ``holm_verdict``: the code ``entflow reproduce`` judges with, not a
second derivation) and compared with what the file publishes:

- **per-run facts**: where a facts set under ``DIR/facts/<set>/`` (records written by
  ``entflow reproduce``, :mod:`entflow.evidence.records`) points to this claims JSON and holds a
  record for each of the claim's runs and the file's seeds, each seed's value is recomputed from
  the records with the registry's metric (:meth:`Claim.value`) and compared with the published
  value, then the interval is computed from the recomputed values;
- **per-seed values only**: otherwise the interval is recomputed from the published per-seed values.

Then the mean, half-width, interval ends, n, the verdict (and, for a claim in a family, its one-sided
p, Holm p and corrected verdict) are compared; for a claim of the registry, its published rule and
bound must be the registry's. Tolerance: verdicts, rules, n and seeds exactly; numbers to
:data:`REL_TOL` relative (two NaN / null agree).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from entflow.errors import EvidenceError
from entflow.evidence.claims import (
    Claim,
    any_of_verdict,
    holm,
    holm_verdict,
    interval_row,
    one_sided_p,
    paired_difference,
)
from entflow.evidence.records import SOURCE_FILE, read_facts_set, read_json, read_source

__all__ = [
    "DEFAULT_DIR",
    "REL_TOL",
    "ClaimCheck",
    "Verification",
    "claims_files",
    "source_counts",
    "verify",
    "verify_table",
]

DEFAULT_DIR = "docs/results"
REL_TOL = 1e-12  # relative tolerance on every recomputed number
PER_RUN = "per-run facts"
PER_SEED = "per-seed values only"
RULES = ("greater", "less", "at_least", "at_most")
NUMBERS = ("mean", "half", "ci_low", "ci_high")


@dataclass
class ClaimCheck:
    """One published claim, recomputed: where (file, id), from what (``source``), the published and
    recomputed verdicts and means, and every field that differs (``field: published → recomputed``)."""

    file: str
    id: str
    source: str
    verdict: str
    recomputed_verdict: str
    mean: float
    recomputed_mean: float
    n: int
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences


@dataclass
class Verification:
    """Every check of :func:`verify`: ``checks`` (judged claims), ``skipped`` (``not run`` rows),
    ``unpublished`` (registry claims that no file under the folder judges: nothing to recompute)."""

    root: str
    checks: list[ClaimCheck]
    skipped: int
    unpublished: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def differing(self) -> list[ClaimCheck]:
        return [c for c in self.checks if not c.ok]


def same(a: Any, b: Any, rel: float = REL_TOL) -> bool:
    """Two published / recomputed numbers agree: both NaN (or null), or within ``rel`` relative."""
    x = math.nan if a is None else float(a)
    y = math.nan if b is None else float(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return abs(x - y) <= rel * max(abs(x), abs(y))


def claims_files(root: str | os.PathLike) -> list[Path]:
    """The claims JSONs under ``root`` (sorted): ``claims.json``, ``*_claims.json``, ``*-claims.json``."""
    root = Path(root)
    return sorted(
        p
        for p in root.rglob("*.json")
        if p.name == "claims.json" or p.name.endswith("_claims.json") or p.name.endswith("-claims.json")
    )


def _read_claims_file(path: Path) -> dict[str, Any]:
    data = read_json(path, "claims JSON")
    if not isinstance(data, dict) or not isinstance(data.get("claims"), list):
        raise EvidenceError(path, "claims", "expected a JSON object with a list `claims`")
    seeds = data.get("seeds")
    if not isinstance(seeds, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise EvidenceError(path, "seeds", f"expected a list of integer seeds, got {seeds!r}")
    for i, row in enumerate(data["claims"]):
        if not isinstance(row, dict) or not isinstance(row.get("id"), str) or not isinstance(row.get("verdict"), str):
            raise EvidenceError(path, f"claims[{i}]", "expected an object with an `id` and a `verdict`")
        if row["verdict"] == "not run":
            continue
        cid = row["id"]
        if row.get("kind") not in RULES:
            raise EvidenceError(path, f"claims[{cid}].kind", f"expected one of {list(RULES)}, got {row.get('kind')!r}")
        parts = [row, *(row.get("components") or [])]
        for part in parts:
            values = part.get("values")
            if not isinstance(values, list) or not all(_number_or_null(v) for v in values):
                raise EvidenceError(path, f"claims[{cid}].values", f"expected a list of numbers, got {values!r}")
        for key in ("threshold", *NUMBERS):
            if key in row and not _number_or_null(row[key]):
                raise EvidenceError(path, f"claims[{cid}].{key}", f"expected a number, got {row[key]!r}")
    return data


def _number_or_null(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


def _floats(values: Sequence[Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in values]


def _facts_sets(root: Path) -> dict[Path, dict[tuple[str, str, int], dict[str, float]]]:
    """Every facts set under ``root/facts`` (a folder with ``source.json``): the published claims
    JSON it points to (resolved) → its records."""
    sets: dict[Path, dict[tuple[str, str, int], dict[str, float]]] = {}
    for folder in sorted(p for p in (root / "facts").glob("*") if p.is_dir()):
        target = read_source(folder).resolve()
        if target in sets:
            raise EvidenceError(folder / SOURCE_FILE, "claims_json", f"a second facts set for {target}")
        sets[target] = read_facts_set(folder)
    return sets


def _values_from_facts(
    claim: Claim, part: dict[str, str] | None, seeds: Sequence[int], records: dict[tuple[str, str, int], dict]
) -> list[float] | None:
    """A claim's (or one any_of component's) per-seed values from the records; None if a record is missing."""
    runs = claim.runs if part is None else (part["run"], part["baseline"])
    if any((claim.setting, r, s) not in records for r in runs for s in seeds):
        return None
    out = []
    for s in seeds:
        f = {r: records[(claim.setting, r, s)] for r in runs}
        try:
            out.append(float(claim.value(f) if part is None else paired_difference(f, **part)))
        except KeyError:
            out.append(math.nan)
    return out


def _compare(diffs: list[str], name: str, published: Any, recomputed: Any, exact: bool = False) -> None:
    ok = published == recomputed if exact else same(published, recomputed)
    if not ok:
        diffs.append(f"{name}: {published!r} → {recomputed!r}")


def _check_numbers(diffs: list[str], prefix: str, row: dict[str, Any], got: dict[str, Any]) -> None:
    pub_vals, new_vals = _floats(row["values"]), got["values"]
    if len(pub_vals) != len(new_vals):
        diffs.append(f"{prefix}values: {len(pub_vals)} values → {len(new_vals)}")
    else:
        for i, (a, b) in enumerate(zip(pub_vals, new_vals, strict=True)):
            _compare(diffs, f"{prefix}values[{i}]", a, b)
    for key in NUMBERS:
        if key in row:
            _compare(diffs, prefix + key, row[key], got[key])
    if "n" in row:
        _compare(diffs, prefix + "n", row["n"], got["n"], exact=True)
    _compare(diffs, prefix + "verdict", row["verdict"], got["verdict"], exact=True)


def verify(root: str | os.PathLike = DEFAULT_DIR, claims: Sequence[Claim] | None = None) -> Verification:
    """Recompute every judged claim of every claims JSON under ``root`` and compare it with what
    the file publishes (see the module's docstring). ``claims``: the registry's claims (default the
    packaged registry), whose metrics recompute values from records and whose rules a published
    claim must carry. Raises :class:`~entflow.errors.EvidenceError` naming the file for a missing
    folder or a missing or garbled file."""
    root = Path(root)
    if not root.is_dir():
        raise EvidenceError(root, None, "not a folder of committed results")
    if claims is None:
        from entflow.evidence.reproduce import registry

        claims = registry().claims
    by_id = {c.id: c for c in claims}
    files = claims_files(root)
    if not files:
        raise EvidenceError(root, None, "holds no claims JSON (claims.json, *_claims.json, *-claims.json)")
    sets = _facts_sets(root)
    checks, skipped = [], 0
    for path in files:
        data = _read_claims_file(path)
        seeds = list(data["seeds"])
        rel = str(path.relative_to(root))
        judged = []
        for row in data["claims"]:
            if row["verdict"] == "not run":
                skipped += 1
                continue
            records = sets.get(path.resolve())
            check, got = _check_row(rel, row, seeds, by_id.get(row["id"]), records)
            checks.append(check)
            judged.append((row, got, check))
        _check_families(judged)
    judged_ids = {c.id for c in checks}
    return Verification(str(root), checks, skipped, [c.id for c in claims if c.id not in judged_ids])


def _check_row(
    rel: str, row: dict[str, Any], seeds: list[int], claim: Claim | None, records: dict | None
) -> tuple[ClaimCheck, dict[str, Any]]:
    diffs: list[str] = []
    rule, bound = row["kind"], float(row.get("threshold") or 0.0)
    if claim is not None:
        _compare(diffs, "rule", (row["kind"], row.get("threshold")), (claim.rule, claim.bound), exact=True)
        if "setting" in row:
            _compare(diffs, "setting", row["setting"], claim.setting, exact=True)
    source = PER_SEED
    comps = row.get("components")
    if comps:
        new_comps = []
        for j, comp in enumerate(comps):
            level = float(comp.get("level", 1 - 0.05 / len(comps)))
            vals = _floats(comp["values"])
            if records is not None and claim is not None:
                part = {k: comp[k] for k in ("fact", "run", "baseline")}
                from_facts = _values_from_facts(claim, part, seeds, records)
                if from_facts is not None:
                    vals, source = from_facts, PER_RUN
            got = interval_row(vals, rule, bound, level)
            _check_numbers(diffs, f"components[{j}].", comp, got)
            new_comps.append(got)
        verdict, best = any_of_verdict(rule, new_comps)
        got = {**new_comps[best], "verdict": verdict}
        _check_numbers(diffs, "", row, got)
    else:
        vals = _floats(row["values"])
        if records is not None and claim is not None:
            from_facts = _values_from_facts(claim, None, seeds, records)
            if from_facts is not None:
                vals, source = from_facts, PER_RUN
        got = interval_row(vals, rule, bound, float(row.get("level", 0.95)))
        _check_numbers(diffs, "", row, got)
    check = ClaimCheck(
        file=rel,
        id=row["id"],
        source=source,
        verdict=row["verdict"],
        recomputed_verdict=got["verdict"],
        mean=math.nan if row.get("mean") is None else float(row["mean"]),
        recomputed_mean=got["mean"],
        n=int(got["n"]),
        differences=diffs,
    )
    return check, got


def _check_families(judged: list[tuple[dict[str, Any], dict[str, Any], ClaimCheck]]) -> None:
    """The Holm correction of the rows of one claims JSON that publish a family: one-sided p from
    the recomputed values, Holm over the family's size (members not in the file count p = 1)."""
    families: dict[str, list[tuple[dict[str, Any], dict[str, Any], ClaimCheck]]] = {}
    for item in judged:
        if "verdict_holm" in item[0]:
            families.setdefault(str(item[0].get("family")), []).append(item)
    for members in families.values():
        size = int(members[0][0].get("family_size", len(members)))
        ps = [one_sided_p(got["values"], row["kind"], float(row.get("threshold") or 0.0)) for row, got, _ in members]
        adj = holm(ps + [math.nan] * max(0, size - len(members)))
        for (row, got, check), p, a in zip(members, ps, adj, strict=False):
            _compare(check.differences, "p_value", row.get("p_value"), p)
            _compare(check.differences, "holm_p", row.get("holm_p"), a)
            _compare(check.differences, "verdict_holm", row["verdict_holm"], holm_verdict(got["verdict"], a), True)


def source_counts(result: Verification) -> str:
    """How many verdicts were recomputed from each source: ``N from per-run facts (each seed's value
    recomputed from its runs' records), M from stored per-seed values (arithmetic only)``."""
    runs = sum(c.source == PER_RUN for c in result.checks)
    seeds = sum(c.source == PER_SEED for c in result.checks)
    return (
        f"{runs} from {PER_RUN} (each seed's value recomputed from its runs' records), "
        f"{seeds} from {PER_SEED} (the interval recomputed from the published values: arithmetic only)"
    )


def verify_table(result: Verification) -> Any:
    """The verification as a :class:`~entflow.analysis.tables.Table`, one row per published claim."""
    from entflow.analysis.tables import Column, Table

    rows = []
    for c in result.checks:
        rows.append(
            (
                c.file,
                c.id,
                c.source,
                c.n,
                c.mean,
                c.recomputed_mean,
                c.verdict,
                c.recomputed_verdict,
                "agrees" if c.ok else "DIFFERS: " + "; ".join(c.differences),
            )
        )
    return Table(
        title=f"entflow reproduce --verify {result.root}",
        columns=(
            Column("file", align="left"),
            Column("claim", align="left"),
            Column("source", align="left"),
            Column("n", "d"),
            Column("published mean", "+.4f"),
            Column("recomputed mean", "+.4f"),
            Column("published verdict", align="left"),
            Column("recomputed verdict", align="left"),
            Column("result", align="left"),
        ),
        rows=rows,
        notes=(
            f"{len(result.checks)} judged claims recomputed ({result.skipped} 'not run' rows skipped): "
            f"{source_counts(result)};",
            f"verdicts, rules and n compared exactly, numbers to {REL_TOL:g} relative.",
        ),
        name="verify",
    )
