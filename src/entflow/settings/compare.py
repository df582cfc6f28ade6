"""Several methods on the same task, seed and prompts, side by side (``entflow compare``,
``entflow run``): one validated config per method (and seed), trained by the setting the configs
describe (:func:`entflow.settings.registry.kind_of`, or a kind named by the caller) through
:func:`~entflow.settings.side_by_side.train_side_by_side`, and one report for them all. Each method
gets its own run directory under ``out_dir/NAME/``; the report is written to ``out_dir/NAME/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from entflow.errors import ConfigError
from entflow.settings.registry import get_setting_kind, kind_of
from entflow.trainer.config import TrainConfig, build_config, parse_override

__all__ = ["compare_and_report", "compare_configs", "compare_run_configs", "method_specs", "one_run_of", "parse_seeds"]


def method_specs(methods: list[Any]) -> list[dict[str, Any]]:
    """Normalise ``["grpo", {"method": "steer", "params": {...}, "name": "steer_05"}]``."""
    specs = []
    for m in methods:
        if isinstance(m, str):
            specs.append({"method": m, "params": {}, "name": m.replace("+", "_")})
        elif isinstance(m, dict) and "method" in m:
            unknown = set(m) - {"method", "params", "name"}
            if unknown:
                raise ConfigError("methods", f"unknown keys {sorted(unknown)} in {m}")
            specs.append(
                {"method": m["method"], "params": dict(m.get("params") or {}), "name": m.get("name") or m["method"]}
            )
        else:
            raise ConfigError("methods", f"each entry is a name or a mapping with 'method', got {m!r}")
    names = [s["name"] for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError("methods", f"run names must be unique, got {names}")
    if not specs:
        raise ConfigError("methods", "at least one method is needed")
    return specs


def one_run_of(base: dict[str, Any], method_chosen: bool) -> dict[str, Any]:
    """A comparison's config (one with ``methods:``, as the registered presets) as one run's config
    (``entflow train --config``): where the run names its method (``method_chosen``: ``--method`` or
    ``method=``; or a ``method`` key) the list is dropped; a list of one method becomes that method,
    its parameters and its run name; a longer list is refused (:class:`ConfigError` naming
    ``methods``). A config without ``methods`` is returned as it is."""
    if "methods" not in base:
        return base
    run = {k: v for k, v in base.items() if k != "methods"}
    if method_chosen or "method" in run:
        return run
    methods = base["methods"]
    specs = method_specs(methods if isinstance(methods, list) else [methods])
    if len(specs) > 1:
        names = ", ".join(s["name"] for s in specs)
        raise ConfigError(
            "methods",
            f"lists {len(specs)} methods ({names}): train one with --method NAME, or all of them with "
            "entflow compare --config",
        )
    (spec,) = specs
    run["method"] = spec["method"]
    if spec["params"]:
        run["method_params"] = {**(run.get("method_params") or {}), **spec["params"]}
    if spec["name"] != spec["method"].replace("+", "_"):
        run.setdefault("name", spec["name"])
    return run


def parse_seeds(value: Any) -> list[int]:
    """``0,1,2`` / ``"0,1,2"`` / ``[0, 1, 2]`` / ``3`` → a list of distinct integer seeds."""
    items = value if isinstance(value, list | tuple) else str(value).replace(" ", "").split(",")
    try:
        seeds = [int(x) for x in items if str(x) != ""]
    except ValueError:
        raise ConfigError("seeds", f"expected integers like 0,1,2, got {value!r}") from None
    if not seeds or len(set(seeds)) != len(seeds) or any(x < 0 for x in seeds):
        raise ConfigError("seeds", f"expected distinct integers >= 0, got {value!r}")
    return seeds


def compare_configs(
    name: str,
    methods: list[Any],
    base: dict[str, Any],
    overrides: list[str],
    out_dir: str = "runs",
    seeds: list[int] | None = None,
    cls: type[TrainConfig] | None = None,
) -> list[TrainConfig]:
    """One validated config per method (× seed), identical except for method, params, name and
    seed. With several ``seeds`` a run is named ``<method>-s<seed>`` and carries ``group=<method>``,
    which the report uses to average over seeds. ``cls``: the config class (None: the config class
    of the setting ``base`` and ``overrides`` describe, :func:`_setting`)."""
    cls = cls or _setting(base, overrides).config_class()
    configs = []
    for spec in method_specs(methods):
        for seed in seeds or [None]:
            values = dict(base) | {"method": spec["method"], "out_dir": str(Path(out_dir) / name)}
            values["name"] = spec["name"] if seed is None or len(seeds or []) == 1 else f"{spec['name']}-s{seed}"
            values["group"] = spec["name"]
            values["method_params"] = dict(base.get("method_params") or {}) | spec["params"]
            cfg = build_config(values, overrides, cls=cls)
            if seed is not None:
                cfg.seed = seed
            configs.append(cfg)
    return configs


def compare_run_configs(
    base: dict[str, Any], methods_arg: str | None, name: str, overrides: list[str], cls: type | None = None
) -> tuple[list[TrainConfig], str]:
    """The validated configs of a comparison (one per method and seed) and its ``out_dir``:
    ``base["methods"]`` (or ``methods_arg``, comma-separated) on ``base`` with the overrides;
    ``cls``: the config class (None: the setting's, as :func:`compare_configs`). ``out_dir=`` and
    ``seeds=`` overrides are the comparison's (``seeds=0,1,2``: every method once per seed; ``seed=``
    one seed for every run)."""
    base = dict(base)
    methods = methods_arg.split(",") if methods_arg else base.pop("methods", None)
    base.pop("methods", None)
    if not methods:
        raise ConfigError("methods", "give --methods a,b,c or a `methods:` list in --config")
    out_dir = base.pop("out_dir", "runs")
    seeds_value = base.pop("seeds", None)
    rest = []
    for text in overrides:  # out_dir is the comparison's folder; name is per run
        key, value = parse_override(text)
        if key == "out_dir":
            out_dir = str(value)
        elif key == "seeds":  # seeds=0,1,2: every method once per seed
            seeds_value = text.split("=", 1)[1]
        elif key == "seed":  # one seed for every run: overrides the config's seeds list
            seeds_value = None
            rest.append(text)
        elif key == "name":
            raise ConfigError("name", "each run is named after its method; use --name for the comparison")
        else:
            rest.append(text)
    overrides = rest
    seeds = parse_seeds(seeds_value) if seeds_value is not None else None
    configs = compare_configs(name, methods, base, overrides, out_dir=out_dir, seeds=seeds, cls=cls)
    return configs, out_dir


def compare_and_report(
    base: dict[str, Any],
    methods_arg: str | None,
    name: str,
    overrides: list[str],
    jobs: int,
    resume: bool,
    overwrite: bool,
    kind: str | None = None,
) -> tuple[list[Path], Path]:
    """Train the methods of ``base["methods"]`` (or ``methods_arg``) side by side and write the
    report to ``out_dir/name``. ``kind``: the name of the setting whose config class the configs are
    and which trains them (None: the one ``base`` and ``overrides`` describe, :func:`_setting`).
    Returns the run directories and the report's path."""
    from entflow.analysis.report import write_report

    runner = get_setting_kind(kind) if kind is not None else _setting(base, overrides)
    configs, out_dir = compare_run_configs(base, methods_arg, name, overrides, runner.config_class())
    if jobs < 1:
        raise ConfigError("jobs", f"must be >= 1, got {jobs}")
    run_dirs = runner.train(configs, jobs=jobs, resume=resume, overwrite=overwrite)
    return run_dirs, write_report(run_dirs, Path(out_dir) / name)


def _setting(base: dict[str, Any], overrides: list[str]) -> Any:
    """The setting whose runs ``base`` with ``overrides`` describes (a ``model`` key: a real model)."""
    return kind_of(dict(base) | dict(parse_override(o) for o in overrides))
