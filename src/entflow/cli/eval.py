"""``entflow eval``: avg@k, pass@k and greedy accuracy of a run's final policy on the held-out set.

With ``--model NAME_OR_PATH --data TASK_OR_FILE`` it evaluates a real Hugging Face model instead
(avg@k, pass@k, maj@k, greedy, each with its standard error). The setting the options describe
(:func:`entflow.settings.registry.kind_of`) evaluates and makes the table: the lab's
:func:`entflow.lab.evaluate.evaluate_run`, a real model's :func:`entflow.hf.evaluate.run_eval`; here
are the options, the printing and a real model's results file."""

from __future__ import annotations

import argparse
from typing import Any

# the options of a real model's sampling, each a key of its SamplingConfig (their help is its fields')
SAMPLING_OPTIONS = ("top_p", "top_k", "max_new_tokens", "batch_size")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", help="a run directory or a saved policy directory (lab); omit with --model")
    p.add_argument("--task", help="task (default: the run's)")
    p.add_argument("--k", type=int, default=8, help="samples per prompt [8]")
    p.add_argument("--seed", type=int, default=0, help="sampling seed [0]")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the run's, else 1)")
    add_real_model_arguments(p)


def run(args: argparse.Namespace) -> int:
    from entflow.settings.registry import kind_of

    kind = kind_of(vars(args))
    if getattr(args, "model", None) is not None:
        from entflow.cli._common import data_argument, model_argument

        model_argument("--model", args.model)
        if args.data:
            data_argument("--data", args.data)
        return run_real_model(kind, args)
    from entflow.cli._common import cli_console, existing_path
    from entflow.errors import ConfigError

    if args.path is None:
        raise ConfigError("path", "give a run directory, or --model NAME_OR_PATH --data TASK_OR_FILE")
    path = existing_path("PATH", args.path, kind="dir")
    res = kind.evaluate(path=path, task=args.task, k=args.k, seed=args.seed, temperature=args.temperature)
    console = cli_console()
    console.print(res.heading(), markup=False, highlight=False)  # a path's [x] is text, not markup
    console.print(res.table())
    return 0


# --------------------------------------------------------------------------------------------
# entflow eval --model NAME_OR_PATH --data TASK_OR_FILE (a real model)


def _add(p: argparse.ArgumentParser, *flags: str, **kwargs: Any) -> None:
    """Add an option unless the lab branch of ``entflow eval`` already defines it."""
    if not any(f in p._option_string_actions for f in flags):
        p.add_argument(*flags, **kwargs)


def _sampling_help() -> dict[str, str]:
    """Each sampling option's help, from its key of the real setting's SamplingConfig: the help, the
    allowed values and the default (:func:`entflow.trainer.config.describe_keys`'s words)."""
    import dataclasses

    from entflow.settings.registry import get_setting_kind
    from entflow.trainer.config import default_text, key_info

    cls = get_setting_kind("real").sampling_class()
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    out = {}
    for name in SAMPLING_OPTIONS:
        help_text, allowed = key_info(cls, name)
        out[name] = f"{help_text}{f' (allowed: {allowed})' if allowed else ''} [{default_text(defaults[name])}]"
    return out


def add_real_model_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``entflow eval --model ... --data ...`` (real models)."""
    sampling = _sampling_help()
    g = p.add_argument_group("real models (with --model)")
    _add(g, "--model", help="model: short name (smollm2), a saved model directory, or a hub id with --hub")
    _add(g, "--data", help="gsm_symbolic | basic_arithmetic | a lab task | a .jsonl/.parquet file or datasets dir")
    _add(g, "--n", type=int, help="number of held-out problems [100]")
    _add(g, "--samples", type=int, help="samples per problem (>= k) [k]")
    _add(g, "--temperature", type=float, help="sampling temperature [1.0]")
    _add(g, "--top-p", type=float, help=sampling["top_p"])
    _add(g, "--top-k", type=int, help=sampling["top_k"])
    _add(g, "--max-new-tokens", type=int, help=sampling["max_new_tokens"])
    _add(g, "--batch-size", type=int, help=sampling["batch_size"])
    _add(g, "--system-prompt", help="system message for the chat template")
    _add(g, "--prompt-suffix", help="text appended to every question (default: the boxed-answer instruction)")
    _add(g, "--reward", help="reward: math_verify | exact_match | format | weighted sum a+0.1*b [the data's]")
    _add(g, "--no-greedy", action="store_true", help="skip the greedy pass")
    _add(g, "--hub", action="store_true", help="allow a hub id for --model/--data (needs network)")
    _add(g, "--out", help="JSON file for the results [eval-<model>-<data>.json]")
    _add(
        g,
        "--data-param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="reasoning-gym config, e.g. max_terms=2",
    )


def _opt(args: argparse.Namespace, name: str, default: Any) -> Any:
    v = getattr(args, name, None)
    return default if v is None else v


def run_real_model(kind: Any, args: argparse.Namespace) -> int:
    """``entflow eval --model ... --data ...``: the real setting's evaluation with the options, its
    table, and the results as JSON (``--out``)."""
    import json
    import time
    from pathlib import Path

    from entflow.cli._common import cli_console
    from entflow.errors import ConfigError
    from entflow.trainer.config import parse_override

    if not args.data:
        raise ConfigError("data", "--model needs --data (a task name or a file)")
    sampling = {"temperature": _opt(args, "temperature", 1.0), "seed": _opt(args, "seed", 0)}
    sampling |= {name: getattr(args, name) for name in SAMPLING_OPTIONS if getattr(args, name, None) is not None}
    data_params = dict(parse_override(t) for t in getattr(args, "data_param", []) or [])
    t0 = time.perf_counter()
    res = kind.evaluate(
        model=args.model,
        data=args.data,
        n=_opt(args, "n", 100),
        k=_opt(args, "k", 4),
        n_samples=_opt(args, "samples", None),
        sampling=sampling,
        greedy=not getattr(args, "no_greedy", False),
        system_prompt=getattr(args, "system_prompt", None),
        prompt_suffix=getattr(args, "prompt_suffix", None),
        reward=getattr(args, "reward", None),
        allow_hub=bool(getattr(args, "hub", False)),
        data_params=data_params,
    )
    res.extras["wall_s"] = time.perf_counter() - t0
    out = Path(_opt(args, "out", f"eval-{Path(args.model).name}-{Path(str(args.data)).stem}.json"))
    out.write_text(json.dumps(res.to_json(), indent=2, default=str))
    cli_console().print(res.table())
    print(f"wall time {res.extras['wall_s']:.0f} s (model load {res.extras['load_s']:.1f} s); results in {out}")
    return 0
