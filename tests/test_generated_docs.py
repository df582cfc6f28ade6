"""The docs' printed tables (``Printed by `…`:`` blocks, benchmarks/docs_tables.py) equal what their commands print
from the committed result files; no table row of the results pages is typed by hand; a number typed over by hand is
caught; and a claims JSON dropped into docs/results/ is picked up without editing the page."""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from entflow.evidence.claims import holm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import docs_tables  # noqa: E402  (benchmarks/docs_tables.py)

PAGES = ("reproduction.md", "benchmarks.md")
REGISTRY = ROOT / "src" / "entflow" / "evidence" / "claims.yaml"
FULL = "docs/results/full_5seed_claims.json"
FULL_RERUN = "docs/results/full_5seed_rerun_claims.json"  # the full run trained again, with per-run records


def _copy_tree(tmp_path: Path, pages: tuple[str, ...]) -> Path:
    """A repository root in ``tmp_path`` with ``pages``, the result files, the benchmarks, the evidence
    folder (the registry and the sequential plans) and the real settings' presets the printers read."""
    (tmp_path / "docs").mkdir()
    for page in pages:
        shutil.copy(ROOT / "docs" / page, tmp_path / "docs" / page)
    shutil.copytree(ROOT / "docs" / "results", tmp_path / "docs" / "results")
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks")
    evidence = REGISTRY.parent.relative_to(ROOT)
    shutil.copytree(ROOT / evidence, tmp_path / evidence, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    presets = Path("src/entflow/hf/configs")  # the real settings' presets
    shutil.copytree(ROOT / presets, tmp_path / presets)
    return tmp_path


def _signed(v: float) -> str:
    return f"{v:+.3f}".replace("-", "\u2212")


def test_every_generated_block_is_current():
    for page in PAGES:
        assert (ROOT / "docs" / page).read_text().count("Printed by `python benchmarks/") >= 3, page
    assert docs_tables.stale_blocks(ROOT / "docs") == []


def test_no_table_row_of_the_results_pages_is_typed_by_hand():
    for page in PAGES:
        path = ROOT / "docs" / page
        rows = [line for line in path.read_text().splitlines() if line.startswith("|")]
        assert len(rows) > 20, page  # the pages do hold tables, all of them printed
        assert docs_tables.table_lines_outside_blocks(path) == [], page


def test_a_hand_typed_table_outside_a_block_is_found(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("intro\n\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    assert docs_tables.table_lines_outside_blocks(page) == [3, 4, 5]


def test_a_hand_edited_benchmark_number_is_caught(tmp_path):
    root = _copy_tree(tmp_path, ("benchmarks.md",))
    page = (root / "docs" / "benchmarks.md").read_text()
    block = page.index("Printed by `python benchmarks/gpu_stats.py --table")
    row = page.index("| trl |", block)
    ms_start = row + len("| trl | ")
    (root / "docs" / "benchmarks.md").write_text(page[:ms_start] + "1" + page[ms_start:])  # 3.26 -> 13.26, say
    stale = docs_tables.stale_blocks(root / "docs", root=root)
    assert len(stale) == 1 and "gpu_stats.py --table" in stale[0]


def test_a_hand_edited_verdict_number_is_caught(tmp_path):
    root = _copy_tree(tmp_path, ("reproduction.md",))
    assert docs_tables.current_sources(ROOT)["003-collapse"] == FULL_RERUN
    collapse = next(c for c in json.loads((ROOT / FULL_RERUN).read_text())["claims"] if c["id"] == "003-collapse")
    page = (root / "docs" / "reproduction.md").read_text()
    row_start = page.index("| `003-collapse`:", page.index(f"--print claims {FULL_RERUN}`"))
    row = page[row_start : page.index("\n", row_start)]
    shown = f"{_signed(collapse['mean'])} ["
    assert shown in row
    edited = row.replace(shown, f"{_signed(collapse['mean'] + 0.01)} [")
    (root / "docs" / "reproduction.md").write_text(page.replace(row, edited))
    stale = docs_tables.stale_blocks(root / "docs", root=root)
    assert stale == [f"reproduction.md: python benchmarks/docs_tables.py --print claims {FULL_RERUN}"]


# blocks that show a claim outside its verdict table: the fresh series' decisions, its plan, and the
# lab's question before the series (each claim's own verdict row is in a `--print claims` table)
OTHER_VIEWS = ("--print series ", "--print plan ", "--print headline")


def _verdict_tables(page: str) -> str:
    """The page without the blocks of :data:`OTHER_VIEWS`."""
    for view in OTHER_VIEWS:
        while (i := page.find(f"Printed by `python benchmarks/docs_tables.py {view}")) >= 0:
            j = page.index(docs_tables.END, i) + len(docs_tables.END)
            page = page[:i] + page[j:]
    return page


def _rows_by_claim(page: str) -> dict[str, list[str]]:
    rows: dict[str, list[str]] = {}
    for line in _verdict_tables(page).splitlines():
        m = re.match(r"\| `([^`]+)`:", line)
        if m:
            rows.setdefault(m[1], []).append(line)
    return rows


def test_every_registered_claim_is_on_the_page_once_with_its_json_numbers():
    registered = [c["id"] for c in yaml.safe_load(REGISTRY.read_text())["claims"]]
    rows = _rows_by_claim((ROOT / "docs" / "reproduction.md").read_text())
    assert sorted(rows) == sorted(registered)
    assert all(len(r) == 1 for r in rows.values()), {k: len(v) for k, v in rows.items() if len(v) > 1}
    current = docs_tables.current_sources(ROOT)
    for cid in registered:
        row = rows[cid][0]
        if cid not in current:
            assert "raw data pending" in row and "[" not in row, row
            continue
        claim = next(c for c in json.loads((ROOT / current[cid]).read_text())["claims"] if c["id"] == cid)
        assert f"**{claim['verdict']}**" in row
        if math.isfinite(claim["mean"]):
            assert f"{_signed(claim['mean'])} [{_signed(claim['ci_low'])}, {_signed(claim['ci_high'])}]" in row
        assert ", ".join(_signed(v) for v in claim["values"]) in row


def test_claims_without_committed_data_show_no_number():
    pending = docs_tables.print_pending(ROOT)
    rows = [line for line in pending.splitlines() if line.startswith("| `")]
    # the seven verdicts once published as prose only: each is pending until a rerun's claims JSON is committed
    prose_only = set(docs_tables.prose_only_figures(ROOT))
    assert prose_only == {"passk-training", "passk-pkpo", "passk-simko", "passk-erc", "passk-aer"} | {
        "loss-geo-mean-hard",
        "loss-dppo-tv-hard",
    }
    assert {row.split("`")[1] for row in rows} >= prose_only - set(docs_tables.current_sources(ROOT))
    for row in rows:
        status = row.rstrip(" |").rsplit("|", 1)[1]
        assert "raw data pending" in status and not re.search(r"[+\u2212]\d|\d\.\d", status), row


def test_a_new_claims_json_is_picked_up_and_supersedes_older_values(tmp_path):
    root = _copy_tree(tmp_path, ("reproduction.md",))
    for rel in docs_tables.claims_files(root):  # start from a tree where passk-training has no verdict
        if any(c["id"] == "passk-training" for c in json.loads((root / rel).read_text())["claims"]):
            (root / rel).unlink()
    for source in (root / "docs/results/facts").glob("*/source.json"):  # and no facts set of a removed file
        if not (source.parent / json.loads(source.read_text())["claims_json"]).is_file():
            shutil.rmtree(source.parent)
    docs_tables.stale_blocks(root / "docs", root=root, write=True)
    assert "passk-training" in docs_tables.print_pending(root)
    full = json.loads((ROOT / "docs/results/full_5seed_claims.json").read_text())
    collapse = dict(next(c for c in full["claims"] if c["id"] == "003-collapse"))
    collapse.update(values=[0.25, 0.27, 0.29, 0.31, 0.33], mean=0.29, ci_low=0.2507, ci_high=0.3293)
    passk = {
        **collapse,
        "id": "passk-training",
        "claim": "Pass@k Training beats GRPO",
        "values": [0.1, 0.2, 0.15, 0.05, 0.12],
        "mean": 0.124,
        "ci_low": 0.05,
        "ci_high": 0.198,
        "verdict": "reproduced",
        "preregistered_seeds": [40, 41, 42, 43, 44],
    }
    passk["verdict_holm"] = "inconclusive"
    new = {
        "date": "2099-01-01",
        "machine": "a test machine",
        "command": "entflow reproduce --test",
        "seeds": [40, 41, 42, 43, 44],
        "claims": [collapse, passk],
    }
    (root / "docs/results/regime/rerun_claims.json").write_text(json.dumps(new))

    assert "passk-training" not in docs_tables.print_pending(root)
    other = docs_tables.print_other(root)
    assert "#### `docs/results/regime/rerun_claims.json`" in other
    assert "Measured 2099-01-01 on a test machine. Command: `entflow reproduce --test`." in other
    assert "| `passk-training`: Pass@k Training beats GRPO |" in other and "+0.124 [+0.050, +0.198]" in other
    assert "**reproduced**; Holm-corrected in its family: inconclusive |" in other
    # its prose-only figures of 2026-11-26 (history.json) are printed beside it, verdicts compared
    assert "Before this rerun, `passk-training` was published as prose only (2026-11-26," in other
    assert "+0.139 [+0.021, +0.257]; reproduced. This rerun: the same verdict." in other
    assert "+0.290 [+0.251, +0.329]" in other  # the newer 003-collapse is shown with the new file ...
    old = docs_tables.print_claims("docs/results/full_5seed_claims.json", root)
    assert "| `003-collapse`:" not in old  # ... and the full run's table says where it went
    assert "superseded by the newer `docs/results/regime/rerun_claims.json`, shown there): `003-collapse`" in old
    stale = docs_tables.stale_blocks(root / "docs", root=root, write=True)
    assert any("--print other" in s for s in stale) and any("--print pending" in s for s in stale)
    assert docs_tables.stale_blocks(root / "docs", root=root) == []


def test_a_claims_json_with_its_own_block_is_not_printed_again_under_other(tmp_path):
    root = _copy_tree(tmp_path, ("reproduction.md",))
    assert FULL_RERUN not in docs_tables.provenance(root)["claims"]  # it carries its own date, machine, command
    assert f"#### `{FULL_RERUN}`" not in docs_tables.print_other(root)
    page = root / "docs" / "reproduction.md"
    block = f"Printed by `python benchmarks/docs_tables.py --print claims {FULL_RERUN}`:"
    page.write_text(page.read_text().replace(block, "(the block removed)"))
    assert f"#### `{FULL_RERUN}`" in docs_tables.print_other(root)


def test_a_copy_of_a_claims_json_stays_with_the_recorded_measurement(tmp_path):
    root = _copy_tree(tmp_path, ())
    shutil.copy(ROOT / "docs/results/regime/sweep_followup_claims.json", root / "docs/results/copy_claims.json")
    assert docs_tables.file_meta("docs/results/copy_claims.json", root)["machine"] == "not recorded"
    other = docs_tables.print_other(root)
    assert "Measured not committed yet on not recorded." in other
    # the same values as a recorded measurement: a copy, shown with the original and its provenance
    assert docs_tables.current_sources(root)["sweep-clip-cov"] == "docs/results/regime/sweep_followup_claims.json"
    assert "| `sweep-clip-cov`:" not in other
    assert "(the same values, shown with `docs/results/regime/sweep_followup_claims.json`)" in other


def _ignored(paths: list[str], root: Path) -> list[str]:
    """The ones of ``paths`` (relative to ``root``) that git's ignore rules would leave out of a commit."""

    res = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(paths),
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert res.returncode in (0, 1), res.stderr  # 0: some ignored, 1: none
    return res.stdout.split()


def test_no_result_file_the_docs_read_is_git_ignored():
    # a design run's folder named runs/ once matched the ignore rule for scratch runs: its tables printed
    # here and failed on a clean clone
    files = [str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*") if p.is_file()]
    assert len(files) > 50
    assert _ignored(files, ROOT) == []
    assert _ignored(["runs/x/metrics.jsonl", "docs/results/a/runs/r-s0/metrics.jsonl"], ROOT) == [
        "runs/x/metrics.jsonl"
    ]


def test_a_superseded_claim_is_marked_in_its_row_and_its_reason_printed_once(tmp_path):
    rows = _rows_by_claim(docs_tables.print_claims("docs/results/real-claims/claims.json", ROOT))
    assert len(rows) == 6 and all("*superseded*" in r[0] for r in rows.values())
    root = _copy_tree(tmp_path, ())
    reg = yaml.safe_load((root / REGISTRY.relative_to(ROOT)).read_text())
    for c in reg["claims"]:
        if c["id"] == "real-collapse":
            del c["superseded"]  # the registry alone decides: without the key the row is unmarked
    (root / REGISTRY.relative_to(ROOT)).write_text(yaml.safe_dump(reg, allow_unicode=True))
    text = docs_tables.print_claims("docs/results/real-claims/claims.json", root)
    rows = _rows_by_claim(text)
    assert "*superseded*" not in rows["real-collapse"][0] and "*superseded*" in rows["real-grpo-learns"][0]
    assert text.count("the registry's `superseded`") == 1 and "`real-collapse`;" not in text


def test_the_readmes_results_are_printed_from_the_current_verdicts():
    readme = (ROOT / "README.md").read_text()
    results = readme[readme.index("## Results\n") : readme.index("\n## ", readme.index("## Results\n") + 1)]
    page = ROOT / "README.md"
    lines = readme.splitlines()
    first = readme[: readme.index("## Results\n")].count("\n") + 1
    last = first + results.count("\n")
    assert [n for n in docs_tables.table_lines_outside_blocks(page) if first <= n <= last] == []
    for part in ("lab", "real"):
        assert f"Printed by `python benchmarks/docs_tables.py --print series {part}`:" in results
        judged = json.loads((ROOT / f"docs/results/sequential/{part}_verdicts.json").read_text())["claims"]
        planned = [cid for cid, r in judged.items() if r["verdict"] != "not decidable at this budget"]
        assert planned
        for cid in planned:
            row = next(line for line in lines[first - 1 : last] if line.startswith(f"| `{cid}`"))
            assert f"**{judged[cid]['verdict']}**" in row and f"| {judged[cid]['n']} (" in row, row
        for cid in set(judged) - set(planned):  # named as not decidable, below the table
            assert f"`{cid}`" in results


def test_the_headline_follows_a_newer_verdict_and_the_recorded_rerun(tmp_path):
    root = _copy_tree(tmp_path, ())
    history = json.loads((root / "docs/results/history.json").read_text())
    rerun = next(e for e in history["entries"] if e.get("reruns"))
    rerun["reruns"]["sweep-clip-cov"].update(mean=0.2, ci_low=0.1, ci_high=0.3, positive=7)
    (root / "docs/results/history.json").write_text(json.dumps(history))
    old = json.loads((root / "docs/results/regime/sweep_followup_claims.json").read_text())
    newer = dict(next(c for c in old["claims"] if c["id"] == "sweep-clip-cov"))
    newer.update(values=[-0.1, 0.0, 0.1, -0.05, 0.05], mean=0.0, ci_low=-0.098, ci_high=0.098, verdict="inconclusive")
    claims = {
        "date": "2099-01-01",
        "machine": "a test machine",
        "command": "entflow reproduce --test",
        "claims": [newer],
    }
    (root / "docs/results/regime/sweep_rerun_claims.json").write_text(json.dumps(claims))
    row = next(r for r in docs_tables.print_headline(root).splitlines() if r.startswith("| `sweep-clip-cov`"))
    assert "| +0.000 [−0.098, +0.098] | **inconclusive** |" in row
    assert "+0.200 [+0.100, +0.300] on 8 seeds, positive on 7 of 8: reproduced" in row
    assert "`docs/results/regime/sweep_rerun_claims.json`" in docs_tables.print_headline(root)


# A table row that holds decimals (0.123, −1.5e…) outside every printed block looks like a typed measurement.
_DECIMAL = re.compile(r"(?<![\w.])[−+-]?\d+\.\d{2,}(?![\w.])")
# Tables with such numbers that measure nothing: formulas with their default values, arXiv ids.
REFERENCE_TABLES = ("| name | formula |", "| name | what it does |", "| kind | hook(s) |", "| | paper | arXiv |")
# Measured tables still typed by hand, each waiting for committed data (remove the entry once it is printed):
TYPED_MEASUREMENTS: set[tuple[str, str]] = set()  # (page, header) of a table still typed by hand: none


def typed_numeric_tables(page: Path) -> list[str]:
    """The header line of each table of ``page`` outside the printed blocks with 3 or more decimals."""
    lines = page.read_text().split("\n")
    tables: list[list[int]] = []  # runs of consecutive typed table lines (1-based)
    for n in docs_tables.table_lines_outside_blocks(page):
        if tables and n == tables[-1][-1] + 1:
            tables[-1].append(n)
        else:
            tables.append([n])
    return [lines[t[0] - 1] for t in tables if sum(len(_DECIMAL.findall(lines[n - 1])) for n in t) >= 3]


def test_no_measured_table_is_typed_by_hand_outside_the_known_ones():
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
    typed = {
        (str(p.relative_to(ROOT)), header)
        for p in pages
        for header in typed_numeric_tables(p)
        if not header.startswith(REFERENCE_TABLES)
    }
    known = {(page, h) for page, h in typed if any(h.startswith(k) for pg, k in TYPED_MEASUREMENTS if pg == page)}
    assert typed - known == set(), "print these tables from committed data (benchmarks/docs_tables.py)"
    assert len(known) == len(TYPED_MEASUREMENTS)  # a table that is printed now: drop it from the list


def test_a_typed_measurement_table_is_found(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("intro\n\n| run | value |\n|---|---|\n| a | 0.125 |\n| b | 0.250 |\n| c | 0.375 |\n\ntext\n")
    assert typed_numeric_tables(page) == ["| run | value |"]
    page.write_text("| name | formula |\n|---|---|\n| a | 0.125 |\n")  # too few decimals: not flagged
    assert typed_numeric_tables(page) == []


def test_print_report_is_the_reports_own_summary(tmp_path):
    from entflow.analysis.report import summarize_run, summary_markdown
    from support.run_dirs import make_run

    runs = [make_run(tmp_path, "grpo-s3", "grpo"), make_run(tmp_path, "kl_cov-s3", "kl_cov", offset=0.5)]
    printed = docs_tables.print_report([r.name for r in runs], tmp_path)
    summary = summary_markdown([summarize_run(r) for r in runs]).rstrip("\n") + "\n"
    assert summary.startswith("## ") and "\n## " in summary  # the report's sections ...
    assert printed == summary.replace("\n## ", "\n#### ").replace("## ", "#### ", 1)  # ... one level under ###
    assert "\n## " not in printed and not printed.startswith("## ")
    assert "kl_cov" in printed and "grpo" in printed
    with pytest.raises(FileNotFoundError, match="nope"):
        docs_tables.print_report(["nope"], tmp_path)


def test_print_rerun_counts_the_changed_verdicts(tmp_path):
    def claim(cid, mean, verdict):
        return {"id": cid, "mean": mean, "ci_low": mean - 0.1, "ci_high": mean + 0.1, "verdict": verdict}

    (tmp_path / "docs/results").mkdir(parents=True)
    meta = {"machine": "m", "command": "c"}
    old = {**meta, "date": "2099-01-01", "claims": [claim("a", 0.2, "reproduced"), claim("b", 0.0, "inconclusive")]}
    new = {**meta, "date": "2099-02-01", "claims": [claim("a", 0.15, "reproduced"), claim("b", 0.3, "reproduced")]}
    new["claims"].append({"id": "c", "verdict": "not run"})
    (tmp_path / "docs/results/old_claims.json").write_text(json.dumps(old))
    (tmp_path / "docs/results/new_claims.json").write_text(json.dumps(new))
    out = docs_tables.print_rerun("docs/results/old_claims.json", "docs/results/new_claims.json", tmp_path)
    assert "| `a` | +0.200 [+0.100, +0.300] | reproduced | +0.150 [+0.050, +0.250] | **reproduced** |" in out
    assert (
        "| `b` | +0.000 [−0.100, +0.100] | inconclusive | +0.300 [+0.200, +0.400] | **reproduced** (changed) |" in out
    )
    assert "| `c` |" not in out and out.rstrip().endswith("2 claims judged by both; 1 of their verdicts changed: b.")


def test_print_rerun_agrees_with_the_history_of_the_5_seed_run():
    # history.json records, in words, which verdicts changed from 0.1.0's 3-seed run to the 5-seed run
    out = docs_tables.print_rerun("docs/results/reproduce-claims.json", FULL, ROOT)
    history = json.loads((ROOT / "docs/results/history.json").read_text())
    note = next(e["superseded_by"] for e in history["entries"] if e.get("data") == "docs/results/reproduce-claims.json")
    changed = out.rstrip().rsplit(": ", 1)[1].rstrip(".").split(", ")
    assert "three verdicts changed" in note and len(changed) == 3
    assert all(cid in note for cid in changed), (changed, note)


def test_print_rerun_agrees_with_the_history_of_the_full_run_rerun():
    # history.json names each verdict that changed from the first full run to its rerun, and how
    out = docs_tables.print_rerun(FULL, FULL_RERUN, ROOT)
    history = json.loads((ROOT / "docs/results/history.json").read_text())
    note = next(e["superseded_by"] for e in history["entries"] if e.get("data") == FULL)
    changed = out.rstrip().rsplit(": ", 1)[1].rstrip(".").split(", ")
    assert "twelve verdicts changed" in note and len(changed) == 12
    rows = {line.split("`")[1]: line for line in out.splitlines() if line.startswith("| `")}
    for cid in changed:
        cells = [c.strip() for c in rows[cid].split("|")]
        before, after = cells[3], cells[5].split("**")[1]
        assert f"{cid} {before} → {after}" in note, (cid, note)


def _family_row(cid: str, values: list[float], verdict: str, p: float, holm_p: float, verdict_holm: str) -> dict:
    n = len(values)
    mean = sum(values) / n
    return {
        "id": cid,
        "claim": f"claim {cid}",
        "measured": "a difference",
        "values": values,
        "mean": mean,
        "ci_low": mean - 0.01,
        "ci_high": mean + 0.01,
        "verdict": verdict,
        "family": "test-fam",
        "family_size": 4,
        "p_value": p,
        "holm_p": holm_p,
        "verdict_holm": verdict_holm,
        "preregistered_seeds": list(range(n)),
    }


def test_the_family_table_quotes_only_what_reproduced_after_holm(tmp_path):
    root = _copy_tree(tmp_path, ())
    assert docs_tables.print_family("test-fam", root) == "No verdict of the claim family `test-fam` is committed yet.\n"
    # Holm by hand over 4 registered members (the 4th has no row, so it counts p = 1):
    # p = 0.001, 0.03, 0.4, 1 → sorted × (4, 3, 2, 1), running max → 0.004, 0.09, 0.8, 1.
    assert holm([0.001, 0.03, 0.4, math.nan]) == pytest.approx([0.004, 0.09, 0.8, 1.0], abs=1e-12)
    rows = [
        _family_row("fam-a", [0.5, 0.6, 0.7], "reproduced", 0.001, 0.004, "reproduced"),
        _family_row("fam-b", [0.25, 0.35, 0.45], "reproduced", 0.03, 0.09, "inconclusive"),
        _family_row("fam-c", [-0.125, 0.0, 0.125], "inconclusive", 0.4, 0.8, "inconclusive"),
    ]
    meta = {"date": "2099-01-01", "machine": "a test machine", "command": "entflow reproduce --test"}
    (root / "docs/results/fam_claims.json").write_text(json.dumps({**meta, "seeds": [0, 1, 2], "claims": rows}))
    table = docs_tables.print_family("test-fam", root)
    quoted = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(quoted) == 1 and quoted[0].startswith("| `fam-a`: claim fam-a |"), table
    assert "| 0–2 | +0.600 [+0.590, +0.610] | 0.0010 | 0.0040 | **reproduced** |" in quoted[0]
    assert "| Holm p (4 claims) |" in table
    assert "1 of the family's 4 registered claims reproduced after the Holm correction." in table
    assert "`fam-b` inconclusive (raw: reproduced); `fam-c` inconclusive (raw: inconclusive)" in table
    assert "+0.350" not in table and "0.0900" not in table  # no figure of a claim that did not reproduce
    assert "1 registered member has no committed verdict." in table
    assert "Data: `docs/results/fam_claims.json`." in table
    claims_table = docs_tables.print_claims("docs/results/fam_claims.json", root)
    assert "Claim families (Holm–Bonferroni, one-sided α = 0.025)" in claims_table
    assert "| test-fam (4) | fam-b | 0.0300 | 0.0900 | reproduced | **inconclusive** |" in claims_table


def test_a_block_rendered_in_process_is_what_its_command_prints():
    # docs_tables renders its own `--print` blocks without a new process: the page must still show
    # exactly what a user's `python benchmarks/docs_tables.py --print ...` prints
    command = f"python benchmarks/docs_tables.py --print claims {FULL_RERUN}"
    res = subprocess.run([sys.executable, *command.split()[1:]], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert docs_tables.render(command) == res.stdout.rstrip("\n") + "\n"
    assert "003-collapse" in res.stdout


# --- numbers typed into a results sentence ----------------------------------------------------------
#
# The rule. A results page's *prose* is its text outside the printed blocks, fenced code blocks (```),
# indented code (4 spaces after a blank line), inline code spans, headings and link targets (the
# ``(...)`` of ``[text](...)``); hand-typed table rows count as prose. In that prose a *typed result* is
#   - a decimal with two or more digits after the point (0.673, 0.05; 0.3 or 2.6 are not flagged),
#   - a number with an explicit sign (+0.028, −0.111, ±0.04, -0.5),
#   - a percentage (12 %, 0.2 %),
#   - a count "N of M" (3 of 5 seeds, 12 of the full run's 62 verdicts),
#   - a date (2026-11-28): the pages give current figures; dates belong in the printed captions and in
#     docs/results/history.json.
# A measured figure belongs in a printed block (benchmarks/docs_tables.py --print …) or is not on the page.
RESULTS_PAGES = ("README.md", "docs/reproduction.md", "docs/real-models.md", "docs/regime.md")
TYPED_RESULT = re.compile(
    r"(?<![\w.])\d+\.\d{2,}(?![\w.])"  # a decimal with ≥ 2 digits after the point
    r"|(?<![\w.)\]])[+−±∓]\d|(?<=[\s(\[])-\d*\.\d"  # a signed number
    r"|(?<![\w.])\d+(?:\.\d+)?\s?%"  # a percentage
    r"|\b\d+ of (?:[^\s\d]+ ){0,3}\d+\b"  # a count "N of M"
    r"|\b20\d\d-\d\d-\d\d\b"  # a date
)
# Settings and formula constants, not results: a number inside one of these phrases is allowed (a space
# in a pattern matches any whitespace, so a phrase may wrap). Each entry says why; an entry that no page
# uses any more fails the test (drop it).
ALLOWED_IN_PROSE: tuple[tuple[str, str], ...] = (
    (
        r"ratio 0\.05",
        "a method's ratio setting (Clip-Cov / KL-Cov at 0.05: the lab's selection, v1's and the TRL check's)",
    ),
    (r"ε_high 0\.28", "Clip-higher's paper setting (DAPO), a hyperparameter"),
    (r"(?:α|p) [=<] 0\.025", "the registered one-sided level of every claim and family (claims.yaml's header)"),
    (r"1 − 0\.05/m", "the Bonferroni level of an any_of claim's components, a formula"),
    (r"\b(?:95|80) %", "the interval's confidence level and the plan's power target: settings of the statistics"),
    (r"first 15 / 30 / 50 %|a 15 % fit", "the early-prediction claims' fitting windows (paper 003 App. B.3), settings"),
    (r"arXiv \d{4}\.\d{4,5}", "an arXiv identifier"),
    (r"Paper 000 reports 0\.04–0\.08 for Cov against 0\.61–0\.72 for Ω", "paper 000's published figures, quoted"),
)


def _wrapping(pattern: str) -> str:
    return pattern.replace(" ", r"\s+")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, prose) of each line of a page: blocks, code, headings and link targets blanked."""
    text = docs_tables.BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out, fence, prev_blank = [], False, True
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fence = not fence
            continue
        code = fence or (line.startswith("    ") and prev_blank and not stripped.startswith(("-", "*")))
        prev_blank = not stripped or (code and prev_blank)
        if code or stripped.startswith("#"):
            continue
        line = re.sub(r"`[^`]*`", " ", line)  # code spans
        line = re.sub(r"\]\([^)]*\)", "]", line)  # link targets
        out.append((n, line))
    return out


def typed_results(text: str, allowed: tuple[tuple[str, str], ...] = ALLOWED_IN_PROSE) -> list[tuple[int, str, str]]:
    """(line number, typed result, the line) of each typed result in ``text``'s prose (see the rule above).
    Allowed phrases are matched across line breaks (a sentence may wrap)."""
    lines = prose_lines(text)
    joined = "\n".join(line for _, line in lines)
    for pattern, _ in allowed:
        joined = re.sub(_wrapping(pattern), lambda m: re.sub(r"[^\n]", " ", m.group(0)), joined)
    found = []
    for (n, _), line in zip(lines, joined.split("\n"), strict=True):
        found += [(n, m.group(0), line.strip()) for m in TYPED_RESULT.finditer(line)]
    return found


def results_text(rel: str, root: Path = ROOT) -> str:
    """The part of a results page the rule reads: the README's "## Results" section, a docs page whole."""
    text = (root / rel).read_text()
    if rel != "README.md":
        return text
    start = text.index("## Results\n")
    end = text.find("\n## ", start + 1)
    return "\n" * text[:start].count("\n") + text[start : end if end > 0 else None]


def test_no_result_is_typed_into_a_results_sentence():
    typed = [
        f"{rel}:{n}: {hit!r} in {line[:100]!r}"
        for rel in RESULTS_PAGES
        for n, hit, line in typed_results(results_text(rel))
    ]
    assert typed == [], "print these figures from committed JSON (benchmarks/docs_tables.py --print …) or drop them"


def test_every_allowed_phrase_is_still_used():
    pages = "\n".join("\n".join(line for _, line in prose_lines(results_text(rel))) for rel in RESULTS_PAGES)
    unused = [pattern for pattern, _ in ALLOWED_IN_PROSE if not re.search(_wrapping(pattern), pages)]
    assert unused == []


def test_the_rule_flags_typed_results_and_spares_settings_and_printed_text():
    page = "\n".join(
        [
            "GRPO keeps 0.673 over steps 0–60, +0.028 more than Clip-Cov, −0.111 on pass@256.",  # 3
            "It selects 12 % of the tokens on 3 of 5 seeds; measured 2026-11-28.",  # 3
            "Ratio 0.3, lr 3e-6, 16 new tokens and seeds 0–7 are settings.",  # 0
            "At ratio 0.05 with α = 0.025 and a 95 % interval.",  # 0: allowed phrases
            "`0.673` in code, a [link](x-0.12.md), and:",  # 0
            "```",
            "0.999 in a fence",
            "```",
            "## A heading with 0.55",
            "Printed by `python benchmarks/docs_tables.py --print verify`:",
            "",
            "0.777 printed",
            "",
            "(End of what that command prints.)",
            "| typed | 0.42 |",  # 1
        ]
    )
    hits = [hit for _, hit, _ in typed_results(page)]
    assert hits == ["0.673", "+0", "−0", "12 %", "3 of 5", "2026-11-28", "0.42"], hits
