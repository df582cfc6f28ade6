"""Print the docs' generated tables anew from the committed result files, or check that they are current.

A printed block in ``docs/*.md`` or the README opens with the line ``Printed by `COMMAND`:`` and a
blank line, and closes with the line ``(End of what that command prints.)``; between them stands
exactly what COMMAND prints (run from the repository root; COMMAND starts with ``python benchmarks/``
and reads committed JSON), then a blank line. Both lines show on the page, so a reader knows where the
figures come from. Nobody edits the block by hand: a test runs ``--check``, so a typed-over number fails CI.

    python benchmarks/docs_tables.py --write    # rewrite every printed block (also the default)
    python benchmarks/docs_tables.py --check    # exit 1, naming each block that differs

A block's command is a benchmark's own printer of its result files (``--table``, ``--from-json``) or
one of this script's printers, ``--print NAME ARGS``. The pages' one-off table scripts are folded in
here, so their tables share one result format: an opening line with the date, machine and command of
each measurement that records them and the committed files read, then the table:

    --print claims FILE    the verdict table of one claims JSON: the claims whose current result it holds
    --print other          every claims JSON neither provenance.json names nor a --print claims block prints
    --print pending        the registered claims that no committed claims JSON gives a verdict
    --print registered     when each claim was registered (the registry's ``status``), grouped
    --print audit FILE     the clean estimator audit stored in a claims JSON
    --print coverage DIR   pass@1 and pass@n of the starting and final policy of every run DIR/<run>-s<seed>/
    --print rerun OLD NEW  each claim that two claims JSONs both judge: the earlier and the rerun's mean,
                           interval and verdict, with the verdicts that changed counted
    --print report DIR...  what `entflow run` / `entflow analyze` write to summary.md for these run directories
    --print headline       the README's results: the current verdict of each HEADLINE claim, with any
                           independent rerun that docs/results/history.json records
    --print family NAME    the results of a pre-registered family (claims.yaml's ``family``): only the
                           members whose Holm-corrected verdict is "reproduced", with their intervals and
                           raw and Holm p; the other members are named with their verdicts
    --print bench KEY      a benchmark table named in provenance.json's "benchmarks" (raw JSON → table)
    --print verify         what `entflow reproduce --verify` recomputes, by source
    --print plan PART      a sequential part's committed power plan
    --print series PART    the verdicts of a sequential part's fresh series so far
    --print design-draws   the judge problems the real-v2 design runs drew into training
    --print klcov-selected DIR          the tokens KL-Cov penalised per mini-batch in DIR's runs
    --print eval FILE      one `entflow eval` JSON, metric by metric, and where its wall time went
    --print design-runs DIR...          real-v2 design runs: accuracy, probe entropy, retention, cost
    --print cost DIR       what each timed real-v2 run cost against the 25-minute budget (run_times.json)
    --print trl-crosscheck FILE...      experiments/real_trl/crosscheck.py's output, seed by seed
    --print v1-review DIR  what the superseded v1 real-LM study got wrong, recomputed from its runs
    --print regime-warmstarts LABEL=FILE...   candidate warm starts of the regime, pass@1 / pass@n
    --print regime-passk FILE          one policy's pass@k on each split and the rare route's share
    --print regime-long FILE           comparison.json's long GRPO run and its plateau
    --print regime-comparison FILE     comparison.json's methods against GRPO
    --print regime-flow LABEL=FILE...  flow_balance.py's entropy flows and λ* per setting
    --print trl-suite FILE TRL's own GRPO tests with trl.GRPOTrainer and with the adapter

Claims JSONs are found by name: every ``docs/results/**/*claims*.json``. A claim that several files
hold is shown once, with the newest measurement that gives it a verdict; the other files say so.
Each table's caption gives the date, machine and command of its measurement: from the JSON's own
``date`` / ``machine`` / ``command`` keys, else from ``docs/results/provenance.json``, else the date
of the commit that added the file (marked "from git log").
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
END = "(End of what that command prints.)"
BLOCK = re.compile(r"(Printed by `(?P<cmd>python benchmarks/[^`]+)`:\n\n)(?P<body>.*?)(" + re.escape(END) + ")", re.S)
PROVENANCE = "docs/results/provenance.json"
CLAIMS_GLOB = "docs/results/**/*claims*.json"
NOT_RUN = "not run"


def render(command: str, root: Path = ROOT) -> str:
    """What ``command`` prints, run from ``root`` with this interpreter (a trailing newline added)."""
    argv = shlex.split(command)
    if argv[:1] != ["python"] or not argv[1].startswith("benchmarks/"):
        raise ValueError(f"a generated block's command must start with 'python benchmarks/', got {command!r}")
    if argv[1:3] == ["benchmarks/docs_tables.py", "--print"]:  # this script's own tables: no new process
        return print_table(argv[3:], root).rstrip("\n") + "\n"
    res = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=root, timeout=300)
    if res.returncode:
        raise RuntimeError(f"{command!r} exited {res.returncode}: {res.stderr[-2000:]}")
    return res.stdout.rstrip("\n") + "\n"


def stale_blocks(docs: Path, root: Path = ROOT, write: bool = False) -> list[str]:
    """``file: command`` of every printed block under ``docs`` (and in the README beside it) whose text
    differs from its command's output (rewritten in place with ``write``)."""
    stale = []
    readme = docs.parent / "README.md"
    for path in sorted(docs.glob("*.md")) + ([readme] if readme.is_file() else []):
        text = path.read_text()

        def swap(m: re.Match, path: Path = path) -> str:
            fresh = render(m["cmd"], root) + "\n"
            if fresh != m["body"]:
                stale.append(f"{path.name}: {m['cmd']}")
            return m.group(1) + fresh + m.group(4)

        new = BLOCK.sub(swap, text)
        if write and new != text:
            path.write_text(new)
    return stale


def table_lines_outside_blocks(page: Path) -> list[int]:
    """1-based numbers of the lines of ``page`` that are Markdown table rows (start with ``|``) but lie
    outside every printed block: rows typed by hand."""
    text = page.read_text()
    inside = [False] * (text.count("\n") + 1)
    for m in BLOCK.finditer(text):
        first = text.count("\n", 0, m.start())
        last = text.count("\n", 0, m.end())
        for i in range(first, last + 1):
            inside[i] = True
    return [i + 1 for i, line in enumerate(text.split("\n")) if line.lstrip().startswith("|") and not inside[i]]


# --- numbers --------------------------------------------------------------------------------------


def num(v: Any, digits: int = 3) -> str:
    """``+0.123`` with a true minus sign; ``—`` for a missing or non-finite value."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:+.{digits}f}".replace("-", "\u2212")


def plain(v: Any, digits: int = 3) -> str:
    """``0.123`` (no sign unless negative, then a true minus sign); ``—`` for a missing or non-finite value."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{v:.{digits}f}".replace("-", "\u2212")


def cell(text: str) -> str:
    """A table cell: pipes escaped, newlines folded."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def seeds_text(seeds: list[int]) -> str:
    """``0–4`` for a run of consecutive seeds, else the list."""
    if not seeds:
        return "—"
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(str(s) for s in seeds)


def criterion_text(claim: dict) -> str:
    """The verdict's rule as stored in the claims JSON (``kind`` and ``threshold``)."""
    sign = {"greater": ">", "less": "<", "at_least": "≥", "at_most": "≤"}.get(claim.get("kind", ""), "?")
    return f"{sign} {claim.get('threshold') or 0.0:g}".replace("-", "\u2212")


def interval_text(c: dict) -> str:
    """``mean [low, high]`` at the entry's level (95 % unless it says otherwise)."""
    if c.get("mean") is None or c.get("verdict") == NOT_RUN:
        return "—"
    low, high = c.get("ci_low"), c.get("ci_high")
    if low is None and c.get("half") is not None:
        low, high = c["mean"] - c["half"], c["mean"] + c["half"]
    level = c.get("level", 0.95)
    tag = "" if abs(level - 0.95) < 1e-12 else f" ({100 * level:.1f} %)"
    return f"{num(c['mean'])} [{num(low)}, {num(high)}]{tag}"


# --- claims files ---------------------------------------------------------------------------------


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def provenance(root: Path) -> dict:
    p = root / PROVENANCE
    return _load(p) if p.exists() else {"claims": {}, "pending": {}, "benchmarks": {}}


def claims_files(root: Path) -> list[str]:
    """Every committed claims JSON (a file named ``*claims*.json`` whose top level holds a ``claims`` list),
    relative to ``root``, sorted."""
    found = []
    for p in sorted(root.glob(CLAIMS_GLOB)):
        data = _load(p)
        if isinstance(data, dict) and isinstance(data.get("claims"), list):
            found.append(p.relative_to(root).as_posix())
    return found


def _git_added(rel: str, root: Path) -> str | None:
    try:
        res = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%cI", "--", rel],
            capture_output=True,
            text=True,
            cwd=root,
            timeout=60,
        )
    except OSError:
        return None
    dates = res.stdout.split()
    return dates[-1] if res.returncode == 0 and dates else None


def file_meta(rel: str, root: Path) -> dict:
    """Date, machine, command and a sortable time of one claims JSON (see the module docstring)."""
    data = _load(root / rel)
    if all(k in data for k in ("date", "machine", "command")):
        return {
            "date": str(data["date"]),
            "machine": str(data["machine"]),
            "command": str(data["command"]),
            "at": str(data["date"]),
            "source": "",
        }
    prov = provenance(root)["claims"].get(rel)
    if prov:
        return {**prov, "at": prov["measured_at"], "source": ""}
    added = _git_added(rel, root)
    return {
        "date": added[:10] if added else "not committed yet",
        "machine": "not recorded",
        "command": "not recorded",
        "at": added or "9999",
        "source": " (from git log)" if added else "",
    }


def current_sources(root: Path) -> dict[str, str]:
    """Claim id → the claims JSON whose result the page shows (a ``not run`` entry never counts).

    The newest result wins. Files holding that same result (the same per-seed values and verdict: parts of one
    run, or a copy recomputed from it) are one measurement; it is shown with a file whose date, machine and
    command are recorded (in the file or in provenance.json) if there is one, the newest of those."""
    entries: dict[str, list[tuple[str, bool, str, Any, str]]] = {}
    for rel in claims_files(root):
        meta = file_meta(rel, root)
        recorded = meta["machine"] != "not recorded"  # in the file itself or in provenance.json
        for c in _load(root / rel)["claims"]:
            if c.get("verdict") != NOT_RUN:
                entries.setdefault(c["id"], []).append((meta["at"], recorded, rel, c.get("values"), c["verdict"]))
    chosen = {}
    for cid, found in entries.items():
        newest = max(found, key=lambda e: (e[0], e[2]))
        same = [e for e in found if (e[3], e[4]) == (newest[3], newest[4])]
        chosen[cid] = max(same, key=lambda e: (e[1], e[0], e[2]))[2]
    return chosen


def caption(rel: str, root: Path) -> str:
    m = file_meta(rel, root)
    return f"Measured {m['date']}{m['source']} on {m['machine']}. Command: `{m['command']}`. Data: `{rel}`."


def claim_rows(c: dict, file_seeds: list[int], superseded: bool = False) -> list[str]:
    seeds = c.get("preregistered_seeds") or file_seeds
    seed_cell = seeds_text(seeds) + ("" if c.get("seeds_as_registered", True) else " (not the registered seeds)")
    values = ", ".join(num(v) for v in c.get("values") or []) or "—"
    reason = f" ({cell(c['reason'])})" if c.get("reason") else ""
    if c.get("verdict_holm") is not None:  # a claim in a family: its Holm-corrected verdict too
        reason += f"; Holm-corrected in its family: {c['verdict_holm']}"
    if superseded:  # the registry's reason is printed once, under the table
        reason += "; *superseded* (below the table)"
    rows = [
        f"| `{c['id']}`: {cell(c.get('claim', ''))} | {cell(c.get('measured', ''))} | {values} | "
        f"{interval_text(c)} | {criterion_text(c)} | **{c['verdict']}**{reason} | {seed_cell} |"
    ]
    for comp in c.get("components") or []:
        what = f"{comp['run']} − {comp['baseline']}, {comp['fact']}"
        vals = ", ".join(num(v) for v in comp.get("values") or []) or "—"
        rows.append(f"| ↳ component: {cell(what)} | | {vals} | {interval_text(comp)} | | {comp['verdict']} | |")
    return rows


# what `entflow reproduce` writes into each row of a claim in a family (evidence.reproduce.add_family_corrections)
FAMILY_KEYS = ("family", "family_size", "p_value", "holm_p", "verdict_holm")
HEADER = [
    "| claim | measured | per seed | mean [95 % CI] | criterion | verdict | seeds |",
    "|---|---|---|---|---|---|---|",
]


def print_claims(rel: str, root: Path) -> str:
    """Caption and verdict table of ``rel``: its claims whose current result it holds; a note naming
    its other claims and where they are shown."""
    data = _load(root / rel)
    current = current_sources(root)
    claims = data["claims"]
    shown = [c for c in claims if current.get(c["id"]) == rel]
    out = [caption(rel, root), ""]
    superseded = {c["id"]: c["superseded"] for c in registry(root) if c.get("superseded")}
    if shown:
        out += HEADER
        for c in shown:
            out += claim_rows(c, data.get("seeds", []), superseded=c["id"] in superseded)
        out.append("")
    why: dict[str, list[str]] = {}
    for c in shown:
        if c["id"] in superseded:
            why.setdefault(superseded[c["id"]], []).append(f"`{c['id']}`")
    for text, ids in why.items():
        out += [f"Superseded ({', '.join(ids)}; the registry's `superseded`): {text}.", ""]
    family = [c for c in shown if all(k in c for k in FAMILY_KEYS)]
    if family:  # a pre-registered family: raw and Holm-corrected verdicts
        from entflow.evidence.reproduce import families_markdown

        out += [families_markdown(family, heading="").strip("\n"), ""]
    elsewhere: dict[str, list[str]] = {}
    for c in claims:
        if current.get(c["id"]) in (None, rel):
            continue
        other = current[c["id"]]
        twin = next(o for o in _load(root / other)["claims"] if o["id"] == c["id"])
        same = twin.get("values") == c.get("values") and twin.get("verdict") == c.get("verdict")
        key = f"the same values, shown with `{other}`" if same else f"superseded by the newer `{other}`, shown there"
        elsewhere.setdefault(key, []).append(f"`{c['id']}`")
    for key, ids in elsewhere.items():
        out.append(f"Also in this file ({key}): {', '.join(ids)}.")
        out.append("")
    earlier = prose_only_figures(root)
    for c in shown:
        if c["id"] in earlier:
            date, text = earlier[c["id"]]
            before = text.rsplit("; ", 1)[-1].split(" (")[0]
            same = "the same verdict" if before == c.get("verdict") else f"the verdict changed to {c.get('verdict')}"
            out.append(
                f"Before this rerun, `{c['id']}` was published as prose only ({date}, no per-run data; "
                f"`docs/results/history.json`): {text}. This rerun: {same}."
            )
            out.append("")
    not_run = [c for c in claims if c.get("verdict") == NOT_RUN and c["id"] not in current]
    if not_run:
        ids = ", ".join(f"`{c['id']}`" for c in not_run)
        out.append(f"Not run in this file: {ids} (see the pending table).")
    return "\n".join(out).rstrip("\n") + "\n"


def prose_only_figures(root: Path) -> dict[str, tuple[str, str]]:
    """Claim id → (date, figures) of the verdicts history.json keeps that were published as prose
    only (an entry with per-claim ``figures`` and no ``data``)."""
    path = root / "docs/results/history.json"
    if not path.is_file():
        return {}
    out: dict[str, tuple[str, str]] = {}
    for e in _load(path).get("entries", []):
        if e.get("data") is None and isinstance(e.get("figures"), dict):
            out.update({cid: (e.get("date", "?"), text) for cid, text in e["figures"].items()})
    return out


# The claims the README quotes: whether GRPO narrows coverage, and the controls that lift it.
HEADLINE = ("yue-coverage", "exploration-klcov", "sweep-clip-cov", "passk-training")


def independent_reruns(root: Path) -> dict[str, dict]:
    """Claim id → the summary of a rerun outside this repository (history.json entries with ``reruns``:
    ``mean``, ``ci_low``, ``ci_high``, ``n``, ``verdict`` and optionally ``positive``, the seeds above 0)."""
    path = root / "docs/results/history.json"
    if not path.is_file():
        return {}
    out: dict[str, dict] = {}
    for e in _load(path).get("entries", []):
        out.update(e.get("reruns") or {})
    return out


def print_headline(root: Path) -> str:
    """The README's results table: each :data:`HEADLINE` claim's current verdict (its newest committed
    claims JSON) and, where history.json records one, an independent rerun on further seeds."""
    current = current_sources(root)
    reruns = independent_reruns(root)
    out = [
        "| claim | measured | seeds | mean [95 % CI] | verdict | independent rerun, further seeds |",
        "|---|---|---|---|---|---|",
    ]
    sources = []
    for cid in HEADLINE:
        if cid not in current:
            out.append(f"| `{cid}` | | | — | no committed verdict | |")
            continue
        rel = current[cid]
        data = _load(root / rel)
        c = next(x for x in data["claims"] if x["id"] == cid)
        seeds = c.get("preregistered_seeds") or data.get("seeds", [])
        rerun = "—"
        if (r := reruns.get(cid)) is not None:
            positive = f", positive on {r['positive']} of {r['n']}" if r.get("positive") is not None else ""
            rerun = f"{interval_text(r)} on {r['n']} seeds{positive}: {r['verdict']}"
        out.append(
            f"| `{cid}`: {cell(c.get('claim', ''))} | {cell(c.get('measured', ''))} | {seeds_text(seeds)} | "
            f"{interval_text(c)} | **{c['verdict']}** | {rerun} |"
        )
        sources.append(rel)
    files = ", ".join(f"`{rel}`" for rel in dict.fromkeys(sources))
    out += ["", f"Data: {files}; independent reruns: `docs/results/history.json`."]
    return "\n".join(out) + "\n"


def print_family(name: str, root: Path) -> str:
    """The README's table of one claim family: each member whose current verdict (:func:`current_sources`)
    is "reproduced" after the family's Holm correction, with its interval, one-sided p and Holm p. The
    other members get no numbers here, only their verdicts (their figures are in docs/reproduction.md):
    the README quotes only what reproduced."""
    current = current_sources(root)
    members: list[tuple[str, dict]] = []
    for cid, rel in current.items():
        data = _load(root / rel)
        c = next(x for x in data["claims"] if x["id"] == cid)
        if c.get("family") == name:
            members.append((rel, {"seeds": data.get("seeds", []), **c}))
    if not members:
        return f"No verdict of the claim family `{name}` is committed yet.\n"
    size = max(c.get("family_size", len(members)) for _, c in members)
    kept = [(rel, c) for rel, c in members if c.get("verdict_holm") == "reproduced"]
    out = [
        f"| claim | measured | seeds | mean [95 % CI] | p (one-sided) | Holm p ({size} claims) | verdict (Holm) |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, c in kept:
        seeds = c.get("preregistered_seeds") or c["seeds"]
        out.append(
            f"| `{c['id']}`: {cell(c.get('claim', ''))} | {cell(c.get('measured', ''))} | {seeds_text(seeds)} | "
            f"{interval_text(c)} | {c['p_value']:.4f} | {c['holm_p']:.4f} | **{c['verdict_holm']}** |"
        )
    if not kept:
        out.append("| (none) | | | | | | |")
    others = [(rel, c) for rel, c in members if c.get("verdict_holm") != "reproduced"]
    out.append("")
    out.append(f"{len(kept)} of the family's {size} registered claims reproduced after the Holm correction.")
    if others:
        listed = "; ".join(
            f"`{c['id']}` {c.get('verdict_holm') or c['verdict']} (raw: {c['verdict']})" for _, c in others
        )
        out.append(f"Not quoted here: {listed}.")
    if len(members) < size:
        missing = size - len(members)
        out.append(f"{missing} registered member{'s have' if missing > 1 else ' has'} no committed verdict.")
    files = ", ".join(f"`{rel}`" for rel in dict.fromkeys(rel for rel, _ in members))
    out += ["", f"Data: {files}."]
    return "\n".join(out) + "\n"


def print_rerun(old_rel: str, new_rel: str, root: Path) -> str:
    """A rerun against the measurement it repeats: every claim both files judge, side by side, and how
    many verdicts changed (a rerun on another CPU differs in its numbers; the verdicts should hold)."""
    old = {c["id"]: c for c in _load(root / old_rel)["claims"] if c.get("verdict") != NOT_RUN}
    new = [c for c in _load(root / new_rel)["claims"] if c.get("verdict") != NOT_RUN and c["id"] in old]
    out = [
        f"Earlier: {caption(old_rel, root)}",
        "",
        f"Rerun: {caption(new_rel, root)}",
        "",
        "| claim | earlier: mean [95 % CI] | earlier verdict | rerun: mean [95 % CI] | rerun verdict |",
        "|---|---|---|---|---|",
    ]
    changed = []
    for c in new:
        o = old[c["id"]]
        mark = "" if c["verdict"] == o["verdict"] else " (changed)"
        if mark:
            changed.append(c["id"])
        out.append(
            f"| `{c['id']}` | {interval_text(o)} | {o['verdict']} | {interval_text(c)} | **{c['verdict']}**{mark} |"
        )
    out += [
        "",
        f"{len(new)} claims judged by both; {len(changed)} of their verdicts changed"
        + (f": {', '.join(changed)}." if changed else "."),
    ]
    return "\n".join(out) + "\n"


def print_report(run_dirs: list[str], root: Path) -> str:
    """The report's tables (``summary.md`` of ``entflow run`` and ``entflow analyze``) for committed run
    directories: the package's own summary, so the page shows what a user's report shows, with its
    ``##`` headings as ``####`` (the page's block sits under a ``###`` section)."""
    from entflow.analysis.report import summarize_run, summary_markdown

    for d in run_dirs:
        if not (root / d / "metrics.jsonl").is_file():
            raise FileNotFoundError(f"--print report: {d} holds no metrics.jsonl")
    text = summary_markdown([summarize_run(root / d) for d in run_dirs]).rstrip("\n") + "\n"
    return re.sub(r"^## ", "#### ", text, flags=re.M)


def shown_with_its_own_block(root: Path) -> set[str]:
    """The claims JSONs that a ``--print claims`` block of docs/reproduction.md already prints."""
    page = root / "docs" / "reproduction.md"
    if not page.is_file():
        return set()
    cmds = (m["cmd"].split() for m in BLOCK.finditer(page.read_text()))
    return {c[4] for c in cmds if c[2:4] == ["--print", "claims"] and len(c) == 5}


def print_other(root: Path) -> str:
    """Every claims JSON that provenance.json does not name and no ``--print claims`` block of the
    page prints (one dropped in later), in full."""
    named = set(provenance(root)["claims"]) | shown_with_its_own_block(root)
    others = [rel for rel in claims_files(root) if rel not in named]
    if not others:
        return "No other claims files.\n"
    return "\n".join(f"#### `{rel}`\n\n{print_claims(rel, root)}" for rel in others)


def registry(root: Path) -> list[dict]:
    import yaml

    found = sorted(root.glob("src/entflow/**/claims.yaml"))
    if not found:
        raise FileNotFoundError(f"no claims registry (src/entflow/**/claims.yaml) under {root}")
    return yaml.safe_load(found[0].read_text())["claims"]


def print_registered(root: Path) -> str:
    """When each claim was registered: the registry's ``status`` (pre-registered, when, and before
    which seeds), one row per distinct status with the claims that carry it."""
    groups: dict[str, list[str]] = {}
    for c in registry(root):
        groups.setdefault(c.get("status") or "no status recorded", []).append(f"`{c['id']}`")
    out = ["| registered | claims |", "|---|---|"]
    out += [f"| {cell(status)} | {', '.join(ids)} |" for status, ids in groups.items()]
    rel = next(p.relative_to(root).as_posix() for p in sorted(root.glob("src/entflow/**/claims.yaml")))
    return "\n".join([f"Data: `{rel}` (each claim's `status`).", "", *out]) + "\n"


def print_pending(root: Path) -> str:
    """The registered claims that no committed claims JSON gives a verdict, with their status."""
    current = current_sources(root)
    notes = provenance(root).get("pending", {})
    rows = [c for c in registry(root) if c["id"] not in current]
    if not rows:
        return "Every registered claim has a committed verdict.\n"
    out = ["| claim | setting | seeds | status |", "|---|---|---|---|"]
    for c in rows:
        status = notes.get(c["id"], "registered, not run yet: raw data pending")
        out.append(
            f"| `{c['id']}`: {cell(c.get('statement', ''))} | {c.get('setting', 'demo')} | "
            f"{seeds_text(c.get('seeds', []))} | {status} |"
        )
    return "\n".join(out) + "\n"


AUDIT_STARTS = {"warm_start": "From the warm start", "after_grpo": "From each seed's GRPO-trained policy (final step)"}
AUDIT_VARIANTS = {"batch": "batch step", "isolated": "isolated per-token step", "tabular_head": "tabular head"}


def print_audit(rel: str, root: Path) -> str:
    """The clean estimator audit of a claims JSON: Spearman correlation with the true entropy change,
    mean ± 95 % half-width (n) and rank, per start and variant."""
    audit = _load(root / rel)["audit"]
    out = [caption(rel, root), ""]
    for start, title in AUDIT_STARTS.items():
        if start not in audit:
            continue
        summary = audit[start]["summary"]
        estimators = list(dict.fromkeys(r["estimator"] for r in summary))
        by = {(r["variant"], r["estimator"]): r for r in summary}
        cols = [v for v in AUDIT_VARIANTS if any(k[0] == v for k in by)]
        out.append(f"{title} (measured in {audit[start].get('wall_s', float('nan')):.0f} s):")
        out.append("")
        out.append("| estimator | " + " | ".join(f"{AUDIT_VARIANTS[v]}: Spearman | rank" for v in cols) + " |")
        out.append("|---|" + "---:|---:|" * len(cols))
        for e in estimators:
            cells = []
            for v in cols:
                r = by.get((v, e))
                cells += [f"{num(r['mean'])} ± {r['half']:.3f} (n={r['n']})", str(r["rank"])] if r else ["—", "—"]
            out.append(f"| {e} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def print_coverage(rel: str, root: Path) -> str:
    """Held-out pass@1 / pass@n (n = the samples per problem) of the starting policy → the final one, per
    run type and seed, read from each committed ``<run>-s<seed>/coverage.json`` under ``rel``."""
    runs: dict[str, dict[int, dict]] = {}
    for path in sorted((root / rel).glob("*-s*/coverage.json")):
        run, seed = path.parent.name.rsplit("-s", 1)
        runs.setdefault(run, {})[int(seed)] = _load(path)
    if not runs:
        raise FileNotFoundError(f"no <run>-s<seed>/coverage.json under {rel}")
    seeds = sorted({s for by_seed in runs.values() for s in by_seed})
    n = next(iter(next(iter(runs.values())).values()))["n"]

    def pk(entry: dict, k: int) -> str:
        return f"{entry['splits']['val']['pass_at_k'][str(k)]:.3f}"

    out = [
        f"Held-out pass@1 / pass@{n} ({n} samples per problem), the starting policy → the final one. "
        f"Data: `{rel}/<run>-s<seed>/coverage.json`.",
        "",
        "| run | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|" + "---|" * len(seeds),
    ]
    for run, by_seed in runs.items():
        cells = []
        for s in seeds:
            c = by_seed.get(s)
            cells.append(
                f"{pk(c['warm'], 1)} → {pk(c['final'], 1)} / {pk(c['warm'], n)} → {pk(c['final'], n)}" if c else "—"
            )
        out.append(f"| {run} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


# a benchmark key's prefix -> the script whose ``--from-json`` prints its table, for result files
# written before the benchmarks shared ``_result.py`` (which names its script as ``benchmark``)
BENCH_SCRIPTS = {"real-step": "benchmarks/real_step.py", "method-overhead": "benchmarks/method_overhead.py"}


def bench_script(key: str, first: dict) -> str:
    """The script that prints benchmark ``key``'s table: the one its result file names, else by prefix."""
    if isinstance(first.get("benchmark"), str):
        return f"benchmarks/{first['benchmark']}.py"
    script = next((s for prefix, s in BENCH_SCRIPTS.items() if key.startswith(prefix)), None)
    if script is None:
        raise KeyError(f"benchmark {key!r} has no printer")
    return script


def tables_only(out: str) -> list[str]:
    """An older printer's output as the page shows it: its Markdown rows, and the prose between two
    tables set apart (what it prints before the first table and after the last is left out)."""
    table: list[str] = []
    between: list[str] = []
    for line in out.splitlines():
        if line.startswith("|"):
            if table and between:
                table += ["", *between, ""]
            between = []
            table.append(line)
        elif table and line.strip():
            between.append(line.strip())
    return table


def whole_output(out: str) -> list[str]:
    """A ``_result.py`` printer's whole output as Markdown: tables and ``- `` lists as printed, every
    other line its own paragraph (so the settings, ratios and verdict lines do not run together)."""
    lines: list[str] = []
    for line in out.strip("\n").splitlines():
        block = line.startswith(("|", "- "))
        if lines and lines[-1] and (not block or not lines[-1].startswith(("|", "- "))):
            lines.append("")
        if line.strip() or (lines and lines[-1]):
            lines.append(line.rstrip())
    return [ln for i, ln in enumerate(lines) if ln or (i and lines[i - 1])]


def print_bench(key: str, root: Path) -> str:
    """Caption and table of a benchmark whose raw JSON provenance.json names: the table the
    benchmark's own ``--from-json`` prints (its Markdown rows, and the prose between two tables).
    The caption's date, machine and command are provenance.json's, else the first file's own."""
    benches = provenance(root)["benchmarks"]
    if key not in benches:
        raise KeyError(f"no benchmark {key!r} in {PROVENANCE}; known: {sorted(benches)}")
    b = benches[key]
    files = [root / f for f in b["files"]]
    first = _load(files[0])
    res = subprocess.run(
        [sys.executable, bench_script(key, first), "--from-json", *map(str, files)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=300,
    )
    if res.returncode:
        raise RuntimeError(f"{bench_script(key, first)} --from-json exited {res.returncode}: {res.stderr[-2000:]}")
    table = whole_output(res.stdout) if "benchmark" in first else tables_only(res.stdout)
    meta = {k: b.get(k) or first.get(k) for k in ("date", "machine", "command")}
    if not all(meta.values()):
        raise KeyError(f"benchmark {key!r}: no {[k for k, v in meta.items() if not v]} in {PROVENANCE} or its file")
    note = f" ({b['note']})" if b.get("note") else ""
    head = (
        f"Measured {meta['date']} on {meta['machine']}. Command: `{meta['command']}`. "
        f"Data{note}: {', '.join(f'`{f}`' for f in b['files'])}."
    )
    return "\n".join([head, "", *table]) + "\n"


class UsageError(ValueError):
    """``--print`` named no table it knows, or gave it the wrong number of arguments."""


def print_plan(part: str, root: Path) -> str:
    """The committed power plan of a part's headline claims (``src/entflow/evidence/plans/PART.json``):
    each claim's δ, the noise of its margin from the earlier draws, its looks and maximum, the power
    at δ, and whether it runs or is not decidable at this budget (and why)."""
    rel = f"src/entflow/evidence/plans/{part}.json"
    path = root / rel
    if not path.is_file():
        return f"No plan for `{part}` is committed yet.\n"
    plan = _load(path)
    out = [
        "| claim | δ | σ of the margin (earlier values) | looks (seeds) | Pocock level α′ | power at δ | plan |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    for cid, r in plan["claims"].items():
        p = r.get("plan") or {}
        looks = ", ".join(str(n) for n in p.get("looks", [])) or "—"
        decision = r["decision"] if r["decision"] != "planned" else f"run, at most {p['maximum']} seeds"
        if r.get("why") and r["decision"] != "planned":
            decision += f": {r['why']}"
        out.append(
            f"| `{cid}` | {plain(r['delta'], 3)} | {plain(r['sigma'], 4)} ({r['n_earlier']}) | {looks} | "
            f"{plain(p.get('level'), 4)} | {plain(p.get('power'), 2)} | {cell(decision)} |"
        )
    budget, spent = plan["budget_s"] / 3600, plan["planned_cost_s"] / 3600
    costs = ", ".join(f"{k} {v:.0f} s" for k, v in plan["run_cost_s"].items())
    out += [
        "",
        f"Budget {budget:.0f} h of runs, one at a time (a run: {costs}); the planned claims cost {spent:.1f} h at "
        f"their maxima. One-sided α {plan['alpha']} per side over the looks (a family: α / m per member), "
        f"power {plan['power']} at δ. Seeds {seeds_text(plan['seeds'])}. Planned {plan['date'][:10]} "
        f"(`{plan['command']}`). Data: `{rel}`.",
    ]
    return "\n".join(out) + "\n"


def print_series(part: str, root: Path) -> str:
    """The verdicts of a part's fresh series so far (``docs/results/sequential/PART_verdicts.json``): each
    planned claim's seeds used, mean margin and its one-sided bounds at the look's level, and the
    verdict (``continue`` while a look is due)."""
    rel = f"docs/results/sequential/{part}_verdicts.json"
    path = root / rel
    if not path.is_file():
        return f"The `{part}` series is not judged yet (`series.py judge {part}`: verdicts from its committed runs).\n"
    data = _load(path)
    plan = _load(root / data["plan"])["claims"]
    said = {c["id"]: c["statement"] for c in registry(root)}
    out = [
        "| claim | δ | seeds so far (maximum) | mean margin [lower, upper bound] | verdict |",
        "|---|---:|---|---|---|",
    ]
    for cid, r in data["claims"].items():
        if r["verdict"] == "not decidable at this budget":
            continue
        mx = plan[cid]["plan"]["maximum"]
        bounds = "—" if r.get("n", 0) < 3 else f"{num(r['mean'])} [{num(r['low'])}, {num(r['high'])}]"
        delta, claim = plain(plan[cid]["delta"], 3), f"`{cid}`: {cell(said.get(cid, ''))}"
        out.append(f"| {claim} | {delta} | {r.get('n', 0)} ({mx}) | {bounds} | **{r['verdict']}** |")
    undecidable = [f"`{c}`" for c, r in data["claims"].items() if r["verdict"] == "not decidable at this budget"]
    out += [
        "",
        f"Not decidable at this budget (declared in the plan, never run): {', '.join(undecidable) or 'none'}. "
        f"When last judged, {len(data['runs_due'])} runs were due at the open claims' next looks (records "
        f"committed since are judged at those looks). Data: `{rel}` (records: "
        f"`{data['records']}`; trained at the plan's commit {data['plan_commit'][:7]}).",
    ]
    return "\n".join(out) + "\n"


def design_judge_draws(root: Path, judge_size: int | None = None) -> dict[str, Any]:
    """Replay the training sampler of every committed real-v2 design run
    (``docs/results/real-v2-design/runs/*/config.yaml``: its seed, steps, prompts per step and
    problem sets) and return the problems of the registered judge set (``real_v2.yaml``) it drew:
    ``{runs, seeds, judge_size, drawn: sorted problem texts, positions: their 0-based places in the
    judge set}``. ``judge_size`` replaces the size of the judge set the runs' own configs excluded
    from training (None: their own; the registered preset's excludes the whole set)."""
    import random

    import yaml

    from entflow.hf.data import load_data, normalize_problem
    from entflow.trainer.seeds import STEP, stream_seed

    reg = yaml.safe_load((root / "src/entflow/hf/configs/real_v2.yaml").read_text())["task_params"]
    reg_params = {k: v for k, v in reg.items() if k not in ("held_out", "eval_split", "train_seed")}
    judge = load_data("basic_arithmetic", **reg).splits["judge"]
    place = {normalize_problem(e.prompt): i for i, e in enumerate(judge)}
    drawn: set[str] = set()
    runs, seeds = [], set()
    for cfg_path in sorted((root / "docs/results/real-v2-design/runs").glob("*/config.yaml")):
        cfg = yaml.safe_load(cfg_path.read_text())
        params = dict(cfg["task_params"])
        held = [dict(h) for h in params.pop("held_out")]
        if judge_size is not None:
            for h in held:
                if h["name"] == "judge":
                    h["size"] = judge_size
        params = {k: v for k, v in params.items() if k in reg_params or k in ("eval_split", "train_seed")}
        data = load_data("basic_arithmetic", held_out=held, **params)
        for step in range(1, cfg["steps"] + 1):
            rng = random.Random(stream_seed(cfg["seed"], STEP, step))
            for e in data.sample_train(cfg["prompts_per_step"], rng):
                if (key := normalize_problem(e.prompt)) in place:
                    drawn.add(key)
        runs.append(cfg_path.parent.name)
        seeds.add(cfg["seed"])
    return {
        "runs": runs,
        "seeds": sorted(seeds),
        "judge_size": len(judge),
        "drawn": sorted(drawn),
        "positions": sorted(place[d] for d in drawn),
    }


def print_design_draws(root: Path) -> str:
    """The judge problems the committed real-v2 design runs drew into training (their configs
    excluded a 400-problem judge set; the registered one has 448)."""
    got = design_judge_draws(root)
    where = f"positions {', '.join(str(p + 1) for p in got['positions'])} of {got['judge_size']}"
    return (
        f"Replaying the training sampler of the {len(got['runs'])} committed design runs (seeds "
        f"{seeds_text(got['seeds'])}) draws {len(got['drawn'])} distinct problems of the registered "
        f"{got['judge_size']}-problem judge set ({where}): the design runs' configs excluded only the first "
        "400 judge problems from training. The presets now list the whole judge set in both files, and "
        "`tests/hf/test_real_v2_preset.py` replays the design runs with today's design preset: none is drawn.\n"
    )


def print_klcov_selected(folder: str, root: Path) -> str:
    """How many tokens KL-Cov penalised per mini-batch in the committed runs of ``folder`` (every
    ``kl_cov_paper-s*`` run's metrics.jsonl): the range of ``kl_cov/n_selected`` and of ``n_tokens``
    over every training step, and the share of tokens that is."""
    import numpy as np

    sel, tok = [], []
    runs = sorted((root / folder).glob("kl_cov_paper-s*/metrics.jsonl"))
    for path in runs:
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if "kl_cov/n_selected" in row and row.get("n_tokens"):
                sel.append(row["kl_cov/n_selected"])
                tok.append(row["n_tokens"])
    if not sel:
        return f"No KL-Cov run with kl_cov/n_selected in `{folder}`.\n"
    s, t = np.asarray(sel), np.asarray(tok)
    return (
        f"KL-Cov at the paper's ratio 2e-3 in `{folder}` ({len(runs)} runs, {s.size} steps): "
        f"`kl_cov/n_selected` (tokens penalised per mini-batch, k = max(1, ⌊2e-3·N⌋)) ranges "
        f"{plain(s.min(), 2)}–{plain(s.max(), 2)} over mini-batches of {plain(t.min(), 1)}–{plain(t.max(), 1)} "
        f"response tokens (mean {plain(t.mean(), 1)}): {plain(100 * (s / t).mean(), 1)} % of the tokens on "
        "average, not the paper's 0.2 %. At this batch size the ratio does not act: KL-Cov penalises the "
        "floor of one token per mini-batch.\n"
    )


# --- one result format for the pages' other tables ------------------------------------------------
#
# Every printer below opens with one line saying where its figures come from: "Measured DATE on
# MACHINE. Command: `COMMAND`." for each file that records its date, machine and command (the keys
# ``date``, ``machine``, ``command``), then "Data: `FILE`, …." naming every committed file it read;
# then its table(s).


def source_line(files: list[str], root: Path, metas: list[dict] | None = None) -> str:
    """The opening line of a printed table: the measurement of each file that records its own date,
    machine and command (or the ``metas`` given), then the committed files read."""
    found = []
    for m in metas if metas is not None else (_load(root / f) for f in files if str(f).endswith(".json")):
        if isinstance(m, dict) and all(m.get(k) for k in ("date", "machine", "command")):
            found.append(f"Measured {m['date']} on {m['machine']}. Command: `{m['command']}`.")
    data = "Data: " + ", ".join(f"`{f}`" for f in files) + "."
    return " ".join([*dict.fromkeys(found), data])


# --- docs/real-models.md: evaluation, the real-v2 design and cost, the TRL cross-check -------------


def print_eval(rel: str, root: Path) -> str:
    """One ``entflow eval`` JSON: each metric's value and standard error, then its extras and where the
    wall time went."""
    d = _load(root / rel)
    rows = [source_line([rel], root), "", "| metric | value | ± s.e. |", "|---|---:|---:|"]
    for name, m in d["metrics"].items():
        rows.append(f"| {name} | {plain(m['value'])} | {plain(m['se'])} |")
    rows += [
        f"| mean response length (tokens) | {d['response_len']:.1f} | |",
        f"| token entropy (nats) | {plain(d['token_entropy'])} | |",
        f"| unparseable fraction | {plain(d['unparseable_frac'])} | |",
        f"| samples / s | {d['samples_per_s']:.2f} | |",
        f"| reward errors / timeouts | {d['reward_errors']:.0f} / {d['reward_timeouts']:.0f} | |",
    ]
    parts = [(k, d.get(f"{k}_s")) for k in ("load", "sampling", "greedy", "scoring")]
    if d.get("wall_s") is not None:
        spent = ", ".join(f"{k} {v:,.1f} s" for k, v in parts if v is not None)
        rows += ["", f"Wall time {d['wall_s']:,.0f} s ({d['wall_s'] / 60:.0f} min): {spent}."]
    return "\n".join(rows) + "\n"


def _method_label(cfg: dict) -> str:
    params = cfg.get("method_params") or {}
    return cfg["method"] + (f" (ratio {params['ratio']:g})" if "ratio" in params else "")


# Common horizons of the design runs' probe retention: the registered runs' 70 steps, and 60 (the
# shortest of the runs that compare the controls with GRPO)
RETENTION_HORIZONS = (60, 70)


def design_runs_table(run_dirs: list[Path]) -> str:
    """Design runs (their committed ``config.yaml``, ``metrics.jsonl``, ``timing.jsonl``) as one
    markdown table: held-out (design_eval) accuracy at T = 1 and greedy, the fixed-text probe's
    entropy and the sampled entropy from the first evaluation to the last, the probe's window
    retention (mean of the last 3 evaluations over the first 3's) over the run's own evaluations and
    over those up to each of :data:`RETENTION_HORIZONS` (where the run got there), truncation, the tokens a
    covariance method selected per step (its logged per-mini-batch mean × mini_batches), and the
    wall seconds per step, evaluations included."""
    import numpy as np

    from entflow.analysis.runs import load_config, load_metrics, series
    from entflow.analysis.stats import RETENTION_WINDOW, window_retention

    head = (
        "| run | method | lr | seed | steps | threads | acc T = 1 | greedy | probe entropy | retention (windows of 3) "
        f"| retention, steps {' / '.join(f'0–{h}' for h in RETENTION_HORIZONS)} "
        "| sampled entropy | truncated | selected tokens / step | wall s / step |\n"
        "|---|---|---:|---:|---:|---:|---|---|---|---:|---:|---|---|---:|---:|\n"
    )
    rows = []
    for d in run_dirs:
        cfg, recs = load_config(d), load_metrics(d)

        def ends(key: str, fmt: str = ".3f", recs: list = recs) -> str:
            _, v = series(recs, key)
            return f"{v[0]:{fmt}} → {v[-1]:{fmt}}" if v.size else "–"

        at, probe = series(recs, "val/probe_entropy")
        ret = window_retention(probe, RETENTION_WINDOW) if probe.size >= 2 * RETENTION_WINDOW else float("nan")
        upto = []  # the same retention over the evaluations up to a common step, where the run got there
        for h in RETENTION_HORIZONS:
            kept = probe[np.asarray(at) <= h]
            reached = h in {int(a) for a in at} and kept.size >= 2 * RETENTION_WINDOW
            upto.append(f"{window_retention(kept, RETENTION_WINDOW):.3f}" if reached else "–")
        sel = [r[k] for r in recs for k in ("clip_cov/n_selected", "kl_cov/n_selected") if k in r]
        timing = [json.loads(line) for line in (d / "timing.jsonl").read_text().splitlines() if line.strip()]
        steps = max(r["step"] for r in recs)
        per_step = timing[-1]["time/elapsed_s"] / max(1, len(timing)) if timing else float("nan")
        selected = f"{np.mean(sel) * cfg['mini_batches']:.2f}" if sel else "–"
        rows.append(
            f"| {d.name} | {_method_label(cfg)} | {cfg['lr']:g} | {cfg['seed']} | {steps} | {cfg['threads']} "
            f"| {ends('val/acc')} | {ends('val/acc_greedy')} | {ends('val/probe_entropy')} "
            f"| {ret:.3f} | {' / '.join(upto)} | {ends('val/entropy')} | {ends('val/truncated_frac')} "
            f"| {selected} | {per_step:.1f} |"
        )
    return head + "\n".join(rows) + "\n"


def print_design_runs(rels: list[str], root: Path) -> str:
    """The real-v2 design runs named (run folders), one row each (:func:`design_runs_table`)."""
    files = [f"{r}/" for r in rels]
    return source_line(files, root, metas=[]) + "\n\n" + design_runs_table([root / r for r in rels])


# What one registered real-v2 run costs, from its committed files: the wall time from the run's start to
# its final judge-set evaluation (``run_times.json``, taken from the run folder's file times when it was
# published by ``benchmarks/real_v2_record.py``) and, from its ``timing.jsonl``, the median training step
# (and its two largest parts, the rollout and the update) and the mean periodic evaluation.
#
# Other jobs on the machine can only slow a run down, so a run that shared the machine (its ``note`` in
# run_times.json) still answers the budget question one way: if it met the budget, a run alone would have
# too ("yes, though shared"); if it missed the budget by more than the other jobs' wall time
# (``other_jobs_s``, an upper bound on what they took from it, recorded when known), it would have missed
# it alone too. Otherwise, and for a run that was interrupted and resumed (its ``time/elapsed_s``
# restarts, so its wall time is only the resumed part), the table says it is not a measurement.
#
# A machine's speed varies by the day. When ``run_times.json`` has a ``speed_reference``
# (``{"then": [...], "now": [...]}``: ``benchmarks/real_step.py --out`` files, paths from the repository's
# root), the table is followed by the reference step's time on both occasions, their ratio, and each run's
# wall time scaled by it: a projection (the budget column judges only the measured wall time).
BUDGET_MIN = 25.0


def step_times(timing: list[dict]) -> tuple[list[float], list[float], bool]:
    """(wall seconds of each step without an evaluation, ``time/eval_s`` of each evaluation, resumed):
    a step's wall time is the growth of ``time/elapsed_s`` since the step before it; a drop in
    ``time/elapsed_s`` marks a resume, and the first step after one is left out."""
    import itertools

    steps, evals, resumed = [], [], False
    for prev, cur in itertools.pairwise(timing):
        if cur["time/elapsed_s"] < prev["time/elapsed_s"]:
            resumed = True
            continue
        if "time/eval_s" in cur:
            evals.append(cur["time/eval_s"])
        else:
            steps.append(cur["time/elapsed_s"] - prev["time/elapsed_s"])
    return steps, evals, resumed


def _stat(stat: Any, values: list[float]) -> str:
    return f"{stat(values):.1f}" if values else "–"


def budget_verdict(wall_min: float, resumed: bool, note: str, other_jobs_s: float | None) -> str:
    """Whether a run alone would have met :data:`BUDGET_MIN`, as far as its wall time says: other jobs
    only slow a run, so a shared run that met the budget says yes, and one that missed it by more than
    ``other_jobs_s`` says no."""
    if resumed:
        return "not a measurement: " + "; ".join(["resumed after an interruption"] + [note] * bool(note))
    ratio = f"{wall_min / BUDGET_MIN:.2f}× the budget"
    if not note:
        return "yes" if wall_min <= BUDGET_MIN else f"no ({ratio})"
    if wall_min <= BUDGET_MIN:
        return f"yes, though shared ({note})"
    if other_jobs_s is not None and wall_min - other_jobs_s / 60 > BUDGET_MIN:
        return f"no ({ratio}; over it even without the other jobs' {other_jobs_s:g} s: {note})"
    return f"not a measurement: {note}"


def reference_step_s(files: list[str], root: Path = ROOT) -> float:
    """The speed reference's step in seconds: the median plain step of ``real_step.py``'s entflow arm
    over every round in ``files`` (its ``--out`` files)."""
    from real_step import summarize  # benchmarks/real_step.py, beside this file

    return summarize([r for f in files for r in _load(root / f)["entflow"]])["step"]


def speed_lines(ref: dict, walls: dict[str, float], root: Path = ROOT) -> list[str]:
    """The machine's speed against the reference day's, and each run's wall time (min) scaled to it."""
    then, now = reference_step_s(ref["then"], root), reference_step_s(ref["now"], root)
    ratio = now / then
    scaled = "; ".join(f"{name} {wall / ratio:.1f} min" for name, wall in walls.items())
    code = lambda paths: ", ".join(f"`{p}`" for p in paths)  # noqa: E731
    return [
        "",
        f"Speed reference (`benchmarks/real_step.py`'s entflow arm, the same step and settings on both days): "
        f"a step took {then:.2f} s on the reference day ({code(ref['then'])}) and {now:.2f} s around these "
        f"runs ({code(ref['now'])}), so the machine ran {ratio:.2f}× {'slower' if ratio >= 1 else 'faster'}. "
        f"Wall time scaled to the reference day's speed (a projection, not a measurement): {scaled}.",
    ]


def cost_table(folder: Path, root: Path = ROOT, shown: str | None = None) -> str:
    """What each run of ``folder`` (``run_times.json`` and ``<run>/timing.jsonl``) cost against
    :data:`BUDGET_MIN` (see the comment above it); the speed reference's files are named from ``root``."""
    meta = _load(folder / "run_times.json")
    shown = shown or str(folder)
    lines = [
        f"Measured on {meta['machine']}. Wall time: the run folder's `config.yaml` written → its final "
        f"`coverage.json` written. Data: `{shown}/run_times.json`, `{shown}/<run>/timing.jsonl`.",
        "",
        "| run | start (UTC) | wall (min) | start + steps + periodic evaluations (min) | final checkpoint + "
        "judge-set evaluation (min) | median step (s) | of which rollout, update (s, median) | periodic evaluation "
        f"(s, mean) | within {BUDGET_MIN:g} min |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    walls = {}
    for name, rec in meta["runs"].items():
        timing = [json.loads(x) for x in (folder / name / "timing.jsonl").read_text().splitlines() if x.strip()]
        steps, evals, resumed = step_times(timing)
        wall = walls[name] = rec["wall_s"] / 60
        verdict = budget_verdict(wall, resumed, rec.get("note", ""), rec.get("other_jobs_s"))
        train = timing[-1]["time/elapsed_s"] / 60  # since the run's start, as its config.yaml
        split = "– | –" if resumed else f"{train:.1f} | {wall - train:.1f}"
        parts = ", ".join(
            _stat(statistics.median, [r[k] for r in timing if k in r]) for k in ("time/rollout_s", "time/update_s")
        )
        lines.append(
            f"| {name} | {rec['start'][11:19]} | {wall:.1f} | {split} | {_stat(statistics.median, steps)} | {parts} "
            f"| {_stat(statistics.mean, evals)} | {verdict} |"
        )
    if "speed_reference" in meta:
        lines += speed_lines(meta["speed_reference"], walls, root)
    return "\n".join(lines) + "\n"


def print_cost(rel: str, root: Path) -> str:
    """The cost table of the timed runs in ``rel`` (:func:`cost_table`)."""
    return cost_table(root / rel, root, shown=rel)


def print_trl_crosscheck(rels: list[str], root: Path) -> str:
    """experiments/real_trl/crosscheck.py's JSONs: per seed, the starting policy's held-out pass@1 and
    pass@n, then per method TRL's logged entropy at the first and last optimizer step, its retention and
    the final policy's held-out pass@1 and pass@n."""
    data = [_load(root / r) for r in rels]
    n = data[0]["coverage_n"]
    versions = sorted({f"torch {d['torch']}, transformers {d['transformers']}, TRL {d['trl']}" for d in data})
    rows = [
        f"{source_line(rels, root)} Versions: {'; '.join(versions)}.",
        "",
        f"| TRL adapter | seed | device | entropy first → last | retention | held-out pass@1 | held-out pass@{n} |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for d in data:
        w = d["warm"]["pass_at_k"]
        seed = d["config"]["seed"]
        rows.append(f"| starting policy | {seed} | {d['device']} | | | {plain(w['1'])} | {plain(w[str(n)])} |")
    for name in data[0]["runs"]:
        for d in data:
            r = d["runs"][name]
            c = r["coverage"]["pass_at_k"]
            rows.append(
                f"| {name} | {d['config']['seed']} | {d['device']} | {r['entropy_first']:.2f} → "
                f"{r['entropy_last']:.2f} | {r['entropy_retention']:.2f} | {plain(c['1'])} | {plain(c[str(n)])} |"
            )
    return "\n".join(rows) + "\n"


# --- docs/reproduction.md: what the superseded v1 real-LM study got wrong ---------------------------
#
# Recomputed from the v1 study's committed run folders and claims JSON (``docs/results/real-claims/``),
# per seed and as mean [95 % t-interval] over its 5 seeds: learning to stop (GRPO's training responses
# truncated at the 32-token cap and their mean length, step 1 → 15; its held-out greedy accuracy beside
# the sampled pass@1 the claim used); entropy or length (KL-Cov − GRPO on training entropy retention, what
# the claim measured, with the share of KL-Cov's responses truncated over its last three steps, and the
# same retention of the held-out sampled entropy); multiplicity (each claim's one-sided p and its Holm p
# over the six, computed after the fact: v1 registered no family, so it changes no published verdict).
V1_SEEDS = range(5)


def _t_text(values: list[float]) -> str:
    from entflow.analysis.stats import t_interval

    mean, half, _ = t_interval(values)
    return interval_text({"mean": mean, "half": half})


def _at(recs: list[dict], key: str, step: int) -> float:
    from entflow.analysis.runs import series

    steps, vals = series(recs, key)
    return float(vals[list(steps).index(step)])


def _first_last(recs: list[dict], key: str) -> tuple[float, float]:
    from entflow.analysis.runs import series

    _, vals = series(recs, key)
    return float(vals[0]), float(vals[-1])


def v1_stopping_rows(folder: Path) -> list[str]:
    """GRPO per seed: training truncation and length at step 1 and the last step; greedy and sampled
    held-out accuracy, first evaluation → last."""
    from entflow.analysis.runs import load_metrics

    rows = [
        "| seed | truncated, step 1 → 15 | mean length, step 1 → 15 | held-out greedy, step 0 → 15 "
        "| held-out pass@1 (T = 1), step 0 → 15 |",
        "|---:|---|---|---|---|",
    ]
    greedy, sampled = [], []
    for s in V1_SEEDS:
        recs = load_metrics(folder / f"grpo-s{s}")
        last = max(r["step"] for r in recs)
        t0, t1 = _at(recs, "response/truncated_frac", 1), _at(recs, "response/truncated_frac", last)
        l0, l1 = _at(recs, "response/len_mean", 1), _at(recs, "response/len_mean", last)
        g0, g1 = _first_last(recs, "val/acc_greedy")
        a0, a1 = _first_last(recs, "val/acc")
        greedy.append(g1 - g0)
        sampled.append(a1 - a0)
        rows.append(f"| {s} | {t0:.2f} → {t1:.2f} | {l0:.1f} → {l1:.1f} | {g0:.3f} → {g1:.3f} | {a0:.3f} → {a1:.3f} |")
    rows.append(f"| change, mean [95 % CI] | | | {_t_text(greedy)} | {_t_text(sampled)} |")
    return rows


def v1_entropy_rows(folder: Path) -> list[str]:
    """KL-Cov − GRPO per seed: training entropy retention (the claim's fact, from claims.json), KL-Cov's
    truncated share over its last three steps, and the same retention of the held-out sampled entropy
    (its evaluation at step 15 over step 0's)."""
    import numpy as np

    from entflow.analysis.runs import load_metrics, series

    claims = _load(folder / "claims.json")["claims"]
    claim = next(c for c in claims if c["id"] == "real-klcov-entropy")
    rows = [
        "| seed | retention, KL-Cov − GRPO (the claim) | KL-Cov truncated, last 3 steps | GRPO truncated, last 3 steps "
        "| held-out sampled entropy retention (step 15 / 0), KL-Cov − GRPO |",
        "|---:|---|---|---|---|",
    ]
    held = []
    for s, diff in zip(V1_SEEDS, claim["values"], strict=True):
        kl, grpo = load_metrics(folder / f"kl_cov-s{s}"), load_metrics(folder / f"grpo-s{s}")
        trunc = [float(np.mean(series(r, "response/truncated_frac")[1][-3:])) for r in (kl, grpo)]
        (k0, k1), (g0, g1) = _first_last(kl, "val/entropy"), _first_last(grpo, "val/entropy")
        h = k1 / k0 - g1 / g0
        held.append(h)
        rows.append(f"| {s} | {num(diff)} | {trunc[0]:.2f} | {trunc[1]:.2f} | {num(h)} |")
    rows.append(f"| mean [95 % CI] | {_t_text(claim['values'])} | | | {_t_text(held)} |")
    return rows


def v1_holm_rows(folder: Path) -> list[str]:
    """Each v1 claim's one-sided p and Holm-adjusted p over the six, computed after the fact."""
    from entflow.evidence.claims import holm, holm_verdict, one_sided_p
    from entflow.evidence.reproduce import registry as load_registry

    by_id = {c.id: c for c in load_registry().claims}
    judged = [c for c in _load(folder / "claims.json")["claims"] if c["id"] in by_id]
    ps = [one_sided_p(c["values"], by_id[c["id"]].rule, by_id[c["id"]].bound) for c in judged]
    rows = [
        f"| claim | published verdict | one-sided p | Holm p ({len(judged)} claims) | verdict after Holm |",
        "|---|---|---:|---:|---|",
    ]
    for c, p, adj in zip(judged, ps, holm(ps), strict=True):
        rows.append(f"| `{c['id']}` | {c['verdict']} | {p:.4f} | {adj:.4f} | {holm_verdict(c['verdict'], adj)} |")
    return rows


def print_v1_review(rel: str, root: Path) -> str:
    """The figures behind "What v1 got wrong" (docs/real-models.md), from the v1 study's folder."""
    folder = root / rel
    parts = [
        source_line([f"{rel}/claims.json", f"{rel}/<run>-s<seed>/metrics.jsonl"], root, metas=[]),
        "",
        "**Learning to stop** (GRPO, training responses and held-out accuracy):",
        "",
        *v1_stopping_rows(folder),
        "",
        "**Entropy or length** (KL-Cov at ratio 0.05 against GRPO):",
        "",
        *v1_entropy_rows(folder),
        "",
        "**Multiplicity** (Holm over v1's six claims, computed after the fact):",
        "",
        *v1_holm_rows(folder),
    ]
    return "\n".join(parts) + "\n"


# --- docs/regime.md: the exploration-bound regime's warm starts, runs and entropy flows -------------
#
# From the committed result files in docs/results/regime/ (what experiments/regime/*.py wrote). A
# LABEL=FILE argument names a row by the setting the file was measured at, as the page describes it.
REGIME_SPLITS = ("val", "hard")
REGIME_PASSK = (1, 4, 16, 64, 256)
LONG_ROWS = (
    ("val acc (avg@8)", "val/acc", 3),
    ("val pass@8", "val/pass@k", 3),
    ("hard acc (avg@8)", "hard/acc", 3),
    ("hard pass@8", "hard/pass@k", 3),
    ("entropy (nats)", "val/entropy", 2),
)
COMPARISON_COLUMNS = (
    ("hard pass@256", "hard_pass@256_n256"),
    ("hard pass@64", "hard_pass@64_n256"),
    ("hard pass@1", "hard_pass@1_n256"),
    ("hard acc, best window", "hard_acc_best_window"),
    ("val acc, best window", "val_acc_best_window"),
    ("entropy at the last step", "entropy_final"),
)
# (column, the per-setting key, digits): flow_balance.py's output
FLOW_COLUMNS = (
    ("acc", "acc", 3),
    ("H", "entropy", 2),
    ("S⁺", "S_pos", 1),
    ("S⁻", "S_neg", 1),
    ("λ\\*", "lambda_star", 3),
    ("λ\\* rewards shuffled in group", "lambda_star_shuffled", 3),
    ("λ\\* sequence-normalised", "lambda_star_seqnorm", 3),
)


def labelled(pairs: list[str]) -> list[tuple[str, str]]:
    """``LABEL=FILE`` arguments as (label, file); a pair without a label is a UsageError."""
    out = []
    for pair in pairs:
        label, sep, path = pair.rpartition("=")
        if not sep or not label:
            raise UsageError(f"expected LABEL=FILE, got {pair!r}")
        out.append((label, path))
    return out


def print_regime_warmstarts(pairs: list[str], root: Path) -> str:
    """Candidate warm starts: pass@1 and pass@n (n samples per problem) on the validation and hard splits."""
    rows = []
    named = labelled(pairs)
    for label, rel in named:
        d = _load(root / rel)
        n = d["val"]["n"]
        cells = " | ".join(plain(d[s][f"pass@{k}"]) for s in REGIME_SPLITS for k in (1, n))
        rows.append(f"| {label} | {n} | {cells} |")
    head = "| warm start | n | val pass@1 | val pass@n | hard pass@1 | hard pass@n |"
    lines = [source_line([r for _, r in named], root), "", head, "|---|---:|---:|---:|---:|---:|", *rows]
    return "\n".join(lines) + "\n"


def print_regime_passk(rel: str, root: Path) -> str:
    """One policy's pass@k (``REGIME_PASSK``) on each split, the gap pass@64 − pass@1 and the share of
    correct samples that use the rare route."""
    d = _load(root / rel)
    rows = [
        source_line([rel], root),
        "",
        "| split | "
        + " | ".join(f"pass@{k}" for k in REGIME_PASSK)
        + " | pass@64 − pass@1 | share of correct samples using the route |",
        "|---|" + "---:|" * (len(REGIME_PASSK) + 2),
    ]
    for split in REGIME_SPLITS:
        s = d[split]
        cells = " | ".join(plain(s[f"pass@{k}"]) for k in REGIME_PASSK)
        rows.append(
            f"| {split} (n = {s['n']}) | {cells} | {plain(s['pass@64'] - s['pass@1'])} | "
            f"{plain(s['route_share_of_correct'], 2)} |"
        )
    return "\n".join(rows) + "\n"


def print_regime_long(rel: str, root: Path) -> str:
    """comparison.json's long GRPO run: each periodic evaluation, then the plateau test's result."""
    long = _load(root / rel)["long_grpo"]
    evals = long["evals"]
    rows = [
        source_line([rel], root),
        "",
        "| step | " + " | ".join(str(e["step"]) for e in evals) + " |",
        "|---|" + "---:|" * len(evals),
    ]
    for label, key, digits in LONG_ROWS:
        rows.append(f"| {label} | " + " | ".join(plain(e[key], digits) for e in evals) + " |")
    slopes = ", ".join(f"{num(m)} ± {plain(s)}" for m, s in long["window_slopes_per_100_steps"])
    rows += [
        "",
        f"Plateau at step {long['plateau_step']} (windows of {long['window_evals']} evaluations; slopes of "
        f"validation accuracy per 100 steps, ± standard error: {slopes}); mean validation accuracy after it "
        f"{plain(long['mean_acc_after'])}; entropy at the plateau {plain(long['entropy_at_plateau'], 2)} nats, at the "
        f"last step {plain(long['entropy_final'], 2)}.",
    ]
    return "\n".join(rows) + "\n"


def print_regime_comparison(rel: str, root: Path) -> str:
    """comparison.json's methods: each column's mean over the method's seeds (per-seed values), and Δ, the
    mean of the per-seed differences to ``grpo`` on the same seed."""
    methods = _load(root / rel)["methods"]
    order = ["grpo", *sorted(m for m in methods if m != "grpo")]
    rows = [
        source_line([rel], root),
        "",
        "| method | seeds | " + " | ".join(c for c, _ in COMPARISON_COLUMNS) + " |",
        "|---|---|" + "---|" * len(COMPARISON_COLUMNS),
    ]
    for name in order:
        m = methods[name]
        cells = []
        for _, key in COMPARISON_COLUMNS:
            v = m[key]
            text = plain(v["mean"])
            if len(v["per_seed"]) > 1:
                text += " (" + ", ".join(plain(x) for x in v["per_seed"]) + ")"
            if "minus_grpo_mean" in v:
                text += f"; Δ {num(v['minus_grpo_mean'])}"
            cells.append(text)
        rows.append(f"| {name} | {','.join(str(s) for s in m['seeds'])} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def print_regime_flow(pairs: list[str], root: Path) -> str:
    """flow_balance.py's settings: accuracy, entropy, the flows S⁺ and S⁻ and their ratio, λ* (the mean of
    the per-batch values) with its two controls, and the share of S⁻ from negative-advantage tokens with
    p < 0.2."""
    named = labelled(pairs)
    head = [c for c, _, _ in FLOW_COLUMNS]
    rows = [
        source_line([r for _, r in named], root),
        "",
        "| policy | P × G, τ | "
        + " | ".join(head[:4])
        + " | S⁻/S⁺ | "
        + " | ".join(head[4:])
        + " | share of S⁻ from A<0, p<0.2 |",
        "|---|---|" + "---:|" * (len(FLOW_COLUMNS) + 2),
    ]
    for label, rel in named:
        for i, s in enumerate(_load(root / rel)["settings"]):
            cells = [plain(s[key], digits) for _, key, digits in FLOW_COLUMNS]
            ratio = plain(s["S_neg"] / s["S_pos"], 1)
            low_p = plain(float(s["cells"]["A<0,p<0.2"]["S_neg_share"]), 2)
            rows.append(
                f"| {label if i == 0 else ''} | {s['P']}×{s['G']}, {s['temperature']:.1f} | {' | '.join(cells[:4])} | "
                f"{ratio} | {' | '.join(cells[4:])} | {low_p} |"
            )
    return "\n".join(rows) + "\n"


# --- docs/integrations.md: TRL's own GRPO tests run against the adapter -----------------------------
SUITE_KINDS = ("passed", "failed", "skipped")


def suite_counts(side: dict[str, Any]) -> dict[str, int]:
    """passed / failed (pytest's failures and errors together) / skipped of one side."""
    c = side["counts"]
    return {
        "passed": c.get("passed", 0),
        "failed": c.get("failed", 0) + c.get("errors", 0),
        "skipped": c.get("skipped", 0),
    }


def suite_differing(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(test, outcome with trl.GRPOTrainer, outcome with EntflowGRPOTrainer) for each test whose outcome
    differs; a test absent from a side's ``-rA`` report counts as SKIPPED there."""
    a, b = data["sides"]["A"]["outcomes"], data["sides"]["B"]["outcomes"]
    return [(t, a.get(t, "SKIPPED"), b.get(t, "SKIPPED")) for t in sorted(a.keys() | b.keys()) if a.get(t) != b.get(t)]


def print_trl_suite(rel: str, root: Path) -> str:
    """The record ``tests/support/trl_suite.py`` writes: caption, the counts of both sides, and the tests
    whose outcome differs (or that none does)."""
    data = _load(root / rel)
    v = data["versions"]
    out = [
        f"Measured {data['date']} on {data['machine']}, trl {v['trl']}, transformers {v['transformers']}, "
        f"entflow at {data['entflow_commit']}; TRL's tests at its commit {data['trl_commit'][:10]}. "
        f"Command: `{data['command']}`. Data: `{rel}`." + (f" ({data['note']})" if data.get("note") else ""),
        "",
        "| | passed | failed | skipped | minutes |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in ("A", "B"):
        side = data["sides"][key]
        c = suite_counts(side)
        minutes = "–" if side.get("seconds") is None else f"{side['seconds'] / 60:.1f}"
        out.append(f"| {key}, `{side['trainer']}` | " + " | ".join(str(c[k]) for k in SUITE_KINDS) + f" | {minutes} |")
    out.append("")
    diff = suite_differing(data)
    lost = [t for t, a, _ in diff if a == "PASSED"]
    if not diff:
        out.append("Every test has the same outcome on both sides.")
    else:
        out.append(f"{len(diff)} tests differ, {len(lost)} of them passing only with `trl.GRPOTrainer`:")
        out += [f"- `{t}`: {a} with trl.GRPOTrainer, {b} with EntflowGRPOTrainer" for t, a, b in diff]
    return "\n".join(out) + "\n"


def print_verify(root: Path) -> str:
    """What ``entflow reproduce --verify`` recomputes from the committed results, by source: how many
    verdicts from per-run facts, how many from stored per-seed values (arithmetic only)."""
    from entflow.evidence.verify import source_counts, verify

    result = verify(root / "docs" / "results")
    state = "every one agrees" if result.ok else f"{len(result.differing)} DIFFER"
    return f"{len(result.checks)} published verdicts recomputed ({state}): {source_counts(result)}.\n"


# --print NAME: (its arguments as the usage line names them, how many it takes: a number, or "+" for one
# or more, the printer). Every docs block's command is one of these.
PRINTERS: dict[str, tuple[str, int | str, Any]] = {
    "claims": ("FILE", 1, lambda a, root: print_claims(a[0], root)),
    "other": ("", 0, lambda a, root: print_other(root)),
    "pending": ("", 0, lambda a, root: print_pending(root)),
    "registered": ("", 0, lambda a, root: print_registered(root)),
    "audit": ("FILE", 1, lambda a, root: print_audit(a[0], root)),
    "coverage": ("DIR", 1, lambda a, root: print_coverage(a[0], root)),
    "report": ("DIR...", "+", lambda a, root: print_report(a, root)),
    "rerun": ("OLD NEW", 2, lambda a, root: print_rerun(a[0], a[1], root)),
    "headline": ("", 0, lambda a, root: print_headline(root)),
    "family": ("NAME", 1, lambda a, root: print_family(a[0], root)),
    "bench": ("KEY", 1, lambda a, root: print_bench(a[0], root)),
    "verify": ("", 0, lambda a, root: print_verify(root)),
    "plan": ("PART", 1, lambda a, root: print_plan(a[0], root)),
    "series": ("PART", 1, lambda a, root: print_series(a[0], root)),
    "design-draws": ("", 0, lambda a, root: print_design_draws(root)),
    "klcov-selected": ("DIR", 1, lambda a, root: print_klcov_selected(a[0], root)),
    "eval": ("FILE", 1, lambda a, root: print_eval(a[0], root)),
    "design-runs": ("DIR...", "+", lambda a, root: print_design_runs(a, root)),
    "cost": ("DIR", 1, lambda a, root: print_cost(a[0], root)),
    "trl-crosscheck": ("FILE...", "+", lambda a, root: print_trl_crosscheck(a, root)),
    "v1-review": ("DIR", 1, lambda a, root: print_v1_review(a[0], root)),
    "regime-warmstarts": ("LABEL=FILE...", "+", lambda a, root: print_regime_warmstarts(a, root)),
    "regime-passk": ("FILE", 1, lambda a, root: print_regime_passk(a[0], root)),
    "regime-long": ("FILE", 1, lambda a, root: print_regime_long(a[0], root)),
    "regime-comparison": ("FILE", 1, lambda a, root: print_regime_comparison(a[0], root)),
    "regime-flow": ("LABEL=FILE...", "+", lambda a, root: print_regime_flow(a, root)),
    "trl-suite": ("FILE", 1, lambda a, root: print_trl_suite(a[0], root)),
}


def print_table(what_and_args: list[str], root: Path) -> str:
    """The text ``--print WHAT ARGS...`` prints for the tree at ``root``."""
    what, rest = what_and_args[0], what_and_args[1:]
    _, nargs, printer = PRINTERS.get(what, ("", -1, None))
    if printer is None or (nargs == "+" and not rest) or (nargs != "+" and len(rest) != nargs):
        known = ", ".join(f"{name} {spec[0]}".strip() for name, spec in PRINTERS.items())
        raise UsageError(f"--print takes one of: {known}; got {what_and_args}")
    return printer(rest, root)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is not current")
    mode.add_argument("--write", action="store_true", help="rewrite every printed block (the default)")
    mode.add_argument("--print", nargs="+", metavar="WHAT", help="print one table (see above) and exit")
    args = ap.parse_args()
    if args.print:
        try:
            text = print_table(args.print, ROOT)
        except (UsageError, FileNotFoundError) as e:  # a wrong name, or a file that is not there: named
            ap.error(str(e))
        sys.stdout.write(text)
        return
    stale = stale_blocks(ROOT / "docs", write=not args.check)
    for s in stale:
        print(("stale: " if args.check else "rewrote: ") + s)
    if args.check and stale:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
