"""``entflow reproduce``: the five papers' claims as a table of verdicts over seeds.

Every method runs in the lab's default setting (``configs/demo.yaml``) except for what its paper
prescribes (OPEFO and its GRPO baseline strictly on-policy; position shaping at the paper's
γ = 1; batch-size-dependent ratios scaled to the lab's small batches, said in the table). Each
run is repeated over ``seeds``; a claim's measured value is computed per seed (for a comparison:
the paired difference method − baseline on the same seed, so the same prompts), and the table
shows the mean ± the half-width of a 95 % Student-t interval.

Verdicts follow from the interval alone:

- a directional claim (``x > y``): ``reproduced`` if the whole interval of the difference is on
  the claimed side of 0, ``not reproduced`` if it is entirely on the other side, else
  ``inconclusive``;
- a threshold claim (``x ≥ c``): ``reproduced`` if the interval is above c, ``not reproduced``
  if it is below, else ``inconclusive``;
- a "no worse" claim (``x ≥ y − m``): the same with the margin m.

A claim that is ``pending`` in the registry, or whose runs were not trained, is ``not run``
(with its reason, without a number). The claims, their metrics, criteria, seeds and the verdict
rule are the pre-registered registry ``src/entflow/evidence/claims.yaml`` (:mod:`entflow.evidence.claims`;
docs/reproduction.md, "Pre-registration"); the facts they read come from
:mod:`entflow.evidence.facts`. Each setting's runs are configured and trained by its kind's entry of
the registry of settings (:mod:`entflow.settings.registry`: the lab's tiny policy, or a real
model). This module only orchestrates: select → train → facts → verdicts → write.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from entflow.analysis.runs import load_config
from entflow.evidence.claims import (
    DEFAULT_SETTING,
    HOLM_ALPHA,
    MIN_SEEDS,
    NOT_JUDGED,
    RUNS,
    Claim,
    Registry,
    any_of_verdict,
    holm,
    holm_verdict,
    interval_row,
    load_registry,
    one_sided_p,
    paired_difference,
    run_key,
    split_key,
)
from entflow.evidence.facts import COVERAGE_FACTS, FACTS, run_facts
from entflow.evidence.records import (
    FACTS_FILE,
    facts_record,
    fresh_config_hash,
    read_record,
    record_name,
    write_record,
)
from entflow.files import write_json
from entflow.settings.registry import get_setting_kind, kind_overrides


@functools.cache
def registry() -> Registry:
    """The packaged registry, read on first use (never at import) and checked against the facts
    :mod:`entflow.evidence.facts` provides."""
    return load_registry(known_facts=FACTS)


# pass@256 with n = 256 samples per problem, the pre-registered coverage size
COVERAGE_N = 256


def coverage_runs(claims: Sequence[Claim] | None = None) -> frozenset[str]:
    """The runs (keys, :meth:`Claim.key`) a claim (default: every registered one) reads a coverage
    fact of (pass@256 from ``coverage.json``): reproduce trains them with ``coverage_n =
    COVERAGE_N``, whichever claims are selected, so a run's config never depends on the selection."""
    claims = registry().claims if claims is None else claims
    return frozenset(c.key(r) for c in claims if set(c.facts_read()) & COVERAGE_FACTS for r in c.runs)


def select_claims(ids: Sequence[str] | None) -> tuple[Claim, ...]:
    """The registry's claims with these ids (registry order); every claim for None.

    Unknown ids raise :class:`~entflow.errors.ConfigError` (key ``claims``) listing the known ones."""
    from entflow.errors import ConfigError

    claims = registry().claims
    if ids is None:
        return claims
    known = [c.id for c in claims]
    if unknown := [i for i in ids if i not in known]:
        raise ConfigError("claims", f"unknown claim ids {unknown}; known: {', '.join(known)}")
    if not ids:
        raise ConfigError("claims", f"no claim id given; known: {', '.join(known)}")
    return tuple(c for c in claims if c.id in set(ids))


def runs_needed(claims: Sequence[Claim], only: Sequence[str] | None = None) -> list[str]:
    """The keys (:meth:`Claim.key`) of the claims' runs that can be trained, by setting (registry
    order) then RUNS order; a pending claim needs none. ``only``: just these run types."""
    wanted = {c.key(r) for c in claims if c.pending is None for r in c.runs if only is None or r in only}
    return [key for setting in registry().settings for r in RUNS if (key := run_key(setting, r)) in wanted]


def setting_compare_base(setting: str, runs: Sequence[str], seed: int) -> dict[str, Any]:
    """A compare config (``entflow.settings.compare.compare_and_report``) whose runs are the registry's
    ``runs`` of ``setting`` at ``seed``, configured exactly as the full ``reproduce`` trains them:
    the setting's preset at its full-run steps, its kind's common overrides
    (:data:`entflow.settings.lab.COMMON_OVERRIDES` for the lab), each run's paper setting
    (RUNS) and pass@256 where a claim reads it. ``entflow run``'s default demo is two of them.

    Runs whose paper setting changes config keys (RUNS' third entry, e.g. ``strict_on_policy``)
    cannot share one compare config, nor can runs of which only some are evaluated with pass@256:
    :class:`~entflow.errors.ConfigError` (key ``runs``)."""
    from entflow.errors import ConfigError
    from entflow.trainer.config import parse_override

    if unknown := [r for r in runs if r not in RUNS]:
        raise ConfigError("runs", f"unknown runs {unknown}; known: {', '.join(RUNS)}")
    if with_keys := [r for r in runs if RUNS[r][2]]:
        raise ConfigError("runs", f"runs {with_keys} change config keys and need their own compare")
    covered = {r for r in runs if run_key(setting, r) in coverage_runs()}
    if covered and covered != set(runs):
        raise ConfigError("runs", f"only {sorted(covered)} of {list(runs)} are evaluated with pass@256 by reproduce")
    common = registry().settings[setting].runner.common_overrides
    base = registry().settings[setting].base() | dict(parse_override(o) for o in common) | {"seed": seed}
    if covered and "coverage_n" not in base:  # a preset's own coverage_n wins, as in _setting_configs
        base["coverage_n"] = COVERAGE_N
    base["methods"] = _method_specs(runs)
    return base


def _method_specs(runs: Sequence[str]) -> list[dict[str, Any]]:
    """The compare ``methods`` entries of registry runs: each run's method and paper parameters."""
    return [{"method": RUNS[r][0], "params": dict(RUNS[r][1]), "name": r} for r in runs]


def evaluate_claims(
    facts: dict[str, dict[int, dict[str, Any]]],
    seeds: list[int],
    claims: Sequence[Claim] | None = None,
    not_run: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per claim (default: every registered claim): values per seed, mean, 95 % t
    interval (``half``, ``ci_low``, ``ci_high``), ``n`` and the verdict.

    ``facts`` is ``{run key: {seed: {fact: value}}}`` (:meth:`Claim.key`: ``grpo`` in the demo
    setting, ``regime/grpo`` in the regime). A claim that is ``pending``, or needs a run absent
    from ``facts``, gets verdict ``not run`` with its ``reason`` and no number; one with values on
    fewer than ``MIN_SEEDS`` seeds gets them, its interval and the verdict ``not judged``. An
    ``any_of`` claim is judged on each of its m paired differences at level 1 − 0.05/m
    (Bonferroni); its row reports the one with the highest lower bound, and the verdict is
    ``reproduced`` if one is on the claimed side, ``not reproduced`` if all are on the other."""
    rows = []
    for c in registry().claims if claims is None else claims:
        row = _row_head(c, seeds)
        missing = [c.key(r) for r in c.runs if c.key(r) not in facts]
        skipped = (not_run or {}).get(c.id)
        if c.pending is not None or skipped or missing:
            reason = c.pending or skipped or f"runs not trained: {', '.join(missing)}"
            row.update(values=[], mean=math.nan, half=math.nan, ci_low=math.nan, ci_high=math.nan, n=0)
            row.update(verdict="not run", reason=reason)
            rows.append(row)
            continue
        own = {r: facts[c.key(r)] for r in c.runs}  # the claim's runs, in its setting
        if c.metric["name"] == "any_of":
            row.update(_any_of_row(c, own, seeds))
        else:
            vals = [_seed_value(lambda f, c=c: c.value(f), own, c.runs, s) for s in seeds]
            row.update(_interval_row(vals, c))
        if row["n"] < MIN_SEEDS:  # values, but too few seeds for an interval worth a verdict
            row.update(
                verdict=NOT_JUDGED, reason=f"{row['n']} seed(s) with a value; a verdict needs at least {MIN_SEEDS}"
            )
        rows.append(row)
    return rows


def _row_head(c: Claim, seeds: list[int]) -> dict[str, Any]:
    return {
        "id": c.id,
        "paper": c.paper,
        "claim": c.statement,
        "measured": c.measured,
        "kind": c.rule,
        "threshold": c.bound,
        "criterion": {"kind": c.kind, "direction": c.direction, "threshold": c.threshold, "margin": c.margin},
        "runs": list(c.runs),
        "preregistered_seeds": list(c.seeds),
        "seeds_as_registered": sorted(seeds) == sorted(c.seeds),
        "status": c.status,
        "setting": c.setting,
        "note": c.note,
        "reason": None,
    }


def _seed_value(value: Any, facts: dict[str, dict[int, dict[str, Any]]], runs: Sequence[str], seed: int) -> float:
    try:
        return float(value({r: facts[r][seed] for r in runs}))
    except KeyError:
        return math.nan


def _interval_row(vals: list[float], claim: Claim, level: float = 0.95) -> dict[str, Any]:
    return interval_row(vals, claim.rule, claim.bound, level)


def _any_of_row(c: Claim, facts: dict[str, dict[int, dict[str, Any]]], seeds: list[int]) -> dict[str, Any]:
    parts = c.components()
    level = 1 - 0.05 / len(parts)
    rows = []
    for p in parts:
        pair = (p["run"], p["baseline"])
        vals = [_seed_value(lambda f, p=p: paired_difference(f, **p), facts, pair, s) for s in seeds]
        rows.append({**p, **_interval_row(vals, c, level)})
    overall, i = any_of_verdict(c.rule, rows)
    best = rows[i]
    keys = ("values", "mean", "half", "ci_low", "ci_high", "n", "level")
    return {
        **{k: best[k] for k in keys},
        "best": {k: best[k] for k in ("fact", "run", "baseline")},
        "components": rows,
        "verdict": overall,
    }


def add_family_corrections(rows: list[dict[str, Any]], claims: Sequence[Claim] | None = None) -> list[dict[str, Any]]:
    """Give each row of a claim in a ``family`` (the registry's optional key) its ``family``, its
    one-sided ``p_value`` (:func:`~entflow.evidence.claims.one_sided_p` of its per-seed values),
    its Holm-adjusted ``holm_p`` and ``verdict_holm`` (:func:`~entflow.evidence.claims.holm_verdict`),
    in place; rows of claims without a family are left as they are.

    The family is every claim of the registry (``claims``, default the packaged one) with that
    name, judged or not: a member without a row, or without an interval, counts with p = 1, so a
    selection of claims is never corrected for fewer tests than were registered."""
    claims = registry().claims if claims is None else claims
    by_id = {c.id: c for c in claims}
    families: dict[str, list[str]] = {}
    for c in claims:
        if c.family is not None:
            families.setdefault(c.family, []).append(c.id)
    judged = {r["id"]: r for r in rows if r["id"] in by_id and by_id[r["id"]].family is not None}
    for name, members in families.items():
        if not any(m in judged for m in members):
            continue
        ps = []
        for m in members:
            r, c = judged.get(m), by_id[m]
            judged_row = r is not None and r["verdict"] not in ("not run", NOT_JUDGED)
            p = one_sided_p(r["values"], c.rule, c.bound) if judged_row else math.nan
            ps.append(p)
        for m, p, adj in zip(members, ps, holm(ps), strict=True):
            if (r := judged.get(m)) is not None:
                r.update(family=name, family_size=len(members), p_value=p, holm_p=adj)
                r["verdict_holm"] = holm_verdict(r["verdict"], adj)
    return rows


def families_markdown(rows: list[dict[str, Any]], heading: str = "\n### ") -> str:
    """The rows of claims in a family as a markdown table: raw and Holm-corrected verdicts
    (empty when no row has a family). ``heading`` opens the title line (a markdown heading by
    default; ``""`` for a plain line)."""
    fam = [r for r in rows if "verdict_holm" in r]
    if not fam:
        return ""
    lines = [
        f"{heading}Claim families (Holm–Bonferroni, one-sided α = {HOLM_ALPHA:g})\n",
        "| family | claim | p (one-sided) | Holm p | verdict | verdict (Holm) |",
        "|---|---|---:|---:|---|---|",
    ]
    for r in fam:
        p = "–" if not math.isfinite(r["p_value"]) else f"{r['p_value']:.4f}"
        lines.append(
            f"| {r['family']} ({r['family_size']}) | {r['id']} | {p} | {r['holm_p']:.4f} | "
            f"{r['verdict']} | **{r['verdict_holm']}** |"
        )
    return "\n".join(lines) + "\n"


_RULE = {"greater": "> 0", "less": "< 0"}
_AUDIT_START = {"warm_start": "warm start", "after_grpo": "GRPO-trained policy (each seed's GRPO run, final step)"}


def claims_markdown(rows: list[dict[str, Any]]) -> str:
    """The claims as a markdown table (one line per row; a ``not run`` row shows its reason)."""
    lines = [
        "| paper | claim | measured | mean ± 95 % CI (n) | criterion | verdict |",
        "|---|---|---|---:|---|---|",
    ]
    for r in rows:
        crit = _RULE.get(r["kind"]) or ("≥ " if r["kind"] == "at_least" else "≤ ") + f"{r['threshold']:g}"
        if r["verdict"] == "not run":
            val = f"— ({r['reason']})"
        elif r["verdict"] == NOT_JUDGED:  # the values, but no interval worth reading
            val = f"{r['mean']:+.3f} ({r['reason']})"
        elif r["n"] > 1:
            val = f"{r['mean']:+.3f} ± {r['half']:.3f} ({r['n']})"
        else:
            val = f"{r['mean']:+.3f} ({r['n']})"
        lines.append(f"| {r['paper']} | {r['claim']} | {r['measured']} | {val} | {crit} | **{r['verdict']}** |")
    return "\n".join(lines) + "\n"


def reproduce(
    bases: dict[str, dict[str, Any]],
    overrides: list[str],
    seeds: list[int],
    out: Path,
    jobs: int = 2,
    resume: bool = True,
    audit_cfg: Any = None,
    runs: list[str] | None = None,
    claims: list[str] | None = None,
    registered_seeds_only: bool = False,
) -> dict[str, Any]:
    """Train every run the claims need over ``seeds``, evaluate the claims, run the clean audit,
    write ``out/claims.md``, ``out/claims.json`` (and ``out/audit.md``). Returns the JSON dict.

    ``bases`` maps a setting name (the registry's settings) to its base config (``Setting.base()``); a
    claim whose setting has no base is ``not run``. ``overrides`` apply to every run. Demo runs
    go to ``out/<run>-s<seed>``, another setting's to ``out/<setting>/<run>-s<seed>``.

    ``claims`` (ids of the registry) selects the claims: only the union of their ``runs`` is
    trained and only they are evaluated. ``runs`` instead trains those run types (in every
    setting a claim needs them in) and evaluates every claim (those needing other runs: ``not
    run``). Not both. ``registered_seeds_only``: a claim registered on other seeds than ``seeds``
    is ``not run`` (its runs are not trained), so that it is never judged on seeds it was not
    registered for (``entflow reproduce`` without ``--seeds``).

    Each setting's runs are configured and trained by its kind (``Setting.runner``, the registry of
    :mod:`entflow.settings.registry`): the lab's ``jobs`` at a time from one warm start; a setting of
    kind ``real`` with ``RealTrainConfig`` and ``train_real``, one run at a time, resumed as the
    lab's runs are, from the model the preset names (no lab warm start), with
    :data:`~entflow.settings.real.REAL_COMMON_OVERRIDES` instead of the lab-only entries of
    :data:`~entflow.settings.lab.COMMON_OVERRIDES`. Its facts and claims take the same path as
    the lab's."""
    from entflow.analysis.report import summarize_run, write_report
    from entflow.errors import ConfigError

    if claims is not None and runs is not None:
        raise ConfigError("claims", "select either claims or runs, not both")
    settings = registry().settings
    if unknown := sorted(set(bases) - set(settings)):
        raise ConfigError("settings", f"unknown settings {unknown}; known: {', '.join(settings)}")
    selected = select_claims(claims)
    elsewhere = {
        c.id: f"registered on seeds {list(c.seeds)}: `entflow reproduce --claims {c.id}`"
        for c in selected
        if registered_seeds_only and sorted(c.seeds) != sorted(seeds)
    }
    t0, c0 = time.time(), time.process_time()
    keys = runs_needed([c for c in selected if c.id not in elsewhere], only=runs)
    if runs is not None:  # a listed run that no claim needs still trains, in the demo setting
        keys += [r for r in runs if all(split_key(k)[1] != r for k in keys)]
    keys = [k for k in keys if split_key(k)[0] in bases]
    out.mkdir(parents=True, exist_ok=True)
    facts: dict[str, dict[int, dict[str, Any]]] = {}
    trained: dict[str, dict[str, Any]] = {}  # setting -> its preset, steps and folder
    demo_runs: list[tuple[Any, Path]] = []
    for setting, base in bases.items():
        names = [split_key(k)[1] for k in keys if split_key(k)[0] == setting]
        if not names:
            continue
        where = out if setting == DEFAULT_SETTING else out / setting
        runner = settings[setting].runner
        configs = _setting_configs(setting, base, names, overrides, seeds, where)
        trained[setting] = {"config": settings[setting].config, "steps": configs[0].steps, "folder": str(where)}
        if runner.name != "lab":
            trained[setting]["kind"] = runner.name
        # a run whose record under out/facts matches its config was finished before (perhaps on a
        # machine whose run folders are gone): its facts come from the record, and it is not trained
        recorded = recorded_facts(out / "facts" / setting, configs) if resume else {}
        todo = [c for c in configs if (c.group, c.seed) not in recorded]

        def record(i: int, d: Path, setting: str = setting, todo: list = todo, recorded: dict = recorded) -> None:
            """A finished run's facts and its compact record: in its folder, and gathered under
            out/facts to commit, written as soon as it finishes (an interruption keeps them)."""
            cfg = todo[i]
            got = run_facts(d, summarize_run(d))
            recorded[cfg.group, cfg.seed] = got
            rec = facts_record(setting, cfg.group, cfg.seed, got, load_config(d))
            if Path(d).is_dir():  # (a trainer replaced in a test may return no folder)
                write_record(Path(d) / FACTS_FILE, rec)
            write_record(out / "facts" / setting / record_name(cfg.group, cfg.seed), rec)

        # resumed runs continue; without resume existing runs are replaced
        dirs = runner.train(
            todo, jobs=jobs if runner.parallel else 1, resume=resume, overwrite=not resume, on_done=record
        )
        for i, (cfg, d) in enumerate(zip(todo, dirs, strict=True)):
            if (cfg.group, cfg.seed) not in recorded:  # a kind that did not report it finished
                record(i, d)
        for cfg in configs:
            facts.setdefault(run_key(setting, cfg.group), {})[cfg.seed] = recorded[cfg.group, cfg.seed]
        if dirs:
            write_report(dirs, where)
        if setting == DEFAULT_SETTING and len(todo) == len(configs):  # the audit reads the trained policies
            demo_runs = list(zip(configs, dirs, strict=True))
    rows = add_family_corrections(evaluate_claims(facts, seeds, selected, not_run=elsewhere))
    result: dict[str, Any] = {
        "claims": rows,
        "registry": str(registry().path),
        "seeds": seeds,
        "runs": keys,
        "settings": trained,
        "train_wall_s": round(time.time() - t0, 1),
        "train_cpu_s_main_process": round(time.process_time() - c0, 1),
    }
    md = claims_markdown(rows) + families_markdown(rows)
    audit_md: list[str] = []
    if audit_cfg is not None and demo_runs:
        from entflow.evidence.audit import audit_markdown, audit_policy
        from entflow.lab.setup import resolve_policy

        # twice: from the warm start (entropy still high everywhere) and from each seed's
        # GRPO-trained policy (entropy collapsed, most states near-deterministic and a few
        # forking: the state of a "standard GRPO training process" where paper 000 measures),
        # in the demo setting
        starts: dict[str, Any] = {"warm_start": resolve_policy(demo_runs[0][0])}
        grpo = {cfg.seed: d / "checkpoints" / "final" for cfg, d in demo_runs if cfg.group == "grpo"}
        if grpo and all(p.is_dir() for p in grpo.values()):
            starts["after_grpo"] = {s: str(p) for s, p in grpo.items()}
        result["audit"] = {}
        md += "\n### Clean estimator audit\n"
        for start, policy in starts.items():
            t1 = time.time()
            res = audit_policy(policy, audit_cfg)
            result["audit"][start] = {"summary": res["summary"], "wall_s": round(time.time() - t1, 1)}
            table = f"#### Audit from the {_AUDIT_START[start]}\n\n" + audit_markdown(res)
            md += "\n" + table
            audit_md.append(table)
        result["audit"]["config"] = res["config"]
        (out / "audit.md").write_text("\n".join(audit_md))
    result["wall_s"] = round(time.time() - t0, 1)
    (out / "claims.md").write_text(md)
    write_json(out / "claims.json", result, default=str)
    return result


def recorded_facts(folder: Path, configs: Sequence[Any]) -> dict[tuple[str, int], dict[str, float]]:
    """The facts of each of ``configs`` whose record ``folder/<run>-s<seed>.json`` exists and holds
    the hash a fresh run of that config records (:func:`~entflow.evidence.records.fresh_config_hash`),
    by (run, seed). A record of another config (a changed preset or override) is left out, so its
    run trains again."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    for cfg in configs:
        path = folder / record_name(cfg.group, cfg.seed)
        if path.is_file() and (rec := read_record(path))["config_sha256"] == fresh_config_hash(cfg):
            out[cfg.group, cfg.seed] = rec["facts"]
    return out


def _setting_configs(
    setting: str,
    base: dict[str, Any],
    names: list[str],
    overrides: list[str],
    seeds: list[int],
    where: Path,
) -> list[Any]:
    """One validated config per (run, seed) of one setting: the setting's base, the overrides, then
    each run's paper setting (RUNS) and, for a run a claim reads pass@256 of, ``coverage_n``.

    The configs are of the setting's kind's config class (``RealTrainConfig`` for a ``real``
    setting), without the lab-only entries of ``COMMON_OVERRIDES`` a real run does not take
    (:func:`~entflow.settings.registry.kind_overrides`)."""
    from entflow.errors import ConfigError
    from entflow.settings.compare import compare_configs

    kind = registry().settings[setting].kind if setting in registry().settings else "lab"
    configs = compare_configs(
        where.name,
        _method_specs(names),
        base,
        kind_overrides(kind, overrides),
        out_dir=str(where.parent),
        seeds=seeds,
        cls=get_setting_kind(kind).config_class(),
    )
    # an explicit coverage_n (in the base config or an override, 0 included) wins over COVERAGE_N
    explicit_coverage = "coverage_n" in base or any(o.split("=", 1)[0].strip() == "coverage_n" for o in overrides)
    for cfg in configs:  # the paper's own setting on top of the lab's
        if "pretrain" in RUNS[cfg.group][2]:  # the warm start is resolved once, for every run
            raise ConfigError("pretrain", f"run {cfg.group!r}: a run's settings cannot change the warm start")
        for k, v in RUNS[cfg.group][2].items():
            old = getattr(cfg, k)
            setattr(cfg, k, {**old, **v} if isinstance(old, dict) and isinstance(v, dict) else v)
        if run_key(setting, cfg.group) in coverage_runs() and not explicit_coverage:
            cfg.coverage_n = COVERAGE_N
        cfg.validate()
    return configs
