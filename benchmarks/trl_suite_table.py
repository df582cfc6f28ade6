"""docs/integrations.md's table of TRL's own GRPO tests run against the adapter, printed from the
JSON that ``tests/support/trl_suite.py`` writes (``WORKDIR/trl_suite.json``, committed under
docs/results/trl-suite/). Nothing is typed by hand; a test checks that the printed block is current
(benchmarks/docs_tables.py).

    .venv/bin/python benchmarks/trl_suite_table.py FILE
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("passed", "failed", "skipped")


def side_counts(side: dict[str, Any]) -> dict[str, int]:
    """passed / failed (pytest's failures and errors together) / skipped of one side."""
    c = side["counts"]
    return {
        "passed": c.get("passed", 0),
        "failed": c.get("failed", 0) + c.get("errors", 0),
        "skipped": c.get("skipped", 0),
    }


def differing(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(test, outcome with trl.GRPOTrainer, outcome with EntflowGRPOTrainer) for each test whose outcome
    differs; a test absent from a side's ``-rA`` report counts as SKIPPED there."""
    a, b = data["sides"]["A"]["outcomes"], data["sides"]["B"]["outcomes"]
    return [(t, a.get(t, "SKIPPED"), b.get(t, "SKIPPED")) for t in sorted(a.keys() | b.keys()) if a.get(t) != b.get(t)]


def suite_table(path: str | Path) -> str:
    """Caption, the counts of both sides, and the tests whose outcome differs (or that none does)."""
    p = Path(path)
    data = json.loads((p if p.is_absolute() else ROOT / p).read_text())
    v = data["versions"]
    out = [
        f"Measured {data['date']} on {data['machine']}, trl {v['trl']}, transformers {v['transformers']}, "
        f"entflow at {data['entflow_commit']}; TRL's tests at its commit {data['trl_commit'][:10]}. "
        f"Command: `{data['command']}`. Data: `{path}`." + (f" ({data['note']})" if data.get("note") else ""),
        "",
        "| | passed | failed | skipped | minutes |",
        "|---|---:|---:|---:|---:|",
    ]
    for key in ("A", "B"):
        side = data["sides"][key]
        c = side_counts(side)
        minutes = "–" if side.get("seconds") is None else f"{side['seconds'] / 60:.1f}"
        out.append(f"| {key}, `{side['trainer']}` | " + " | ".join(str(c[k]) for k in KINDS) + f" | {minutes} |")
    out.append("")
    diff = differing(data)
    lost = [t for t, a, _ in diff if a == "PASSED"]
    if not diff:
        out.append("Every test has the same outcome on both sides.")
    else:
        out.append(f"{len(diff)} tests differ, {len(lost)} of them passing only with `trl.GRPOTrainer`:")
        out += [f"- `{t}`: {a} with trl.GRPOTrainer, {b} with EntflowGRPOTrainer" for t, a, b in diff]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file", help="a trl_suite.json that tests/support/trl_suite.py wrote")
    print(suite_table(ap.parse_args().file), end="")


if __name__ == "__main__":
    main()
