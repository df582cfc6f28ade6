"""Rollouts: the one generation path of entflow, and the token statistics of responses (docs/design.md §10).

:func:`generate` is the single place where a policy samples (or greedily decodes) responses:
left-padded prompts, batched ``generate`` with a KV cache, explicit sampling warpers
(temperature, top-k, top-p) and, on request, ``generate``'s raw per-step logits and the entropy
of the distribution each token was drawn from. The trainer's rollout (:func:`sample_rollout`),
the lab's validation and the evaluation of real models all call it.

:func:`response_logits` / :func:`response_token_stats` re-score responses with one forward over
``[prompt | response]`` whose positions follow the attention mask, exactly as ``generate`` saw them
(``response_token_stats(hidden_stats=True)``: from the last hidden state, without the logits).
"""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from entflow.core.hidden_stats import token_stats_from_hidden
from entflow.core.lm_head import hidden_head_reason, last_hidden_state
from entflow.core.nucleus import topp_entropy
from entflow.core.token_stats import TokenStats, entropy_from_logits, token_stats
from entflow.core.topk import topk_logprobs
from entflow.trainer.config import TrainConfig, rollout_mismatch_spec
from entflow.trainer.few_row_linear import few_row_linears
from entflow.trainer.grouped_kv import grouped_kv_attention
from entflow.trainer.seeds import RANDOM_REWARD, STEP, stream_seed
from entflow.trainer.seeds import step_seed as step_seed  # its 0.2 path, kept importable
from entflow.trainer.shared_prompts import cache_kwarg, prompt_cache, shared_response_forward, worth_sharing
from entflow.trainer.tokens import decode_responses, encode_prompts, position_ids_from_mask, response_mask

# --------------------------------------------------------------------------------------------
# The one generation path
# --------------------------------------------------------------------------------------------


@dataclass
class Generation:
    """Responses of one batched ``generate`` call; token tensors are ``[N, T]`` over response positions."""

    prompt_ids: torch.Tensor  # [N, Lp] left-padded, on the model's device
    prompt_mask: torch.Tensor  # [N, Lp]
    response_ids: torch.Tensor  # [N, T] pad after the first eos
    mask: torch.Tensor  # [N, T] float, 1 up to and including the first eos
    texts: list[str]  # [N] decoded responses (cut at eos)
    logits: torch.Tensor | None = None  # [N, T, V] raw logits of each step (output_logits)
    entropy: torch.Tensor | None = None  # [N, T] entropy of the law each token was drawn from, 0 off mask


class _EntropyRecorder:
    """A logits processor that records, per generation step, the entropy ``[N]`` of the
    distribution the token is drawn from. :func:`generate` runs it after its own warpers
    (``generate`` in transformers 5 would put its warpers *after* user processors)."""

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.steps.append(entropy_from_logits(scores.float()))  # −inf (truncated) tokens add nothing
        return scores


@dataclass(frozen=True)
class SamplingMismatch:
    """A rollout–training mismatch injected into the sampler (``TrainConfig.rollout_mismatch``): the
    law the rollout is drawn from is the model's logits ``z`` perturbed, before the temperature and
    the other warpers, while the trainer scores the tokens with ``z`` itself.

    ``temperature``: ``z / value`` (the sampler runs at ``value`` × the training temperature, as an
    engine whose sampling temperature differs from the trainer's); ``quantize``: ``round(z / value)
    · value`` (logits on a grid of step ``value``, as a low-precision engine). Also a logits processor
    (``generate`` runs it first).
    """

    kind: str
    value: float

    def perturb(self, logits: torch.Tensor) -> torch.Tensor:
        """The sampler's logits from the model's (any shape, the vocabulary last)."""
        if self.kind == "temperature":
            return logits / self.value
        return torch.round(logits / self.value) * self.value

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return self.perturb(scores)


def sampling_mismatch(spec: dict[str, Any] | None) -> SamplingMismatch | None:
    """The :class:`SamplingMismatch` of ``TrainConfig.rollout_mismatch`` (None: none); a bad spec
    raises :class:`~entflow.errors.ConfigError` naming ``rollout_mismatch``."""
    checked = rollout_mismatch_spec(spec)
    return None if checked is None else SamplingMismatch(*checked)


def engine_logp(
    logits: torch.Tensor,
    response_ids: torch.Tensor,
    temperature: float,
    mismatch: SamplingMismatch | None,
    chunk_size: int | None = None,
) -> torch.Tensor:
    """``[N, T]``: the log-probabilities of the drawn tokens under the law the sampler drew them from,
    softmax(perturbed raw logits / temperature) (the rollout's ``rollout_logp``); with no mismatch,
    the trainer's own."""
    z = logits if mismatch is None else mismatch.perturb(logits)
    return token_stats(z, response_ids, temperature=temperature, chunk_size=chunk_size, stats=("logp",)).logp


def sampling_warpers(temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0) -> list[Any]:
    """transformers' warpers for temperature, top-k (0 = off) and top-p (1 = off), in ``generate``'s order."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    warpers: list[Any] = []
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k > 0:
        warpers.append(TopKLogitsWarper(top_k))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


@torch.no_grad()
def generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    max_new_tokens: int,
    *,
    n: int = 1,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    greedy: bool = False,
    output_logits: bool = False,
    record_entropy: bool = False,
    share_prompts: bool = False,
    mismatch: SamplingMismatch | None = None,
) -> Generation:
    """``n`` responses per prompt (rows ``i*n … i*n+n−1`` belong to prompt i), sampled at
    ``temperature`` with ``top_k`` / ``top_p`` (greedy decoding with ``greedy``; the warpers are
    then unused). Prompts are encoded once and their rows repeated: the same tensors as encoding
    each prompt ``n`` times.

    The warpers run in the order temperature → top-k → top-p and ``generate``'s own are off, so the
    sampled law is exactly softmax(warped logits). ``output_logits`` keeps ``generate``'s raw
    (unwarped) logits ``[N, T, V]``; ``record_entropy`` keeps the entropy ``[N, T]`` of the warped law
    (O(N·T) memory). ``share_prompts``: each prompt's prefill runs once and its KV cache serves
    its ``n`` rows, and the prompts' common prefix runs once in all
    (:mod:`entflow.trainer.shared_prompts`; the same logits up to float round-off). Decoding runs
    under :func:`~entflow.trainer.few_row_linear.few_row_linears` (on a CPU, the linear layers'
    few rows per step as ``W @ xᵀ``; the same logits to round-off) and
    :func:`~entflow.trainer.grouped_kv.grouped_kv_attention` (on a CPU, grouped key/value heads read
    in place instead of copied per query head; the same logits bit for bit).
    ``mismatch``: the sampler's law is the logits perturbed first (:class:`SamplingMismatch`, an
    injected rollout–training mismatch); the raw logits kept by ``output_logits`` stay the model's.
    The caller sets the mode (``model.eval()``) and the RNG.
    """
    from transformers import LogitsProcessorList

    device = next(model.parameters()).device
    once = {k: v.to(device) for k, v in encode_prompts(tokenizer, list(prompts)).items()}
    enc = {k: v.repeat_interleave(n, 0) for k, v in once.items()}
    inputs, shared = enc, {}
    # generate runs the last prompt token; the rest is cached once per prompt and common prefix
    ids, mask = once["input_ids"], once["attention_mask"]
    if share_prompts and ids.shape[1] >= 2 and (n > 1 or worth_sharing(ids, mask)):
        cached = prompt_cache(model, ids, mask, repeats=n)
        inputs = {"input_ids": cached.prompt_ids, "attention_mask": cached.prompt_mask}  # the cache's layout
        shared[cache_kwarg(model)] = cached.cache
    recorder = _EntropyRecorder() if record_entropy else None
    processors = [] if greedy else sampling_warpers(temperature, top_k, top_p)
    if mismatch is not None:  # the engine's perturbation comes before every warper
        processors.insert(0, mismatch)
    if recorder is not None:
        processors.append(recorder)
    # generate's own warpers off (ours run above, in order); greedy decoding takes no warper at all
    mode: dict[str, Any] = (
        {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}
    )
    # each decoding step's few rows: W @ xᵀ on a CPU (few_row_linear.py); K, V not copied per head (grouped_kv.py)
    with few_row_linears(model), grouped_kv_attention(model):
        out = model.generate(
            **inputs,
            **mode,
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            logits_processor=LogitsProcessorList(processors),
            output_logits=output_logits,
            return_dict_in_generate=True,
            use_cache=True,
            **shared,
        )
    seq = out.sequences
    response_ids = seq[:, enc["input_ids"].shape[1] :]
    # generate's raw per-step logits are the policy's: same tokens, attention and positions as a
    # separate full forward (rows that finished are fed pad, masked below)
    logits = torch.stack(out.logits, dim=1) if output_logits and out.logits else None
    if response_ids.shape[1] == 0:  # nothing generated at all: one eos column keeps shapes valid
        response_ids = torch.full((seq.shape[0], 1), tokenizer.eos_token_id, dtype=seq.dtype, device=seq.device)
    mask = response_mask(tokenizer, response_ids)
    response_ids = response_ids.masked_fill(mask == 0, tokenizer.pad_token_id)
    entropy = None
    if recorder is not None:
        entropy = torch.stack(recorder.steps, dim=1) * mask if recorder.steps else torch.zeros_like(mask)
    texts = decode_responses(tokenizer, response_ids.cpu())
    return Generation(enc["input_ids"], enc["attention_mask"], response_ids, mask, texts, logits, entropy)


# --------------------------------------------------------------------------------------------
# The trainer's rollout
# --------------------------------------------------------------------------------------------


@dataclass
class Rollout:
    """P·G sampled responses. Token tensors are ``[N, T]`` over response positions."""

    prompt_ids: torch.Tensor  # [N, Lp] left-padded
    prompt_mask: torch.Tensor  # [N, Lp]
    response_ids: torch.Tensor  # [N, T] right-padded (pad after eos)
    mask: torch.Tensor  # [N, T] 1 on response tokens up to and including eos
    texts: list[str]
    rewards: torch.Tensor  # [N]
    group_index: torch.Tensor  # [N]
    prompts: list[str]
    verify_s: float = 0.0  # wall time spent in the task's verifier (part of sample_rollout)
    # [N, T, V] raw logits (before temperature) generate computed for each response position, or None
    logits: torch.Tensor | None = None

    def select(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        return {
            "prompt_ids": self.prompt_ids[idx],
            "prompt_mask": self.prompt_mask[idx],
            "response_ids": self.response_ids[idx],
        }


@torch.no_grad()
def sample_rollout(
    model: Any,
    tokenizer: Any,
    task: Any,
    cfg: TrainConfig,
    step: int,
    *,
    temperature: float | None = None,
    n_prompts: int | None = None,
) -> Rollout:
    """Draw P prompts (seeded by step) and G responses each at ``cfg.temperature``, then score them
    with the task's verifier. top-k and top-p are off: the sampled law is softmax(logits / T).

    ``temperature`` / ``n_prompts``: sample at another temperature, and only the first
    ``n_prompts`` of the step's P prompts (AEPO's extra samples, ``MethodNeeds.temperature_samples``).
    ``cfg.rollout_mismatch``: the sampler draws from its perturbed law (:class:`SamplingMismatch`).
    """
    problems = task.sample_problems(cfg.prompts_per_step, random.Random(stream_seed(cfg.seed, STEP, step)))
    if n_prompts is not None:
        problems = problems[:n_prompts]
    model.eval()
    gen = generate(
        model,
        tokenizer,
        [p.prompt for p in problems],
        task.max_response_len,
        n=cfg.group_size,
        temperature=cfg.temperature if temperature is None else temperature,
        output_logits=True,
        share_prompts=cfg.share_prompts,
        mismatch=sampling_mismatch(cfg.rollout_mismatch),
    )
    t0 = time.perf_counter()
    rewards = torch.tensor(
        [task.reward(problems[i // cfg.group_size], t) for i, t in enumerate(gen.texts)], dtype=torch.float32
    )
    verify_s = time.perf_counter() - t0
    if cfg.random_reward:  # rewards without signal (Park et al. 2025): Bernoulli(1/2), seeded per step
        coin = torch.Generator().manual_seed(stream_seed(cfg.seed, RANDOM_REWARD, step))
        rewards = torch.bernoulli(torch.full_like(rewards, 0.5), generator=coin)
    group_index = torch.arange(len(problems)).repeat_interleave(cfg.group_size)
    prompts = [p.prompt for p in problems for _ in range(cfg.group_size)]
    return Rollout(
        gen.prompt_ids,
        gen.prompt_mask,
        gen.response_ids,
        gen.mask,
        gen.texts,
        rewards,
        group_index,
        prompts,
        verify_s,
        gen.logits,
    )


# --------------------------------------------------------------------------------------------
# Re-scoring responses
# --------------------------------------------------------------------------------------------


def _response_inputs(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response_ids: torch.Tensor
) -> dict[str, torch.Tensor]:
    """``[prompt | response]`` model inputs ``[N, Lp + T]`` with positions that follow the mask."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention = torch.cat([prompt_mask, torch.ones_like(response_ids)], dim=1)
    return {"input_ids": input_ids, "attention_mask": attention, "position_ids": position_ids_from_mask(attention)}


def response_logits(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    share_prompts: bool = False,
) -> torch.Tensor:
    """Untempered logits ``[N, T, V]`` that predict each response token (a view of the last T + 1
    positions' ``[:, :-1]``, not a copy). Positions follow the attention mask, as in ``generate``.
    ``share_prompts``: rows that repeat a prompt share its forward, and the prompts their common prefix
    (:func:`~entflow.trainer.shared_prompts.shared_response_forward`)."""
    if share_prompts and worth_sharing(prompt_ids, prompt_mask):
        return shared_response_forward(model, prompt_ids, prompt_mask, response_ids)
    t = response_ids.shape[1]
    logits = model(**_response_inputs(prompt_ids, prompt_mask, response_ids), logits_to_keep=t + 1).logits
    return logits[:, :-1]


def response_hidden(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    share_prompts: bool = False,
) -> torch.Tensor:
    """The LM head's inputs ``[N, T, D]`` that predict each response token: the model body's last
    hidden state at the positions :func:`response_logits` reads (a view, not a copy); the head
    never runs. ``share_prompts`` as in :func:`response_logits`."""
    if share_prompts and worth_sharing(prompt_ids, prompt_mask):
        return shared_response_forward(model, prompt_ids, prompt_mask, response_ids, hidden=True)
    t = response_ids.shape[1]
    return last_hidden_state(model, **_response_inputs(prompt_ids, prompt_mask, response_ids))[:, -t - 1 : -1]


def response_token_stats(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    temperature: float,
    chunk_size: int | None = None,
    stats: tuple[str, ...] = ("logp", "entropy", "sum_p2", "sum_p2_logp"),
    entropy_top_p: float | None = None,
    hidden_stats: bool = False,
    share_prompts: bool = False,
) -> TokenStats:
    """Token statistics ``stats`` of the response tokens ``[N, T]`` under ``model`` (grad if enabled).

    Positions are counted from the first real prompt token, as ``generate`` does with left
    padding, so these log-probs are exactly those the samples were drawn from.

    ``hidden_stats=False``: only the last T + 1 positions' logits ``[N, T + 1, V]`` are computed
    and their ``[:, :-1]`` slice is read in place by ``token_stats``. ``hidden_stats=True`` and a
    plain linear head (:func:`~entflow.core.lm_head.hidden_head_reason` is ``None``): the
    statistics come from the body's last hidden state ``[N, T, D]`` and the head's weight by
    :func:`~entflow.core.hidden_stats.token_stats_from_hidden` in its default tiles (``chunk_size``
    is not used), so the ``[N, T, V]`` logits never exist (equal to float32 round-off, not bitwise:
    the tiles sum in another order). A head that is not plain falls back to the logits with a
    warning naming the reason.

    ``entropy_top_p`` (< 1, ``MethodNeeds.entropy_top_p``): ``entropy`` is the entropy of the top-p
    nucleus, ``topp_entropy(logits, entropy_top_p, temperature)`` ``[N, T]`` (SIREN, arXiv
    2509.25133 §3), instead of the full entropy; the other statistics are unchanged.

    ``share_prompts``: rows that repeat a prompt share its forward, and the prompts their common
    prefix (:func:`response_logits`).
    """
    if hidden_stats and (entropy_top_p is None or "entropy" not in stats):  # top-p entropy needs the logits
        reason = hidden_head_reason(model)
        if reason is None:
            head = model.get_output_embeddings()
            hidden = response_hidden(model, prompt_ids, prompt_mask, response_ids, share_prompts)
            # default tiles (1,024 rows × 8,192 vocabulary entries): smaller row tiles read the
            # weight more often (docs/benchmarks.md "hidden_passes"); chunk_size is the logits path's
            return token_stats_from_hidden(hidden, head.weight, response_ids, head.bias, temperature, stats=stats)
        warnings.warn(f"hidden_stats: token statistics from full logits because {reason}", stacklevel=2)
    logits = response_logits(model, prompt_ids, prompt_mask, response_ids, share_prompts)
    return response_token_stats_from_logits(logits, response_ids, temperature, chunk_size, stats, entropy_top_p)


def response_topk_stats(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    temperature: float,
    topk: int,
    chunk_size: int | None = None,
    stats: tuple[str, ...] = ("logp", "entropy"),
    entropy_top_p: float | None = None,
    share_prompts: bool = False,
) -> tuple[TokenStats, torch.Tensor]:
    """:func:`response_token_stats` and, from the same logits, the log-probs of each position's
    ``topk`` most probable tokens ``[N, T, topk]`` with grad (:func:`~entflow.core.topk.topk_logprobs`;
    ``MethodNeeds.topk``, SimKO). Always from the logits (never from hidden states)."""
    logits = response_logits(model, prompt_ids, prompt_mask, response_ids, share_prompts)
    out = response_token_stats_from_logits(logits, response_ids, temperature, chunk_size, stats, entropy_top_p)
    return out, topk_logprobs(logits, topk, temperature)


def response_token_stats_from_logits(
    logits: torch.Tensor,
    response_ids: torch.Tensor,
    temperature: float,
    chunk_size: int | None,
    stats: tuple[str, ...],
    entropy_top_p: float | None = None,
) -> TokenStats:
    """:func:`response_token_stats` given the response positions' logits (the top-p entropy in place
    of the full one when ``entropy_top_p`` is set)."""
    if entropy_top_p is None or "entropy" not in stats:
        return token_stats(logits, response_ids, temperature=temperature, chunk_size=chunk_size, stats=stats)
    rest = tuple(s for s in stats if s != "entropy")
    out = token_stats(logits, response_ids, temperature=temperature, chunk_size=chunk_size, stats=rest)
    return out._replace(entropy=topp_entropy(logits, entropy_top_p, temperature))
