"""Evaluation of the lab's tiny policy (as :mod:`entflow.hf.evaluate` is a real model's): the
held-out metrics of a policy (:func:`evaluate`: avg@k, pass@k, greedy accuracy, entropy, distinct
correct answers), a run's validation (:func:`validate_policy`, the ``val/*`` metrics) and its harder
split (:func:`evaluate_hard_set`), the coverage curves of a run's start and end
(:func:`coverage_splits`), and ``entflow eval RUN_DIR`` (:func:`evaluate_run`, whose result prints
its own table). Generation is the one path, :func:`entflow.trainer.evaluate.generate_in_batches`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from entflow.errors import ConfigError, ParameterError
from entflow.lab.tasks import LabTask, Problem
from entflow.trainer import seeds
from entflow.trainer.evaluate import generate_in_batches, pass_at_k
from entflow.trainer.rollout import generate

if TYPE_CHECKING:
    from entflow.trainer.config import TrainConfig

__all__ = [
    "LabEvaluation",
    "coverage_splits",
    "eval_settings",
    "evaluate",
    "evaluate_hard_set",
    "evaluate_run",
    "generate_responses",
    "validate_policy",
]


@torch.no_grad()
def generate_responses(
    model,
    tokenizer,
    task: LabTask,
    prompts: list[str],
    k: int = 1,
    temperature: float = 1.0,
    greedy: bool = False,
) -> tuple[list[str], torch.Tensor, torch.Tensor]:
    """Sample ``k`` responses per prompt (grouped: prompt i's samples are rows i*k … i*k+k-1) with
    the one generation path (:func:`entflow.trainer.rollout.generate`). Returns (texts, response
    ids [N, T] (pad after the first ``<eos>``), per-token entropy [N, T] of the sampling
    distribution, 0 after the first ``<eos>``). Kept for the 0.1 API; :func:`evaluate` batches
    through :func:`entflow.trainer.evaluate.generate_in_batches`."""
    gen = generate(
        model,
        tokenizer,
        prompts,
        task.max_response_len,
        n=1 if greedy else k,
        temperature=temperature,
        greedy=greedy,
        record_entropy=True,
    )
    resp, ent = gen.response_ids, gen.entropy
    if greedy and k > 1:
        resp, ent = resp.repeat_interleave(k, 0), ent.repeat_interleave(k, 0)
        return [t for t in gen.texts for _ in range(k)], resp, ent
    return gen.texts, resp, ent


def evaluate(
    model,
    tokenizer,
    task: LabTask,
    problems: list[Problem],
    k: int = 4,
    temperature: float = 1.0,
    greedy: bool = False,
    seed: int | None = None,
    max_batch: int = 512,
) -> dict[str, float]:
    """Validation metrics from ``k`` samples per problem at ``temperature``:

    - ``acc``: mean reward over all samples (avg@k); ``pass@k``: unbiased pass@k (= any correct);
    - ``entropy``: mean full-vocabulary token entropy (nats) over sampled response tokens,
      ``<eos>`` included; ``response_len``: mean response length in tokens (``<eos>`` included);
    - ``distinct_correct``: mean number of *different* correct responses per problem among its k
      samples (a diversity measure that falls when the policy settles on one solution);
    - ``acc_greedy``: greedy-decoding accuracy. Always computed (one greedy pass over the
      problems costs little next to the k samples), so every key is always a float; ``greedy`` is
      accepted for interface compatibility and changes nothing.

    ``seed`` makes the sampling reproducible without touching the global torch RNG. Generation
    is :func:`entflow.trainer.evaluate.generate_in_batches` (``max_batch`` rows per call)."""
    if k < 1:
        raise ParameterError("evaluate", "k", f"must be >= 1, got {k}")
    if temperature <= 0:
        raise ParameterError("evaluate", "temperature", f"must be > 0, got {temperature}")
    if not problems:
        raise ParameterError("evaluate", "problems", "must not be empty")
    prompts = [p.prompt for p in problems]
    length = task.max_response_len
    sampled = generate_in_batches(
        model, tokenizer, prompts, k, length, temperature=temperature, batch_size=max_batch, seed=seed
    )
    greedy_runs = generate_in_batches(
        model, tokenizer, prompts, 1, length, greedy=True, batch_size=max_batch, seed=seed, record_entropy=False
    )
    texts = [t for gen in sampled for t in gen.texts]
    rewards = [task.reward(problems[i // k], t) for i, t in enumerate(texts)]
    pass_k, distinct = [], []
    for i in range(len(problems)):
        rs, ts = rewards[i * k : (i + 1) * k], texts[i * k : (i + 1) * k]
        pass_k.append(pass_at_k(k, sum(1 for r in rs if r > 0), k))
        distinct.append(len({t for t, r in zip(ts, rs, strict=True) if r > 0}))
    ent_sum = sum(float(gen.entropy.sum()) for gen in sampled)  # float32 sum per call, as logged since 0.1
    tok_sum = sum(float(gen.mask.sum()) for gen in sampled)
    g = [task.reward(p, t) for p, t in zip(problems, (t for gen in greedy_runs for t in gen.texts), strict=True)]
    return {
        "acc": sum(rewards) / len(rewards),
        "acc_greedy": sum(g) / len(g),
        "entropy": ent_sum / max(tok_sum, 1.0),
        "pass@k": sum(pass_k) / len(pass_k),
        "distinct_correct": sum(distinct) / len(distinct),
        "response_len": tok_sum / len(rewards),
        "k": k,
        "n_problems": len(problems),
    }


def validate_policy(model, tokenizer, task, cfg: TrainConfig, step: int) -> dict[str, float]:
    """Held-out accuracy at temperature 1 over ``eval_k`` samples (avg@k, pass@k), greedy
    accuracy, entropy and distinct correct answers, as ``val/*`` metrics."""
    res = evaluate(
        model,
        tokenizer,
        task,
        task.validation_set(),
        k=cfg.eval_k,
        temperature=cfg.temperature,
        greedy=True,
        seed=seeds.stream_seed(cfg.seed, seeds.VALIDATION, step),
    )
    out = {f"val/{k}": float(v) for k, v in res.items() if k not in ("k", "n_problems") and v is not None}
    if hasattr(task, "hard_set"):  # avg@k on the harder held-out split (docs/regime.md); own seed, own RNG fork
        out["val/hard_acc"] = float(evaluate_hard_set(model, tokenizer, task, cfg, step)["acc"])
    return out


def evaluate_hard_set(
    model: Any, tokenizer: Any, task: Any, cfg: TrainConfig, step: int, stream: int = seeds.HARD_SET
) -> dict[str, float]:
    """The metrics of :func:`evaluate` (avg@k as ``acc``, pass@k, …) on the
    task's harder held-out split ``task.hard_set()`` (docs/regime.md): ``eval_k`` samples per problem
    at the training temperature, under a forked RNG seeded by ``stream`` at ``step``
    (:mod:`entflow.trainer.seeds`: ``HARD_SET`` for the lab's ``val/hard_acc``, ``REGIME_HARD_SET``
    for the regime experiment's ``hard/*``)."""
    return evaluate(
        model,
        tokenizer,
        task,
        task.hard_set(),
        k=cfg.eval_k,
        temperature=cfg.temperature,
        seed=seeds.stream_seed(cfg.seed, stream, step),
    )


def coverage_splits(model, tokenizer, task, cfg: TrainConfig) -> dict[str, dict[str, Any]]:
    """Pass@k curves of the policy on the validation split and, when the task has ``hard_set()``,
    the hard split (:func:`entflow.trainer.evaluate.coverage_curves`, up to 512 rows per
    ``generate`` call)."""
    from entflow.trainer.evaluate import coverage_curves

    return coverage_curves(model, tokenizer, task, cfg, batch_size=512)


# --------------------------------------------------------------------------------------------
# entflow eval RUN_DIR


def eval_settings(path, task_name: str | None = None, temperature: float | None = None):
    """(policy directory, task, temperature) for ``entflow eval PATH``.

    A run directory is scored on exactly the task it trained on — its ``task`` *and*
    ``task_params`` from ``config.yaml`` — at its sampling ``temperature``, using
    ``checkpoints/final``; ``task_name`` / ``temperature`` override (a different task name drops the
    run's task_params). A bare policy directory uses ``task_name`` (default countdown) at
    temperature 1 unless given.
    """
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


@dataclass
class LabEvaluation:
    """What ``entflow eval RUN_DIR`` measured: the policy, its task, the settings and
    :func:`evaluate`'s metrics."""

    policy_dir: Path
    task: LabTask
    k: int
    temperature: float
    metrics: dict[str, float]

    def heading(self) -> str:
        return (
            f"{self.policy_dir}: {self.task!r}, {self.metrics['n_problems']} held-out prompts, k={self.k}, "
            f"temperature {self.temperature:g}"
        )

    def table(self) -> Any:
        """The metrics as a rich table (avg@k, unbiased pass@k, greedy accuracy, …)."""
        from rich.table import Table

        names = {"acc": f"avg@{self.k}", "pass@k": f"pass@{self.k} (unbiased)", "acc_greedy": "greedy accuracy"}
        table = Table()
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key, v in self.metrics.items():
            if key not in ("k", "n_problems"):
                table.add_row(names.get(key, key), f"{v:.4f}")
        return table


def evaluate_run(
    path: str | Path, task: str | None = None, k: int = 8, seed: int = 0, temperature: float | None = None
) -> LabEvaluation:
    """A lab run's final policy (or a saved lab policy) on its task's held-out set
    (:func:`eval_settings`, then :func:`evaluate` with ``k`` samples per problem, seeded)."""
    from entflow.lab.policy import load_policy

    if k < 1:
        raise ConfigError("k", f"must be >= 1, got {k}")
    policy_dir, lab_task, temp = eval_settings(path, task, temperature)
    model, tok = load_policy(policy_dir)
    torch.manual_seed(seed)
    res = evaluate(model, tok, lab_task, lab_task.validation_set(), k=k, temperature=temp, seed=seed)
    return LabEvaluation(policy_dir, lab_task, k, temp, res)
