"""The lab trainer: GRPO semantics on a Hugging Face causal LM, one readable loop (docs/design.md §10).

One step = sample P prompts × G responses at temperature T (batched, left-padded ``generate``
with KV cache) → rewards → ``compute_advantages`` with the method → ``ppo_epochs`` passes over
``mini_batches`` of ``policy_loss`` with the method → optimizer steps → audit of the true
entropy change (docs/design.md §9) → ``method.update(metrics)`` → metrics, samples, checkpoint.

Every step reseeds from (seed, step), and checkpoints hold model, optimizer, method state and
RNG states, so ``resume`` reproduces an uninterrupted run bit for bit on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from entflow.analysis.correlation import pearson, scale_fitted_mse, spearman
from entflow.core.batch import TokenBatch
from entflow.core.estimators import ESTIMATORS, entropy_change
from entflow.core.token_stats import TokenStats, token_stats
from entflow.errors import ConfigError
from entflow.methods import Method, get_method
from entflow.methods.needs import required_token_stats
from entflow.methods.objective import compute_advantages, policy_loss
from entflow.trainer.config import TrainConfig
from entflow.trainer.rundir import (
    JsonlWriter,
    load_checkpoint,
    read_jsonl,
    rng_state,
    save_checkpoint,
    set_rng_state,
    write_config,
)
from entflow.trainer.tokens import position_ids_from_mask

# --------------------------------------------------------------------------------------------
# Rollouts and token statistics
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


def method_step(step: int) -> int:
    """The trainer counts rollout steps 1…steps (step 0 is the warm-start evaluation); methods
    read ``batch.step`` 0-based in ``[0, total_steps)`` (docs/design.md §6 schedules), so step k is k − 1."""
    return step - 1


def schedule_steps(cfg: TrainConfig) -> int:
    """``total_steps`` that step-dependent schedules are laid over (anchored on resume)."""
    return cfg.schedule_steps if cfg.schedule_steps is not None else cfg.steps


def step_seed(seed: int, step: int) -> int:
    """A per-step seed, so that every step's randomness is a function of (seed, step) alone."""
    return (seed * 1_000_003 + step * 7_919) % (2**63 - 1)


def response_token_stats(
    model: torch.nn.Module,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    response_ids: torch.Tensor,
    temperature: float,
    chunk_size: int | None = None,
    stats: tuple[str, ...] = ("logp", "entropy", "sum_p2", "sum_p2_logp"),
) -> TokenStats:
    """Token statistics ``stats`` of the response tokens ``[N, T]`` under ``model`` (grad if enabled).

    Positions are counted from the first real prompt token, as ``generate`` does with left
    padding, so these log-probs are exactly those the samples were drawn from. Only the last
    T + 1 positions' logits are computed; their ``[:, :-1]`` slice is read in place.
    """
    logits = response_logits(model, prompt_ids, prompt_mask, response_ids)
    return token_stats(logits, response_ids, temperature=temperature, chunk_size=chunk_size, stats=stats)


def response_logits(
    model: torch.nn.Module, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response_ids: torch.Tensor
) -> torch.Tensor:
    """Untempered logits ``[N, T, V]`` that predict each response token (a view of the last T + 1
    positions' ``[:, :-1]``, not a copy). Positions follow the attention mask, as in ``generate``."""
    input_ids = torch.cat([prompt_ids, response_ids], dim=1)
    attention = torch.cat([prompt_mask, torch.ones_like(response_ids)], dim=1)
    t = response_ids.shape[1]
    logits = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids_from_mask(attention),
        logits_to_keep=t + 1,
    ).logits
    return logits[:, :-1]


@torch.no_grad()
def sample_rollout(model, tokenizer, task, cfg: TrainConfig, step: int) -> Rollout:
    """Draw P prompts (seeded by step) and G responses each at ``cfg.temperature``."""
    from entflow.trainer.tokens import decode_responses, encode_prompts, response_mask

    problems = task.sample_problems(cfg.prompts_per_step, random.Random(step_seed(cfg.seed, step)))
    prompts = [p.prompt for p in problems for _ in range(cfg.group_size)]
    enc = encode_prompts(tokenizer, prompts)
    model.eval()
    out = model.generate(
        input_ids=enc["input_ids"],
        attention_mask=enc["attention_mask"],
        do_sample=True,
        temperature=cfg.temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=task.max_response_len,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        output_logits=True,
        return_dict_in_generate=True,
    )
    seq = out.sequences
    response_ids = seq[:, enc["input_ids"].shape[1] :]
    # generate's raw per-step logits are the rollout policy's: same tokens, attention and positions
    # as a separate full forward (rows that finished are fed pad, masked below), so the old
    # statistics need no second forward. top_k=0, top_p=1: the sampled law is softmax(logits / T).
    logits = torch.stack(out.logits, dim=1) if out.logits else None
    if response_ids.shape[1] == 0:  # nothing generated at all: one eos column keeps shapes valid
        response_ids = torch.full((seq.shape[0], 1), tokenizer.eos_token_id, dtype=seq.dtype)
    mask = response_mask(tokenizer, response_ids)
    response_ids = response_ids.masked_fill(mask == 0, tokenizer.pad_token_id)
    texts = decode_responses(tokenizer, response_ids)
    t0 = time.perf_counter()
    rewards = torch.tensor(
        [task.reward(problems[i // cfg.group_size], t) for i, t in enumerate(texts)], dtype=torch.float32
    )
    verify_s = time.perf_counter() - t0
    group_index = torch.arange(cfg.prompts_per_step).repeat_interleave(cfg.group_size)
    ids, attn = enc["input_ids"], enc["attention_mask"]
    return Rollout(ids, attn, response_ids, mask, texts, rewards, group_index, prompts, verify_s, logits)


# --------------------------------------------------------------------------------------------
# One training step
# --------------------------------------------------------------------------------------------


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    return float((x * mask).sum() / mask.sum().clamp(min=1))


def audit_entropy_change(
    true_dH: torch.Tensor, batch: TokenBatch, weights: torch.Tensor, cfg: TrainConfig
) -> dict[str, float]:
    """Pearson, Spearman and scale-fitted MSE of every §5 estimator against the measured change.

    Estimates are taken at the rollout policy (r = 1) and multiplied by the method's token
    weights, i.e. for the gradient the update actually applied.
    """
    valid = batch.valid
    truth = true_dH[valid]
    out = {"audit/true_dH_mean": float(truth.mean()) if truth.numel() else math.nan}
    for name in ESTIMATORS:
        est = (entropy_change(name, batch, cfg.clip_low, cfg.clip_high, cfg.dual_clip) * weights)[valid]
        out[f"audit/{name}/pearson"] = pearson(est, truth)
        out[f"audit/{name}/spearman"] = spearman(est, truth)
        out[f"audit/{name}/mse"] = scale_fitted_mse(est, truth)[0]
    return out


POSITION_BINS = 5  # relative-position bins of the positional entropy profile (paper 004 Fig. 6a)


@torch.no_grad()
def rollout_diagnostics(
    model, roll: Rollout, old: TokenStats, weights: torch.Tensor, cfg: TrainConfig
) -> dict[str, float]:
    """docs/design.md §9 diagnostics of one rollout batch, as ``diag/*`` metrics (logged on validation steps):

    - diversity over whole groups (the G responses of a prompt, characters as tokens): distinct
      n-grams ``diag/distinct_n`` (n = 1…4, averaged) and ``diag/self_bleu`` (paper 002 App. C.1);
    - calibration from the rollout policy's mean token log-prob of correct vs incorrect responses
      (paper 002 §5.3): ``diag/calib/{logp_correct,logp_incorrect,gap,auroc}``;
    - positional entropy (paper 004 Fig. 6a): ``diag/pos_entropy/{correct,incorrect}/b{i}``;
    - the gradient-norm proxy G_t = |w_t|·sqrt(1 − 2p + Σπ²)·‖h_t‖ (paper 004 Eq. 4) with w_t
      the weight the update put on the token (A_t times the method's token weight, r = 1):
      ``diag/gnorm/mean`` and ``diag/gnorm/top20_entropy_share`` (share of ΣG carried by the 20 %
      highest-entropy tokens).
    """
    from entflow.analysis.diagnostics import (
        calibration,
        grad_norm_proxy,
        groups_from_index,
        ngram_diversity,
        positional_entropy,
        self_bleu,
        sequence_mean_logp,
    )

    out: dict[str, float] = {}
    groups = groups_from_index(roll.texts, roll.group_index.tolist())
    out["diag/distinct_n"] = ngram_diversity(groups)
    out["diag/self_bleu"] = self_bleu(groups)
    cal = calibration(sequence_mean_logp(old.logp, roll.mask), roll.rewards)
    out.update(
        {
            "diag/calib/logp_correct": cal.mean_correct,
            "diag/calib/logp_incorrect": cal.mean_incorrect,
            "diag/calib/gap": cal.gap,
            "diag/calib/auroc": cal.auroc,
        }
    )
    prof = positional_entropy(old.entropy, roll.mask, roll.rewards, n_bins=POSITION_BINS)
    for kind in ("correct", "incorrect"):
        for i, v in enumerate(prof[kind]):
            out[f"diag/pos_entropy/{kind}/b{i}"] = float(v)
    input_ids = torch.cat([roll.prompt_ids, roll.response_ids], dim=1)
    attention = torch.cat([roll.prompt_mask, torch.ones_like(roll.response_ids)], dim=1)
    hidden = model(
        input_ids=input_ids,
        attention_mask=attention,
        position_ids=position_ids_from_mask(attention),
        output_hidden_states=True,
    ).hidden_states[-1]  # after the final norm: the input of the LM head
    lp = roll.prompt_ids.shape[1]
    G = grad_norm_proxy(weights, old.logp, old.sum_p2, hidden[:, lp - 1 : -1], roll.mask)
    valid = roll.mask > 0
    g, h = G[valid], old.entropy[valid]
    out["diag/gnorm/mean"] = float(g.mean()) if g.numel() else math.nan
    if g.numel() and float(g.sum()) > 0:
        top = h >= torch.quantile(h, 0.8)
        out["diag/gnorm/top20_entropy_share"] = float(g[top].sum() / g.sum())
    return out


def train_step(
    model,
    tokenizer,
    task,
    method: Method,
    optimizer: torch.optim.Optimizer,
    cfg: TrainConfig,
    step: int,
    ref_model=None,
    diagnose: bool = False,
) -> tuple[dict[str, float], Rollout, dict[str, float]]:
    """Rollout → advantages → updates → audit (→ §9 diagnostics when ``diagnose``).
    Returns (metrics, rollout, timings)."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    roll = sample_rollout(model, tokenizer, task, cfg, step)
    timings["time/rollout_s"] = time.perf_counter() - t0
    timings["time/verify_s"] = roll.verify_s  # included in rollout_s

    t0 = time.perf_counter()
    with torch.no_grad():
        # only what the method, the audit (every estimator, tabular too) and the §9 diagnostics read
        # (the gradient-norm proxy needs Σπ², which the tabular estimator's statistics include)
        old_stats = required_token_stats(method, ESTIMATORS if (cfg.audit or diagnose) else ())
        if roll.logits is not None:  # the rollout policy's logits, from generate (no second forward)
            old = token_stats(
                roll.logits, roll.response_ids, temperature=cfg.temperature, chunk_size=cfg.chunk_size, stats=old_stats
            )
        else:
            old = response_token_stats(
                model, roll.prompt_ids, roll.prompt_mask, roll.response_ids, cfg.temperature, cfg.chunk_size, old_stats
            )
        ref_logp = None
        if ref_model is not None:
            ref_logp = response_token_stats(
                ref_model,
                roll.prompt_ids,
                roll.prompt_mask,
                roll.response_ids,
                cfg.temperature,
                cfg.chunk_size,
                ("logp",),
            ).logp
    full = TokenBatch(
        logp=old.logp,
        old_logp=old.logp,
        advantages=None,
        mask=roll.mask,
        old_entropy=old.entropy,
        ref_logp=ref_logp,
        sum_p2=old.sum_p2,
        sum_p2_logp=old.sum_p2_logp,
        rewards=roll.rewards,
        group_index=roll.group_index,
        step=method_step(step),
        total_steps=schedule_steps(cfg),
    )
    adv = compute_advantages(full, method, scale=cfg.adv_scale)
    timings["time/reward_s"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    model.train()
    n = roll.rewards.shape[0]
    gen = torch.Generator().manual_seed(step_seed(cfg.seed, step))
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    applied_weights = torch.ones_like(roll.mask)
    grad_norms = []
    # the loss reads H from old_entropy; the current entropy only where a method differentiates it
    cur_stats = required_token_stats(method, entropy=False)
    # strictly on-policy (OPEFO's setting): exactly one gradient step on the whole batch, r ≡ 1
    epochs, chunks = (1, 1) if cfg.strict_on_policy else (cfg.ppo_epochs, cfg.mini_batches)
    n_updates = 0
    for epoch in range(epochs):
        order = torch.randperm(n, generator=gen)
        for idx in order.chunk(chunks):
            cur = response_token_stats(
                model, **roll.select(idx), temperature=cfg.temperature, chunk_size=cfg.chunk_size, stats=cur_stats
            )
            batch = TokenBatch(
                logp=cur.logp,
                old_logp=old.logp[idx],
                advantages=adv[idx],
                mask=roll.mask[idx],
                entropy=cur.entropy,
                old_entropy=old.entropy[idx],
                ref_logp=None if ref_logp is None else ref_logp[idx],
                sum_p2=None if old.sum_p2 is None else old.sum_p2[idx],
                sum_p2_logp=None if old.sum_p2_logp is None else old.sum_p2_logp[idx],
                rewards=roll.rewards[idx],
                group_index=roll.group_index[idx],
                step=method_step(step),
                total_steps=schedule_steps(cfg),
            )
            out = policy_loss(batch, method, cfg.clip_low, cfg.clip_high, cfg.dual_clip, cfg.agg)
            optimizer.zero_grad(set_to_none=True)
            out.loss.backward()
            if cfg.grad_clip is not None:
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)))
            optimizer.step()
            n_updates += 1
            if epoch == 0:
                applied_weights[idx] = out.token_weights
            for k, v in out.metrics.items():
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    sums[k] += float(v)
                    counts[k] += 1
    timings["time/update_s"] = time.perf_counter() - t0

    metrics = {k: sums[k] / counts[k] for k in sums}
    mask = roll.mask
    lengths = mask.sum(-1)
    group_rewards = roll.rewards.view(cfg.prompts_per_step, cfg.group_size)
    metrics.update(
        {
            "reward/mean": float(roll.rewards.mean()),
            "reward/std": float(roll.rewards.std()),
            "response/len_mean": float(lengths.mean()),
            "response/empty_frac": sum(1 for t in roll.texts if not t) / n,
            "response/truncated_frac": float((~(roll.response_ids == tokenizer.eos_token_id).any(-1)).float().mean()),
            "batch/degenerate_group_frac": float(
                (group_rewards.max(1).values == group_rewards.min(1).values).float().mean()
            ),
            "entropy": _masked_mean(old.entropy, mask),
            "adv/abs_mean": _masked_mean(adv.abs(), mask),
            "update/optimizer_steps": float(n_updates),
        }
    )
    if grad_norms:
        metrics["grad_norm"] = sum(grad_norms) / len(grad_norms)
    if hasattr(task, "pop_metrics"):  # e.g. reward calls that failed or timed out (entflow.hf.data.ChatTask)
        metrics.update(task.pop_metrics())

    if cfg.audit:
        t0 = time.perf_counter()
        with torch.no_grad():
            after = response_token_stats(
                model,
                roll.prompt_ids,
                roll.prompt_mask,
                roll.response_ids,
                cfg.temperature,
                cfg.chunk_size,
                ("entropy",),
            )
        full.advantages = adv
        metrics.update(audit_entropy_change(after.entropy - old.entropy, full, applied_weights, cfg))
        timings["time/audit_s"] = time.perf_counter() - t0
    if diagnose:
        t0 = time.perf_counter()
        model.eval()
        w = adv * applied_weights if adv.dim() == 2 else adv[:, None] * applied_weights
        metrics.update(rollout_diagnostics(model, roll, old, w, cfg))
        timings["time/diag_s"] = time.perf_counter() - t0
    return metrics, roll, timings


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


@dataclass
class RunSetup:
    """What a run trains: the task, the policy, where the policy came from, how to load a frozen
    reference copy, and how to validate. :func:`lab_setup` builds the lab's; ``entflow.hf.setup``
    builds one for a Hugging Face model and real data."""

    task: Any
    model: Any
    tokenizer: Any
    policy_path: str
    load_reference: Callable[[], Any]
    validate: Callable[..., dict[str, float]]  # (model, tokenizer, task, cfg, step) -> val/* metrics


def _due_eval(cfg: TrainConfig, step: int) -> bool:
    return step == cfg.steps or (cfg.eval_every > 0 and step % cfg.eval_every == 0)


def train(
    cfg: TrainConfig,
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    *,
    setup: Callable[[TrainConfig], RunSetup],
) -> Path:
    """Run (or resume) a training run; returns its run directory. ``setup`` builds the task and
    policy: :func:`entflow.lab.setup.lab_setup` or :func:`entflow.hf.setup.real_setup`."""
    cfg.validate()
    torch.set_num_threads(cfg.threads)
    _quiet_transformers()
    run_dir = cfg.run_dir
    cfg = dataclasses.replace(cfg, schedule_steps=_anchored_schedule_steps(cfg, run_dir, resume))
    ckpt_path = run_dir / "checkpoints" / "last.pt"
    metrics_path = run_dir / "metrics.jsonl"
    if resume and not ckpt_path.exists() and metrics_path.exists():
        raise ConfigError("resume", f"{run_dir} has no checkpoint to resume from")
    if not resume and metrics_path.exists():
        if not overwrite:
            raise ConfigError("name", f"run directory {run_dir} exists; pass --resume or --overwrite, or another name")
        import shutil

        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)

    parts = setup(cfg)
    task, model, tokenizer, policy_path = parts.task, parts.model, parts.tokenizer, parts.policy_path
    method = get_method(cfg.method, **cfg.method_params)
    ref_model = None
    if "ref_logp" in method.needs:
        ref_model = parts.load_reference()
        ref_model.eval().requires_grad_(False)
    optimizer = make_optimizer(model, cfg)

    start = 0
    if resume and ckpt_path.exists():
        ck = load_checkpoint(ckpt_path)
        model.load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        method.load_state_dict(ck["method"])
        set_rng_state(ck["rng"])
        start = int(ck["step"])
    resolved = cfg.to_dict() | {"policy_path": str(policy_path)}
    if resume:
        _check_resumable(run_dir, resolved)
    write_config(run_dir, resolved)
    done_steps = {int(r["step"]) for r in read_jsonl(metrics_path) if "step" in r}
    metrics_log, samples_log, timing_log = (
        JsonlWriter(run_dir / f) for f in ("metrics.jsonl", "samples.jsonl", "timing.jsonl")
    )
    tb = _tensorboard(run_dir)

    def emit(record: dict[str, Any]) -> None:
        if record["step"] in done_steps:  # written before a crash; the resumed step reproduces it
            return
        metrics_log.write(record)
        if tb is not None:
            for k, v in record.items():
                if k != "step" and isinstance(v, float) and math.isfinite(v):
                    tb.add_scalar(k, v, record["step"])
            tb.flush()
        if on_step is not None:
            on_step(record)

    t_start = time.perf_counter()
    if start == 0:
        record = {"step": 0, **parts.validate(model, tokenizer, task, cfg, 0)}
        emit(record)
    progress = _progress(cfg, start)
    try:
        for step in range(start + 1, cfg.steps + 1):
            torch.manual_seed(step_seed(cfg.seed, step))
            due = _due_eval(cfg, step)
            metrics, roll, timings = train_step(
                model, tokenizer, task, method, optimizer, cfg, step, ref_model, diagnose=due
            )
            method.update({**metrics, "step": method_step(step)})
            record = {"step": step, **metrics}
            if due:
                t0 = time.perf_counter()
                record.update(parts.validate(model, tokenizer, task, cfg, step))
                timings["time/eval_s"] = time.perf_counter() - t0
            emit(record)
            if step not in done_steps:
                # whole groups on validation steps (diversity needs them), one response per prompt otherwise
                for i in range(min(cfg.samples_logged, cfg.prompts_per_step)):
                    for j in range(i * cfg.group_size, (i + 1) * cfg.group_size if due else i * cfg.group_size + 1):
                        samples_log.write(
                            {
                                "step": step,
                                "group": i,
                                "prompt": roll.prompts[j],
                                "response": roll.texts[j],
                                "reward": float(roll.rewards[j]),
                            }
                        )
                timing_log.write({"step": step, **timings, "time/elapsed_s": time.perf_counter() - t_start})
            if step % cfg.checkpoint_every == 0 or step == cfg.steps:
                save_checkpoint(
                    ckpt_path,
                    model=model.state_dict(),
                    optimizer=optimizer.state_dict(),
                    method=method.state_dict(),
                    rng=rng_state(),
                    step=step,
                )
            if progress is not None:
                progress.advance(record)
    finally:
        if progress is not None:
            progress.close()
        for w in (metrics_log, samples_log, timing_log):
            w.close()
        if tb is not None:
            tb.close()
    model.save_pretrained(run_dir / "checkpoints" / "final")
    tokenizer.save_pretrained(run_dir / "checkpoints" / "final")
    return run_dir


# keys a resumed run may change: they do not alter what the finished steps computed
# (``steps`` may grow or shrink; schedules stay anchored to ``schedule_steps``, see below)
RESUME_MAY_CHANGE = (
    "steps",
    "progress",
    "eval_every",
    "checkpoint_every",
    "samples_logged",
    "out_dir",
    "name",
    "group",
)


def _anchored_schedule_steps(cfg: TrainConfig, run_dir: Path, resume: bool) -> int:
    """The ``total_steps`` schedules use: ``schedule_steps`` if set, else ``steps`` — except on
    resume, where it is the value the run was started with, so that a changed ``steps`` (training
    longer or shorter) never shifts a schedule that depends on total_steps (pos_adv_reweight's
    stage and epoch schedules): finished steps stay reproducible and the schedule continues as
    planned (after its planned end it stays at its final value)."""
    import yaml

    path = run_dir / "config.yaml"
    if resume and path.exists():
        old = yaml.safe_load(path.read_text()) or {}
        anchored = old.get("schedule_steps") or old.get("steps")
        if anchored is not None:
            if cfg.schedule_steps is not None and cfg.schedule_steps != anchored:
                raise ConfigError(
                    "schedule_steps", f"the run in {run_dir} was started with {anchored}, got {cfg.schedule_steps}"
                )
            return int(anchored)
    return schedule_steps(cfg)


def _check_resumable(run_dir: Path, resolved: dict[str, Any]) -> None:
    """Refuse to resume a run under a config that would not reproduce its finished steps."""
    import yaml

    path = run_dir / "config.yaml"
    if not path.exists():
        return
    old = yaml.safe_load(path.read_text()) or {}
    changed = sorted(k for k in resolved if k not in RESUME_MAY_CHANGE and old.get(k) != resolved[k])
    if changed:
        diffs = ", ".join(f"{k}: {old.get(k)!r} -> {resolved[k]!r}" for k in changed)
        raise ConfigError(changed[0], f"differs from the run being resumed in {run_dir} ({diffs}); start a fresh run")


def _quiet_transformers() -> None:
    """Our own progress bars replace transformers' per-load bars and warnings."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def _tensorboard(run_dir: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is in the `lab` extra; metrics.jsonl has everything anyway
        return None
    return SummaryWriter(log_dir=str(run_dir))


class _Progress:
    """A rich progress bar showing step, reward, entropy and ETA."""

    def __init__(self, cfg: TrainConfig, start: int):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._p = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("step {task.completed}/{task.total}"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        self._p.start()
        self._task = self._p.add_task(cfg.run_name, total=cfg.steps, completed=start, info="")

    def advance(self, record: dict[str, Any]) -> None:
        info = f"reward {record.get('reward/mean', float('nan')):.2f}  H {record.get('entropy', float('nan')):.3f}"
        if "val/acc" in record:
            info += f"  val {record['val/acc']:.2f}"
        self._p.update(self._task, completed=record["step"], info=info)

    def close(self) -> None:
        self._p.stop()


def _progress(cfg: TrainConfig, start: int) -> _Progress | None:
    return _Progress(cfg, start) if cfg.progress else None
