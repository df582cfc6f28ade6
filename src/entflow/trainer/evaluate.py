"""Evaluation shared by the lab and real models: one pass@k, the per-problem metric helpers, and
seeded, batched sampling of held-out problems through the one generation path
(:func:`entflow.trainer.rollout.generate`).

Per problem with ``c`` correct of ``n`` samples:

- avg@k = c / n (mean accuracy of a sample);
- pass@k = 1 − C(n − c, k) / C(n, k), the unbiased estimator of Chen et al. 2021 ("Evaluating
  Large Language Models Trained on Code", Eq. 1), computed as the product
  ``1 − Π_{i=n−c+1}^{n} (1 − k / i)`` (their numerically stable form: no binomials, no overflow);
- maj@k: whether the most frequent parsed answer is correct (:func:`majority_correct`).

Means over problems come with their standard error (:func:`mean_and_se`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from entflow.errors import ConfigError
from entflow.trainer.rollout import generate
from entflow.trainer.seeds import COVERAGE, stream_seed

if TYPE_CHECKING:
    from entflow.trainer.rollout import Generation

__all__ = [
    "coverage_curves",
    "generate_in_batches",
    "majority_correct",
    "mean_and_se",
    "pass_at_k",
    "pass_at_k_curve",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: 1 − C(n−c, k)/C(n, k).

    1 when n − c < k (every k-subset holds a correct sample), 0 when c = 0."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ConfigError("k", f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # Chen et al. 2021 Eq. 1, as their stable product: C(n−c, k)/C(n, k) = Π_{i=n−c+1}^{n} (1 − k/i)
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_curve(n: int, c: int | Sequence[int], ks: Sequence[int] | None = None) -> dict[int, float]:
    """Unbiased pass@k (:func:`pass_at_k`) at each k of ``ks`` (default 1, 2, 4, …, the largest
    power of 2 ≤ n), from ``n`` samples per problem; ``c`` is one problem's correct count or the
    counts of several problems ``[P]``, whose pass@k is averaged. Returns ``{k: pass@k}``."""
    counts = [c] if isinstance(c, int) else list(c)
    if not counts:
        raise ConfigError("c", "pass@k curve needs at least one problem's correct count")
    if ks is None:
        ks = [2**i for i in range(n.bit_length())] if n >= 1 else []
    return {k: sum(pass_at_k(n, ci, k) for ci in counts) / len(counts) for k in ks}


def mean_and_se(values: Sequence[float]) -> tuple[float, float]:
    """Mean and its standard error (sample std with ddof 1 / √n; 0 for a single value)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def majority_correct(
    answers: Sequence[Any | None], rewards: Sequence[float], same: Callable[[Any, Any], bool]
) -> float:
    """1.0 if the most frequent answer (``None`` = unparseable, no vote) was rewarded, else 0.0.

    Answers are grouped with ``same``; a group's reward is that of its first member; ties go to
    the group seen first."""
    groups: list[list[int]] = []
    for i, a in enumerate(answers):
        if a is None:
            continue
        for g in groups:
            if same(answers[g[0]], a):
                g.append(i)
                break
        else:
            groups.append([i])
    if not groups:
        return 0.0
    best = max(groups, key=len)  # max keeps the first of equal lengths
    return 1.0 if rewards[best[0]] > 0 else 0.0


@torch.no_grad()
def generate_in_batches(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    n: int,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    greedy: bool = False,
    batch_size: int = 32,
    seed: int | None = None,
    record_entropy: bool = True,
    on_batch: Callable[[int], None] | None = None,
    share_prompts: bool = False,
) -> list[Generation]:
    """``n`` responses per prompt (rows ``i*n … i*n+n−1`` belong to prompt i; greedy decodes each
    prompt once and repeats its row ``n`` times), ``max(1, batch_size // n)`` prompts per
    :func:`~entflow.trainer.rollout.generate` call (``batch_size`` prompts when greedy), with the
    sampled law's token entropy recorded unless ``record_entropy=False`` (``Generation.entropy`` is then None).

    Runs in eval mode (the mode is restored after) and, with a ``seed``, under a forked RNG seeded
    with it (the caller's RNG is untouched); ``seed=None`` draws from the global RNG. Returns one
    :class:`~entflow.trainer.rollout.Generation` per call; ``on_batch(rows)`` after each.
    ``share_prompts``: each prompt's prefill runs once for its ``n`` rows and the prompts' common
    prefix once per call (``generate``'s option)."""
    per_call = max(1, batch_size // (1 if greedy else n))  # greedy decodes each prompt once
    out: list[Generation] = []
    was_training = model.training
    model.eval()
    try:
        with torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            for s in range(0, len(prompts), per_call):
                gen = generate(
                    model,
                    tokenizer,
                    prompts[s : s + per_call],
                    max_new_tokens,
                    n=1 if greedy else n,
                    temperature=temperature,
                    top_k=top_k,
                    top_p=top_p,
                    greedy=greedy,
                    record_entropy=record_entropy,
                    share_prompts=share_prompts,
                )
                if greedy and n > 1:
                    gen = _repeat_rows(gen, n)
                out.append(gen)
                if on_batch is not None:
                    on_batch(len(gen.texts))
    finally:
        model.train(was_training)
    return out


def _repeat_rows(gen: Generation, n: int) -> Generation:
    """Each row of ``gen`` ``n`` times in a row (greedy responses standing in for n samples)."""

    def rep(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x.repeat_interleave(n, 0)

    tensors = ("prompt_ids", "prompt_mask", "response_ids", "mask", "logits", "entropy")
    return dataclasses.replace(
        gen, texts=[t for t in gen.texts for _ in range(n)], **{f: rep(getattr(gen, f)) for f in tensors}
    )


def coverage_seed(cfg: Any) -> int:
    """The seed of a run's coverage sampling: its ``coverage_seed`` key where it has one that is
    set (a real run's; then every run seed shares one warm-start evaluation), else the run's seed."""
    fixed = getattr(cfg, "coverage_seed", None)
    return cfg.seed if fixed is None else int(fixed)


def coverage_curves(
    model: Any,
    tokenizer: Any,
    task: Any,
    cfg: Any,
    batch_size: int = 512,
    share_prompts: bool = False,
    val_problems: Sequence[Any] | None = None,
    greedy: bool = False,
) -> dict[str, dict[str, Any]]:
    """Pass@k curves of the policy (a run's coverage, ``coverage.json``): ``cfg.coverage_n``
    samples per problem at ``cfg.temperature`` on the validation split (``"val"``) and, when the
    task has ``hard_set()``, the hard split (``"hard"``), through :func:`generate_in_batches`
    (``batch_size`` rows per call at most, one prompt's ``n`` rows at least). Seeded per split, not
    per step, so the warm start and the final policy see the same seeds (``share_prompts``: each
    problem's prefill once for its ``n`` samples, a real model's option). Per split:
    ``n_problems``, ``correct`` (correct count per problem ``[P]``) and ``pass_at_k`` (``{k:
    unbiased pass@k averaged over problems}``, k = ``cfg.coverage_k`` or 1, 2, 4, …, up to n;
    :func:`pass_at_k_curve`). The lab and real models share it (``RunSetup.coverage``).

    ``val_problems``: the validation split's problems (default: ``task.validation_set()``).
    ``greedy``: also decode each problem once greedily, under its own seed stream, and add
    ``greedy_correct`` (``[P]``, 0 or 1) to each split."""
    n = cfg.coverage_n
    splits = {"val": list(task.validation_set() if val_problems is None else val_problems)}
    if hasattr(task, "hard_set"):
        splits["hard"] = task.hard_set()
    out: dict[str, dict[str, Any]] = {}
    for i, (name, problems) in enumerate(splits.items()):
        gens = generate_in_batches(
            model,
            tokenizer,
            [p.prompt for p in problems],
            n,
            task.max_response_len,
            temperature=cfg.temperature,
            batch_size=batch_size,
            seed=stream_seed(coverage_seed(cfg), COVERAGE, i),
            record_entropy=False,
            share_prompts=share_prompts,
        )
        texts = [t for gen in gens for t in gen.texts]
        correct = [sum(task.reward(p, t) > 0 for t in texts[j * n : (j + 1) * n]) for j, p in enumerate(problems)]
        curve = pass_at_k_curve(n, correct, cfg.coverage_k)
        pass_k = {str(k): v for k, v in curve.items()}  # JSON keys are strings
        out[name] = {"n_problems": len(problems), "correct": correct, "pass_at_k": pass_k}
        if greedy:
            g = generate_in_batches(
                model,
                tokenizer,
                [p.prompt for p in problems],
                1,
                task.max_response_len,
                greedy=True,
                batch_size=batch_size,
                seed=stream_seed(coverage_seed(cfg), COVERAGE, len(splits) + i),
                record_entropy=False,
            )
            g_texts = [t for gen in g for t in gen.texts]
            out[name]["greedy_correct"] = [int(task.reward(p, t) > 0) for p, t in zip(problems, g_texts, strict=True)]
    return out
