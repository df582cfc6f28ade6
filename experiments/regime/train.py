"""One lab run on ``countdown_routes`` that also evaluates the hard (route-requiring) split.

    PYTHONPATH=src python experiments/regime/train.py --config src/entflow/lab/configs/regime.yaml \
        --method grpo --name grpo-s100 seed=100 [key=value ...]

The same ``entflow.trainer.loop.train`` as ``entflow train``; only the validation callback differs:
on every evaluation step it adds ``hard/*`` (the metrics of ``validate_policy`` on
``task.hard_set()``) to the ``val/*`` metrics, so the best-window accuracy of the hard split can
be read from metrics.jsonl. The ``methods:`` list of a run preset is ignored (give ``--method``).
"""

from __future__ import annotations

import argparse
import dataclasses

from entflow.lab.config import build_config
from entflow.lab.evaluate import evaluate_hard_set, validate_policy
from entflow.lab.setup import lab_setup
from entflow.trainer.config import load_yaml
from entflow.trainer.loop import train
from entflow.trainer.seeds import REGIME_HARD_SET


def validate_both(model, tokenizer, task, cfg, step: int) -> dict[str, float]:
    out = validate_policy(model, tokenizer, task, cfg, step)
    # its own stream, not val/hard_acc's (entflow.trainer.seeds): the two hard-split metrics differ by sampling noise
    res = evaluate_hard_set(model, tokenizer, task, cfg, step, stream=REGIME_HARD_SET)
    out |= {f"hard/{k}": float(v) for k, v in res.items() if k not in ("k", "n_problems")}
    return out


def routes_setup(cfg):
    return dataclasses.replace(lab_setup(cfg), validate=validate_both)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--method", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    base = load_yaml(a.config)
    base.pop("methods", None)
    base["method"], base["name"] = a.method, a.name
    cfg = build_config(base, a.overrides)
    print(train(cfg, overwrite=True, setup=routes_setup))


if __name__ == "__main__":
    main()
