"""``entflow eval``: avg@k, pass@k and greedy accuracy of a run's final policy on the held-out set.

With ``--model NAME_OR_PATH --data TASK_OR_FILE`` it evaluates a real Hugging Face model instead
(avg@k, pass@k, maj@k, greedy, each with its standard error): the options, the table and the
results file are here; the evaluation is :func:`entflow.hf.evaluate.run_eval`."""

from __future__ import annotations

import argparse
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", nargs="?", help="a run directory or a saved policy directory (lab); omit with --model")
    p.add_argument("--task", help="task (default: the run's)")
    p.add_argument("--k", type=int, default=8, help="samples per prompt [8]")
    p.add_argument("--seed", type=int, default=0, help="sampling seed [0]")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the run's, else 1)")
    add_real_model_arguments(p)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "model", None) is not None:
        from entflow.cli._common import data_argument, model_argument

        model_argument("--model", args.model)
        if args.data:
            data_argument("--data", args.data)
        return run_real_model(args)
    from pathlib import Path

    from entflow.cli._common import existing_path
    from entflow.errors import ConfigError

    if args.path is None:
        raise ConfigError("path", "give a run directory, or --model NAME_OR_PATH --data TASK_OR_FILE")
    path = existing_path("PATH", args.path, kind="dir")
    return eval_lab_policy(Path(path), args.task, args.k, args.seed, args.temperature)


def lab_eval_settings(path, task_name: str | None = None, temperature: float | None = None):
    """(policy directory, task, temperature) for ``entflow eval PATH``.

    A run directory is scored on exactly the task it trained on — its ``task`` *and*
    ``task_params`` from ``config.yaml`` — at its sampling ``temperature``, using
    ``checkpoints/final``; ``task_name`` / ``temperature`` override (a different task name drops the
    run's task_params). A bare policy directory uses ``task_name`` (default countdown) at
    temperature 1 unless given.
    """
    from pathlib import Path

    from entflow.errors import ConfigError
    from entflow.lab.tasks import get_task
    from entflow.trainer.config import load_yaml

    path = Path(path)
    params: dict = {}
    run_temperature = 1.0
    if (path / "config.yaml").exists():
        cfg = load_yaml(path / "config.yaml")
        run_task = cfg.get("task") or "countdown"
        if task_name is None or task_name == run_task:
            task_name, params = run_task, dict(cfg.get("task_params") or {})
        run_temperature = float(cfg.get("temperature") or 1.0)
        path = path / "checkpoints" / "final"
    if not path.exists():
        raise ConfigError("path", f"{path} does not exist")
    t = run_temperature if temperature is None else float(temperature)
    if not t > 0:
        raise ConfigError("temperature", f"must be > 0, got {t}")
    return path, get_task(task_name or "countdown", **params), t


def eval_lab_policy(
    path, task_name: str | None = None, k: int = 8, seed: int = 0, temperature: float | None = None
) -> int:
    """Evaluate a lab run (or saved lab policy) on its held-out set and print the table."""
    import torch
    from rich.table import Table

    from entflow.cli._common import cli_console
    from entflow.errors import ConfigError
    from entflow.lab.policy import load_policy
    from entflow.lab.pretrain import evaluate

    if k < 1:
        raise ConfigError("k", f"must be >= 1, got {k}")
    policy_dir, task, temp = lab_eval_settings(path, task_name, temperature)
    model, tok = load_policy(policy_dir)
    torch.manual_seed(seed)
    res = evaluate(model, tok, task, task.validation_set(), k=k, temperature=temp, seed=seed)
    console = cli_console()
    line = f"{policy_dir}: {task!r}, {len(task.validation_set())} held-out prompts, k={k}, temperature {temp:g}"
    console.print(line, markup=False, highlight=False)  # a path's [x] is text, not markup
    names = {"acc": f"avg@{k}", "pass@k": f"pass@{k} (unbiased)", "acc_greedy": "greedy accuracy"}
    table = Table()
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, v in res.items():
        if key not in ("k", "n_problems"):
            table.add_row(names.get(key, key), f"{v:.4f}")
    console.print(table)
    return 0


# --------------------------------------------------------------------------------------------
# entflow eval --model NAME_OR_PATH --data TASK_OR_FILE (a real model)


def _add(p: argparse.ArgumentParser, *flags: str, **kwargs: Any) -> None:
    """Add an option unless the lab branch of ``entflow eval`` already defines it."""
    if not any(f in p._option_string_actions for f in flags):
        p.add_argument(*flags, **kwargs)


def add_real_model_arguments(p: argparse.ArgumentParser) -> None:
    """Options of ``entflow eval --model ... --data ...`` (real models)."""
    g = p.add_argument_group("real models (with --model)")
    _add(g, "--model", help="model: short name (smollm2), a saved model directory, or a hub id with --hub")
    _add(g, "--data", help="gsm_symbolic | basic_arithmetic | a lab task | a .jsonl/.parquet file or datasets dir")
    _add(g, "--n", type=int, help="number of held-out problems [100]")
    _add(g, "--samples", type=int, help="samples per problem (>= k) [k]")
    _add(g, "--temperature", type=float, help="sampling temperature [1.0]")
    _add(g, "--top-p", type=float, help="nucleus sampling [1.0 = off]")
    _add(g, "--top-k", type=int, help="top-k sampling [0 = off]")
    _add(g, "--max-new-tokens", type=int, help="response length limit in tokens [256]")
    _add(g, "--batch-size", type=int, help="sequences per generate call [32]")
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


def print_result(res: Any, console: Any = None) -> None:
    """The table of an :class:`~entflow.hf.evaluate.EvalResult`: each metric with its standard
    error, then the extras."""
    from rich.markup import escape
    from rich.table import Table

    from entflow.cli._common import cli_console

    console = console or cli_console()
    s = res.settings
    table = Table(
        title=escape(
            f"{s['model']} on {s['data']}: {s['n_problems']} problems × {s['n_samples']} samples "
            f"(T={s['temperature']}, top_p={s['top_p']}, top_k={s['top_k']}, max_new_tokens={s['max_new_tokens']})"
        )
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("± s.e.", justify="right")
    for name, (v, se) in res.metrics.items():
        table.add_row(name, f"{v:.3f}", f"{se:.3f}")
    e = res.extras
    table.add_row("mean response length (tokens)", f"{e['response_len']:.1f}", "")
    table.add_row("token entropy (nats)", f"{e['token_entropy']:.3f}", "")
    table.add_row("unparseable fraction", f"{e['unparseable_frac']:.3f}", "")
    table.add_row("samples / s", f"{e['samples_per_s']:.2f}", "")
    table.add_row(
        "reward errors / timeouts", f"{e.get('reward_errors', 0):.0f} / {e.get('reward_timeouts', 0):.0f}", ""
    )
    console.print(table)


def run_real_model(args: argparse.Namespace) -> int:
    """``entflow eval --model ... --data ...``: :func:`~entflow.hf.evaluate.run_eval` with the
    options, the table, and the results as JSON (``--out``)."""
    import json
    import time
    from pathlib import Path

    from entflow.errors import ConfigError
    from entflow.hf.evaluate import SamplingConfig, run_eval
    from entflow.trainer.config import parse_override

    if not args.data:
        raise ConfigError("data", "--model needs --data (a task name or a file)")
    k = _opt(args, "k", 4)
    sampling = SamplingConfig(
        temperature=_opt(args, "temperature", 1.0),
        top_p=_opt(args, "top_p", 1.0),
        top_k=_opt(args, "top_k", 0),
        max_new_tokens=_opt(args, "max_new_tokens", 256),
        seed=_opt(args, "seed", 0),
        batch_size=_opt(args, "batch_size", 32),
    )
    data_params = dict(parse_override(t) for t in getattr(args, "data_param", []) or [])
    t0 = time.perf_counter()
    res = run_eval(
        args.model,
        args.data,
        n=_opt(args, "n", 100),
        k=k,
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
    print_result(res)
    print(f"wall time {res.extras['wall_s']:.0f} s (model load {res.extras['load_s']:.1f} s); results in {out}")
    return 0
