"""``entflow`` entry point: one subcommand per module, each exposing ``add_arguments(parser)`` and ``run(args)``.

Subcommand modules keep their heavy imports inside ``run`` so that building the parser (and
``--help``) stays fast, and :func:`main` fills in the arguments of the one subcommand it runs only:
``entflow analyze LOG`` never imports the trainer (nor torch).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from entflow.cli.extras import command_extra, extra_of_module, require_extra
from entflow.errors import EntflowError, MissingExtraError

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("entflow.cli.run", "the demo: GRPO against KL-Cov in the exploration regime, pass@k curves first"),
    "pretrain": ("entflow.cli.pretrain", "warm-start the tiny lab policy (cached)"),
    "train": ("entflow.cli.train", "train one method in the lab"),
    "compare": ("entflow.cli.compare", "train several methods side by side and report"),
    "eval": ("entflow.cli.eval", "evaluate a run's policy on the held-out set"),
    "estimators": ("entflow.cli.estimators", "compare entropy-change estimators on a tabular softmax policy"),
    "methods": ("entflow.cli.methods", "list every method with its formula, paper and parameters"),
    "analyze": ("entflow.cli.analyze", "summary table, plots and report.html for one or more runs"),
    "reproduce": ("entflow.cli.reproduce", "the five papers' claims over seeds: a table of verdicts + estimator audit"),
    "doctor": ("entflow.cli.doctor", "self-checks on this machine: correctness vs float64 and speed (docs/gpu.md)"),
}


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (exit 2), pointing at ``--help``."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``entflow`` parser; with ``only`` (a subcommand name, or ``""`` for none) the other
    subcommands are listed with their help line but their modules are not imported and their
    arguments not added. ``entflow --version`` prints the version."""
    parser = Parser(
        prog="entflow",
        description="Entropy-aware RL with verifiable rewards: methods, diagnostics and a CPU lab.",
    )
    from entflow import __version__

    parser.add_argument("--version", action="version", version=f"entflow {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        if only is None or name == only:
            importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = next((a for a in argv if not a.startswith("-")), None)
    # no subcommand (``entflow``, ``entflow --help``, ``entflow --version``): no subcommand's arguments
    parser = build_parser(only=command if command in COMMANDS else "" if command is None else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    extra = command_extra(args.command, args)
    try:
        if extra is not None:  # before any work: one line naming the extra to install
            require_extra(extra)
        return int(importlib.import_module(args._module).run(args) or 0)
    except EntflowError as e:
        print(f"entflow {args.command}: error: {e}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:  # an optional module reached later (a TensorBoard log, a resumed real run)
        needed = extra_of_module(e.name, prefer=extra)
        if needed is None:
            raise
        print(f"entflow {args.command}: error: {MissingExtraError(needed, [e.name or '?'])}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
