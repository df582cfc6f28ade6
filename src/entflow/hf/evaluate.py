"""Evaluation of a real model on held-out problems (docs/design.md §11): avg@k, pass@k, maj@k, greedy.

For each of ``n`` problems, ``n_samples`` (≥ k) responses are sampled with explicit settings
(temperature, top-p, top-k, max_new_tokens, seed) plus one greedy response, all through the one
generation path, :func:`entflow.trainer.evaluate.generate_in_batches` (batched, left-padded
``generate`` with a KV cache; vLLM instead when it is installed and a GPU is present — a path
this project has not run yet). Per problem i with c_i correct of n_samples:

- ``avg@k``   = c_i / n_samples (mean accuracy of a sample);
- ``pass@k``  = 1 − C(n_samples − c_i, k) / C(n_samples, k) (the unbiased estimator of
  Chen et al. 2021, "Evaluating Large Language Models Trained on Code", Eq. 1);
- ``maj@k``   = 1 if the most frequent *parsed* answer among the first k samples is correct
  (answers are grouped by symbolic equality with math-verify, or by exact text for tasks
  without a math reward; unparseable responses do not vote; ties go to the answer seen first);
- ``greedy``  = the greedy response's reward.

The metric helpers (``pass_at_k``, ``majority_correct``, ``mean_and_se``) live in
:mod:`entflow.trainer.evaluate`, shared with the lab. Each is averaged over problems and reported
with its standard error (sample standard deviation
of the per-problem values / √n). Also: mean response length (tokens, eos included), mean token
entropy of the sampled responses (full-vocabulary entropy of the temperature-scaled softmax the
token was drawn from, nats), the truncation rate (the share of sampled responses that hit
``max_new_tokens`` without ending in eos), the fraction of sampled responses with no parseable
answer, and samples per second of sampling wall time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from entflow.core.rules import above, at_least, in_range
from entflow.errors import ConfigError
from entflow.trainer.config import check_keys, setting
from entflow.trainer.evaluate import generate_in_batches, majority_correct, mean_and_se, pass_at_k
from entflow.trainer.progress import ProgressBar

__all__ = [
    "EvalResult",
    "SamplingConfig",
    "evaluate_task",
    "generate_batched",
    "run_eval",
]


@dataclass
class SamplingConfig:
    """Explicit sampling settings (``top_k=0`` and ``top_p=1`` mean no truncation)."""

    temperature: float = setting(1.0, "sampling temperature", allowed=above(0))
    top_p: float = setting(
        1.0,
        "nucleus sampling: the smallest set of tokens whose probability reaches top_p (1: off)",
        allowed=in_range(0, 1, lo_open=True),
    )
    top_k: int = setting(0, "sample among the top_k most probable tokens (0: off)", allowed=at_least(0))
    max_new_tokens: int = setting(256, "response length limit in tokens", allowed=at_least(1))
    seed: int = setting(0, "sampling seed")
    batch_size: int = setting(32, "sequences per generate call", allowed=at_least(1))
    # the same responses up to float round-off, the prefill's cost divided by the samples per problem
    share_prompts: bool = setting(
        True, "prefill each problem's prompt once for its samples (entflow.trainer.shared_prompts)"
    )

    def validate(self) -> None:
        check_keys(self)


@dataclass
class EvalSamples:
    """What an evaluation sampled: the decoded responses, their lengths and summed entropies, and
    the wall time (the rows of :class:`entflow.trainer.rollout.Generation`, reduced to numbers)."""

    texts: list[str]  # [N]
    lengths: list[int]  # [N] response tokens, eos included
    entropy: list[float]  # [N] summed token entropy over the response (nan if unknown)
    seconds: float
    truncated: list[bool] | None = None  # [N] hit max_new_tokens without an eos (None: unknown)


def generate_batched(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    n: int,
    sampling: SamplingConfig,
    greedy: bool = False,
    on_batch: Callable[[int], None] | None = None,
) -> EvalSamples:
    """``n`` responses per prompt (rows ``i*n … i*n+n−1`` belong to prompt i), batched by
    ``sampling.batch_size`` rows, left-padded, KV cache; reproducible from ``sampling.seed``
    (:func:`entflow.trainer.evaluate.generate_in_batches`, the one generation path)."""
    t0 = time.perf_counter()
    runs = generate_in_batches(
        model,
        tokenizer,
        prompts,
        n,
        sampling.max_new_tokens,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        greedy=greedy,
        batch_size=sampling.batch_size,
        seed=sampling.seed,
        share_prompts=sampling.share_prompts,
        on_batch=on_batch,
    )
    texts = [t for gen in runs for t in gen.texts]
    lengths = [int(v) for gen in runs for v in gen.mask.sum(-1).cpu()]
    entropy = [float(v) for gen in runs for v in gen.entropy.sum(-1).cpu()]
    truncated = [t for gen in runs for t in _truncated(gen, sampling.max_new_tokens, tokenizer.eos_token_id)]
    return EvalSamples(texts, lengths, entropy, time.perf_counter() - t0, truncated)


def _truncated(gen: Any, max_new_tokens: int, eos_id: int | None) -> list[bool]:
    """Per row of a :class:`~entflow.trainer.rollout.Generation`: True when the response used all
    ``max_new_tokens`` tokens and its last one is not eos (it was cut, not finished)."""
    lengths = gen.mask.sum(-1).long().cpu()
    ids = gen.response_ids.cpu()
    out = []
    for row, n in enumerate(lengths.tolist()):
        out.append(n >= max_new_tokens and (eos_id is None or int(ids[row, n - 1]) != eos_id))
    return out


def _vllm_usable() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def _generate_vllm(
    model_path: str, prompts: Sequence[str], n: int, sampling: SamplingConfig, greedy: bool
) -> EvalSamples:
    """vLLM rollouts (GPU only; not yet run in this project). Token entropy is not
    available from vLLM's top-logprobs, so it is reported as NaN."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_path, seed=sampling.seed)
    params = SamplingParams(
        n=1 if greedy else n,
        temperature=0.0 if greedy else sampling.temperature,
        top_p=1.0 if greedy else sampling.top_p,
        top_k=-1 if greedy or sampling.top_k == 0 else sampling.top_k,
        max_tokens=sampling.max_new_tokens,
        seed=sampling.seed,
    )
    t0 = time.perf_counter()
    outs = llm.generate(list(prompts), params)
    texts, lengths, truncated = [], [], []
    for o in outs:
        for c in o.outputs * (n if greedy else 1):
            texts.append(c.text)
            lengths.append(len(c.token_ids))
            truncated.append(c.finish_reason == "length")
    return EvalSamples(texts, lengths, [math.nan] * len(texts), time.perf_counter() - t0, truncated)


@dataclass
class EvalResult:
    metrics: dict[str, tuple[float, float]]  # name -> (value, standard error)
    extras: dict[str, float]  # response length, entropy, unparseable fraction, samples/s, wall time
    settings: dict[str, Any]
    samples: list[dict[str, Any]]
    # name -> [n_problems] per-problem values of avg@k, pass@k, maj@k (greedy: its reward)
    per_problem: dict[str, list[float]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "metrics": {k: {"value": v, "se": se} for k, (v, se) in self.metrics.items()},
            **self.extras,
            "samples": self.samples,
        }

    def table(self) -> Any:
        """The metrics as a rich table, each with its standard error, then the extras
        (``entflow eval --model``)."""
        from rich.markup import escape
        from rich.table import Table

        s = self.settings
        table = Table(
            title=escape(
                f"{s['model']} on {s['data']}: {s['n_problems']} problems × {s['n_samples']} samples "
                f"(T={s['temperature']}, top_p={s['top_p']}, top_k={s['top_k']}, max_new_tokens={s['max_new_tokens']})"
            )
        )
        table.add_column("metric")
        table.add_column("value", justify="right")
        table.add_column("± s.e.", justify="right")
        for name, (v, se) in self.metrics.items():
            table.add_row(name, f"{v:.3f}", f"{se:.3f}")
        e = self.extras
        table.add_row("mean response length (tokens)", f"{e['response_len']:.1f}", "")
        table.add_row("token entropy (nats)", f"{e['token_entropy']:.3f}", "")
        table.add_row("unparseable fraction", f"{e['unparseable_frac']:.3f}", "")
        table.add_row("samples / s", f"{e['samples_per_s']:.2f}", "")
        errors = f"{e.get('reward_errors', 0):.0f} / {e.get('reward_timeouts', 0):.0f}"
        table.add_row("reward errors / timeouts", errors, "")
        return table


def _answer_parser(task: Any) -> tuple[Callable[[str], Any], Callable[[Any, Any], bool]]:
    """How responses are parsed for maj@k and 'unparseable': math-verify for math rewards, the
    final number (or boxed content) for exact match, the stripped text otherwise."""
    from entflow.hf.rewards import answers_equal, exact_match_reward, final_answer, parse_answer

    name = getattr(task.reward_fn, "name", "")
    if "math_verify" in name:
        return (lambda t: parse_answer(t) or None), answers_equal
    if "exact_match" in name:
        return final_answer, (lambda a, b: exact_match_reward([a], answer=[b]) == [1.0])
    return (lambda t: t.strip() or None), (lambda a, b: a == b)


def evaluate_task(
    model: Any,
    tokenizer: Any,
    task: Any,
    problems: Sequence[Any],
    k: int,
    n_samples: int | None = None,
    sampling: SamplingConfig | None = None,
    greedy: bool = True,
    progress: bool = False,
    model_path: str | None = None,
    keep_samples: int = 8,
) -> EvalResult:
    """Metrics of the module docstring for ``problems`` of a :class:`~entflow.hf.data.ChatTask`."""
    sampling, n_samples = _checked_settings(k, n_samples, sampling)
    if not problems:
        raise ConfigError("n", "no problems to evaluate")
    prompts = [p.prompt for p in problems]
    use_vllm = model_path is not None and _vllm_usable()
    bar = ProgressBar(progress, unit="sample")
    bar.add("generating", total=len(prompts) * (n_samples + int(greedy)))

    def advance(rows: int) -> None:
        bar.update(advance=rows)

    try:
        if use_vllm:  # pragma: no cover - GPU only
            gen = _generate_vllm(model_path, prompts, n_samples, sampling, False)
            g_gen = _generate_vllm(model_path, prompts, 1, sampling, True) if greedy else None
        else:
            gen = generate_batched(model, tokenizer, prompts, n_samples, sampling, on_batch=advance)
            g_gen = generate_batched(model, tokenizer, prompts, 1, sampling, True, advance) if greedy else None
    finally:
        bar.close()

    t_score = time.perf_counter()
    rewards = task.rewards([p for p in problems for _ in range(n_samples)], gen.texts)
    parse, same = _answer_parser(task)
    parsed = [parse(t) for t in gen.texts]
    avg, passk, maj = [], [], []
    for i in range(len(problems)):
        r = rewards[i * n_samples : (i + 1) * n_samples]
        c = sum(1 for v in r if v > 0)
        avg.append(sum(r) / n_samples)
        passk.append(pass_at_k(n_samples, c, k))
        maj.append(majority_correct(parsed[i * n_samples : i * n_samples + k], r[:k], same))
    metrics = {f"avg@{k}": mean_and_se(avg), f"pass@{k}": mean_and_se(passk), f"maj@{k}": mean_and_se(maj)}
    per_problem = {f"avg@{k}": avg, f"pass@{k}": passk, f"maj@{k}": maj}
    if g_gen is not None:
        per_problem["greedy"] = task.rewards(list(problems), g_gen.texts)
        metrics["greedy"] = mean_and_se(per_problem["greedy"])
    n_tok = sum(gen.lengths)
    extras = {
        "response_len": n_tok / len(gen.lengths),
        "token_entropy": sum(gen.entropy) / max(n_tok, 1),
        "truncated_frac": sum(gen.truncated) / len(gen.truncated) if gen.truncated is not None else math.nan,
        "unparseable_frac": sum(1 for a in parsed if a is None) / len(parsed),
        "samples_per_s": len(gen.texts) / gen.seconds if gen.seconds > 0 else math.nan,
        "sampling_s": gen.seconds,
        "greedy_s": g_gen.seconds if g_gen is not None else 0.0,
        "scoring_s": time.perf_counter() - t_score,
        **{f"reward_{k_}": float(v) for k_, v in task.reward_fn.pop_counts().items()},
    }
    samples = [
        {
            "prompt": problems[i // n_samples].answer.prompt,
            "answer": problems[i // n_samples].answer.answer,
            "response": gen.texts[i],
            "reward": rewards[i],
        }
        for i in range(0, min(len(gen.texts), keep_samples * n_samples), n_samples)
    ]
    settings = {
        "k": k,
        "n_samples": n_samples,
        "n_problems": len(problems),
        "greedy": greedy,
        "backend": "vllm" if use_vllm else "transformers",
        **asdict(sampling),
    }
    return EvalResult(metrics, extras, settings, samples, per_problem)


def _checked_settings(k: int, n_samples: int | None, sampling: SamplingConfig | None) -> tuple[SamplingConfig, int]:
    """Validated (sampling, n_samples): k ≥ 1 and k ≤ n_samples (default k)."""
    sampling = sampling or SamplingConfig()
    sampling.validate()
    n_samples = k if n_samples is None else n_samples
    if not isinstance(k, int) or k < 1:
        raise ConfigError("k", f"must be an integer >= 1, got {k!r}")
    if n_samples < k:
        raise ConfigError("k", f"k={k} exceeds n_samples={n_samples} (samples per problem)")
    return sampling, n_samples


def run_eval(
    model: str,
    data: str,
    n: int = 100,
    k: int = 4,
    n_samples: int | None = None,
    sampling: SamplingConfig | None = None,
    greedy: bool = True,
    system_prompt: str | None = None,
    prompt_suffix: str | None = None,
    reward: str | None = None,
    allow_hub: bool = False,
    data_params: dict[str, Any] | None = None,
    progress: bool = True,
) -> EvalResult:
    """Load ``model`` and ``data``, evaluate the first ``n`` held-out problems. Every argument is
    checked (model path, data fields, k ≤ n_samples, n ≤ held-out size) before generation."""
    from entflow.hf.data import ChatTask, load_data
    from entflow.hf.models import load_model, resolve_model

    sampling, n_samples = _checked_settings(k, n_samples, sampling)
    if not isinstance(n, int) or n < 1:
        raise ConfigError("n", f"must be an integer >= 1, got {n!r}")
    params = dict(data_params or {})
    if isinstance(data, str) and "val_size" not in params:
        params["val_size"] = n if not Path(data).exists() else None
    prompts_data = load_data(data, allow_hub=allow_hub, **params)
    if n > len(prompts_data.validation):
        raise ConfigError("n", f"{n} problems requested, {prompts_data.name} holds {len(prompts_data.validation)}")
    if reward is not None:
        from entflow.hf.rewards import get_reward

        get_reward(reward)  # unknown names fail here, before the model loads
    resolve_model(model, allow_hub=allow_hub)  # a missing model fails before any loading
    t0 = time.perf_counter()
    policy, tokenizer = load_model(model, allow_hub=allow_hub)
    load_s = time.perf_counter() - t0
    task = ChatTask(prompts_data, tokenizer, sampling.max_new_tokens, system_prompt, prompt_suffix, reward, val_size=n)
    res = evaluate_task(
        policy,
        tokenizer,
        task,
        task.validation_set(),
        k,
        n_samples,
        sampling,
        greedy,
        progress,
        model_path=resolve_model(model, allow_hub=allow_hub),
    )
    res.settings.update(
        model=model,
        data=prompts_data.name,
        reward=task.reward_fn.name,
        system_prompt=system_prompt,
        prompt_suffix=task.suffix,
        data_params=data_params or {},
    )
    res.extras["load_s"] = load_s
    return res
