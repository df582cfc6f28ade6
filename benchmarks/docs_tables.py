"""Print the docs' generated tables anew from the committed result files, or check that they are current.

A printed block in ``docs/*.md`` opens with the line ``Printed by `COMMAND`:`` and a blank line, and
closes with the line ``(End of what that command prints.)``; between them stands exactly what COMMAND
prints (run from the repository root; COMMAND starts with ``python benchmarks/`` and reads a committed
JSON), then a blank line. Both lines show on the page, so a reader knows where the figures come from.
Nobody edits the block by hand: a test runs ``--check``, so a typed-over number fails CI.

    python benchmarks/docs_tables.py            # rewrite every printed block
    python benchmarks/docs_tables.py --check    # exit 1, naming each block that differs
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
END = "(End of what that command prints.)"
BLOCK = re.compile(r"(Printed by `(?P<cmd>python benchmarks/[^`]+)`:\n\n)(?P<body>.*?)(" + re.escape(END) + ")", re.S)


def render(command: str, root: Path = ROOT) -> str:
    """What ``command`` prints, run from ``root`` with this interpreter (a trailing newline added)."""
    argv = shlex.split(command)
    if argv[:1] != ["python"] or not argv[1].startswith("benchmarks/"):
        raise ValueError(f"a generated block's command must start with 'python benchmarks/', got {command!r}")
    res = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=root, timeout=300)
    if res.returncode:
        raise RuntimeError(f"{command!r} exited {res.returncode}: {res.stderr[-2000:]}")
    return res.stdout.rstrip("\n") + "\n"


def stale_blocks(docs: Path, root: Path = ROOT, write: bool = False) -> list[str]:
    """``file: command`` of every printed block under ``docs`` whose text differs from its command's
    output (rewritten in place with ``write``)."""
    stale = []
    for path in sorted(docs.glob("*.md")):
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is not current")
    args = ap.parse_args()
    stale = stale_blocks(ROOT / "docs", write=not args.check)
    for s in stale:
        print(("stale: " if args.check else "rewrote: ") + s)
    if args.check and stale:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
