"""``entflow methods``: every registered entropy intervention with its formula, paper and
parameters; ``entflow methods NAME`` shows one in full."""

from __future__ import annotations

import argparse
import re

HOOKS = ("clip_bounds", "shape_advantages", "token_mask", "token_weights", "token_loss", "loss_terms", "update")
HOOK_WHERE = {
    "clip_bounds": "sets the PPO clip bounds",
    "shape_advantages": "shapes advantages in compute_advantages",
    "token_mask": "drops tokens from the loss and from its denominator",
    "token_weights": "multiplies the per-token loss by a detached weight",
    "token_loss": "replaces the per-token loss",
    "loss_terms": "adds terms to the loss (or reports shaping metrics)",
    "update": "updates controller state once per rollout step",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", default=None, help="show one method in full (default: list them all)")


def _default(v: object) -> str:
    return repr(v)


_ROLE = re.compile(r":[a-z]+:`(~?)([^`<]*?)\s*(?:<[^>]*>)?`")  # :class:`~a.b.C` / :func:`text <target>`
_ITEM = re.compile(r"^([-*]|\d+\.)\s|^``")  # a list item, or a line that opens with a literal (a case)


def _plain(line: str) -> str:
    line = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), line)
    line = line.replace("``", "").replace("**", "")
    line = re.sub(r"(?<![\w`])`([^`]+)`(?!\w)", r"\1", line)
    return line[:-2] + ":" if line.endswith("::") else line


def rst_to_text(doc: str) -> str:
    """A reStructuredText docstring as plain terminal text: roles, ``literals``, **strong** and
    `interpreted` marks dropped (``:class:`~a.B``` → ``B``); each paragraph, list item or case
    (a line opening with a literal) on one line, which the terminal wraps; ``::`` → ``:``;
    indented literal blocks kept as written."""
    out: list[str] = []
    for line in doc.splitlines():
        stripped = line.strip()
        literal = (
            line.startswith("    ") and bool(out) and (not out[-1] or out[-1].endswith("::") or out[-1][:1] == " ")
        )
        if not stripped or literal or _ITEM.match(stripped) or not out or not out[-1] or out[-1][:1] == " ":
            out.append(line.rstrip() if literal else stripped)
        else:
            out[-1] += " " + stripped
    return "\n".join(_plain(ln) for ln in out)


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import inspect

    from rich.markup import escape
    from rich.table import Table

    from entflow.cli._common import cli_console
    from entflow.methods.base import Method, iter_registered, method_class

    console = cli_console()
    if args.name is None:
        title = "entflow methods (docs/design.md §6) — compose with '+', e.g. clip_higher+steer"
        table = Table(title=title, show_lines=True)
        for col in ("name", "formula", "paper", "parameters (default)"):
            table.add_column(col, overflow="fold")
        for cls in iter_registered():
            params = ", ".join(f"{f.name}={_default(f.default)}" for f in dataclasses.fields(cls)) or "—"
            table.add_row(cls.name, escape(rst_to_text(cls.formula)), escape(rst_to_text(cls.paper)), escape(params))
        console.print(table)
        return 0

    cls = method_class(args.name)  # raises UnknownMethodError listing the known names
    console.print(f"[bold]{cls.name}[/bold] — {escape(rst_to_text(cls.formula))}")
    console.print(f"paper: {escape(rst_to_text(cls.paper))}\n")
    console.print(rst_to_text(inspect.cleandoc(cls.__doc__ or "")), markup=False, highlight=False)
    table = Table(title="parameters", show_lines=False)
    for col in ("name", "default", "allowed", "help"):
        table.add_column(col, overflow="fold")
    for f in dataclasses.fields(cls):
        check = f.metadata.get("check")
        table.add_row(f.name, _default(f.default), check.describe if check else "any", f.metadata.get("help", ""))
    if dataclasses.fields(cls):
        console.print(table)
    else:
        console.print("parameters: none")
    hooks = [h for h in HOOKS if getattr(cls, h) is not getattr(Method, h)]
    console.print("hooks: " + ("; ".join(f"{h} ({HOOK_WHERE[h]})" for h in hooks) or "none (plain PPO-clip)"))
    needs = list(cls.needs)
    console.print(
        "batch fields needed by policy_loss: " + (", ".join(needs) or "none beyond logp/old_logp/advantages/mask")
    )
    if cls.reads_entropy:
        console.print("reads the entropy H (detached): old_entropy, else entropy")
    if cls.advantage_needs:
        console.print("batch fields read by compute_advantages: " + ", ".join(cls.advantage_needs))
    if isinstance(cls.state_fields, property):  # the state depends on the parameters (stare: adaptive=True)
        console.print("state (state_dict): depends on the parameters; see above")
    elif cls.state_fields:
        console.print("state (state_dict): " + ", ".join(cls.state_fields))
    if cls.replaces_advantages:
        console.print("builds advantages from rewards (put it first among advantage shapers)")
    return 0
