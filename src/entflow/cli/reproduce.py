"""``entflow reproduce``: the five papers' claims, each method in its paper's setting, over
several seeds, as a table of verdicts (plus the clean estimator audit). See docs/reproduction.md.

``--claims ID[,ID…]`` selects claims of the registry (``entflow/evidence/claims.yaml``): only the runs
they need are trained, on their pre-registered seeds unless ``--seeds`` is given, without the audit."""

from __future__ import annotations

import argparse
from typing import Any

# --quick: every claim exercised on fewer steps and smaller batches (a smoke run of the whole
# pipeline; its verdicts are weak evidence)
# (2 mini-batches, so that the second step is off-policy and clip / KL-Cov have something to act on)
# coverage_n=0: no pass@256 evaluation (256 samples × every validation and hard problem, twice per
# run) in the smoke run, so its coverage claims report NaN (inconclusive) instead of costing minutes
QUICK_OVERRIDES = [
    "steps=8",
    "prompts_per_step=4",
    "group_size=8",
    "mini_batches=2",
    "eval_every=4",
    "eval_k=2",
    "coverage_n=0",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="fewer steps and a shorter audit (exercises every claim)")
    p.add_argument(
        "--seeds",
        default=None,
        help="seeds, comma-separated [the selected claims' pre-registered seeds, 0-4; --quick: the first 3]; "
        "fewer than 3 train and show their values without a verdict",
    )
    p.add_argument("--jobs", type=int, default=2, help="runs trained in parallel [2]")
    p.add_argument("--name", default=None, help="output folder under runs/ [reproduce or reproduce-quick]")
    p.add_argument(
        "--claims",
        default=None,
        help="only these claims of the registry (comma-separated ids): trains the union of their runs",
    )
    p.add_argument("--runs", default=None, help="only these runs (comma-separated; claims needing others: not run)")
    p.add_argument("--no-audit", action="store_true", help="skip the clean estimator audit")
    p.add_argument(
        "--fresh",
        action="store_true",
        help="retrain runs that already exist (default: resume them, and take a run whose facts record in "
        "runs/NAME/facts matches its config from the record instead of training it)",
    )
    p.add_argument("--config", help="a base config for the demo setting's claims instead of the built-in demo.yaml")
    p.add_argument(
        "--verify",
        nargs="?",
        const="docs/results",
        default=None,
        metavar="DIR",
        help="train nothing: recompute every verdict of the claims JSONs under DIR [docs/results] from their "
        "committed per-run facts or per-seed values; exit 0 if all agree, 1 naming each claim that differs",
    )
    p.add_argument(
        "--export-facts",
        default=None,
        metavar="DEST",
        help="train nothing: copy runs/NAME's per-run facts records (NAME: --name [reproduce]) to the facts set "
        "DEST (e.g. docs/results/facts/NAME) and its claims.json to --published",
    )
    p.add_argument(
        "--published",
        default=None,
        metavar="FILE",
        help="with --export-facts: where its claims.json is published [DEST/../../<DEST's name>_claims.json]",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every run")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.verify is not None:
        return _verify(args.verify)
    if args.export_facts is not None:
        return _export(args)

    from entflow.cli._common import cli_console, read_config
    from entflow.errors import ConfigError
    from entflow.evidence.audit import AuditConfig
    from entflow.evidence.claims import DESIGN_SEEDS, MIN_SEEDS, RUNS, preset_base
    from entflow.evidence.reproduce import claims_markdown, families_markdown, registry, reproduce, select_claims
    from entflow.settings.compare import parse_seeds
    from entflow.settings.lab import COMMON_OVERRIDES
    from entflow.trainer.config import parse_override

    # each setting's base: its preset with the full run's steps; --config replaces the demo's preset
    settings = registry().settings
    bases = {name: setting.base() for name, setting in settings.items()}
    if args.config:
        read_config("--config", args.config)  # a missing or malformed file: one line naming the flag
        bases["demo"] = preset_base(args.config) | {"steps": settings["demo"].steps}
    if args.claims is not None and args.runs is not None:
        raise ConfigError("claims", "give either --claims or --runs, not both")
    claims = [c for c in args.claims.replace(" ", "").split(",") if c] if args.claims is not None else None
    selected = select_claims(claims)  # unknown ids fail here, before anything is trained
    # default: the selected claims' pre-registered seeds; without --claims the registry's confirmation
    # seeds (0–4), and a claim registered on others is not run; --quick takes the first three
    # --seeds overrides them for any set of claims (so claims registered on different seeds run together)
    if args.seeds is not None:
        seeds = parse_seeds(args.seeds)
    else:
        seeds = _default_seeds(selected if claims else ())[: 3 if args.quick else None]
    if design := sorted(set(seeds) & DESIGN_SEEDS):
        raise ConfigError("seeds", f"design seeds {design} are never used for verdicts (docs/regime.md)")
    overrides = COMMON_OVERRIDES + (QUICK_OVERRIDES if args.quick else []) + list(args.overrides)
    out_dir = "runs"
    rest = []
    for text in overrides:
        key, value = parse_override(text)
        if key == "out_dir":
            out_dir = str(value)
        else:
            rest.append(text)
    runs = args.runs.split(",") if args.runs else None
    for r in runs or []:
        if r not in RUNS:
            raise ConfigError("runs", f"unknown run {r!r}; known: {', '.join(RUNS)}")
    if args.jobs < 1:
        raise ConfigError("jobs", f"must be >= 1, got {args.jobs}")
    name = args.name or ("reproduce-quick" if args.quick else "reproduce")
    audit = None
    if not args.no_audit and claims is None:  # the audit is part of the full table, not of a claim
        audit = AuditConfig(
            steps=2 if args.quick else 10,
            seeds=tuple(seeds),
            task=bases["demo"].get("task", "countdown"),
            task_params=dict(bases["demo"].get("task_params") or {}),
        )
    res = reproduce(
        bases,
        rest,
        seeds,
        Path(out_dir) / name,
        jobs=args.jobs,
        resume=not args.fresh,
        audit_cfg=audit,
        runs=runs,
        claims=claims,
        # the full run judges each claim on its registered seeds only; --quick, a smoke run,
        # exercises every claim on its three seeds
        registered_seeds_only=claims is None and args.seeds is None and not args.quick,
    )
    console = cli_console(width=200)
    console.print(claims_markdown(res["claims"]) + families_markdown(res["claims"]))
    if len(seeds) < MIN_SEEDS:
        console.print(
            f"{len(seeds)} seed(s): the runs are trained and their values shown, but a verdict needs at least "
            f"{MIN_SEEDS} seeds (rerun with more; finished runs are kept)",
            highlight=False,
        )
    console.print(
        f"wrote {Path(out_dir) / name / 'claims.md'} and claims.json; wall {res['wall_s']:.0f} s",
        markup=False,
        highlight=False,
    )
    return 0


def _verify(root: str) -> int:
    """``--verify``: the table of recomputed claims; 0 if every one agrees, else 1 naming each."""
    from entflow.analysis.render import render_rich
    from entflow.cli._common import cli_console
    from entflow.evidence.verify import source_counts, verify, verify_table

    result = verify(root)
    console = cli_console(width=200)
    console.print(render_rich(verify_table(result)))
    for c in result.differing:  # one line each, never wrapped: a script can grep it
        print(f"DIFFERS: {c.id} in {c.file}: {'; '.join(c.differences)}", flush=True)
    n = len(result.checks)
    if result.unpublished:
        print(
            f"registry claims without a committed verdict ({len(result.unpublished)}, nothing to recompute): "
            + ", ".join(result.unpublished),
            flush=True,
        )
    if result.ok:
        console.print(
            f"all {n} published verdicts recompute from the committed files: {source_counts(result)}", highlight=False
        )
        return 0
    console.print(f"{len(result.differing)} of {n} published claims differ from their recomputation", highlight=False)
    return 1


def _export(args: argparse.Namespace) -> int:
    """``--export-facts``: publish runs/NAME's facts records and claims JSON."""
    from pathlib import Path

    from entflow.evidence.records import export_facts
    from entflow.trainer.config import parse_override

    out_dir = "runs"
    for text in args.overrides:
        key, value = parse_override(text)
        if key == "out_dir":
            out_dir = str(value)
    name = args.name or ("reproduce-quick" if args.quick else "reproduce")
    dest = Path(args.export_facts)
    published = Path(args.published) if args.published else dest.parent.parent / f"{dest.name}_claims.json"
    written = export_facts(Path(out_dir) / name, dest, published)
    print(f"wrote {len(written) - 2} facts records to {dest}, {published} and {dest / 'source.json'}")
    return 0


def _default_seeds(claims: Any) -> list[int]:
    """The pre-registered seeds shared by ``claims``."""
    from entflow.errors import ConfigError

    lists = {tuple(c.seeds) for c in claims}
    if not lists:  # every claim: the seeds most claims were registered on
        from collections import Counter

        from entflow.evidence.reproduce import registry

        return list(Counter(tuple(c.seeds) for c in registry().claims).most_common(1)[0][0])
    if len(lists) > 1:
        raise ConfigError(
            "seeds", f"the selected claims were registered with different seeds {sorted(lists)}; give --seeds"
        )
    return list(lists.pop())
