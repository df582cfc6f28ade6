"""Warm start (docs/design.md §10): a short supervised phase on a task's solution traces, cached on disk.

``pretrain(cfg)`` trains the tiny policy on ``[<bos> prompt | response <eos>]`` sequences with
the loss on response tokens (and the final ``<eos>``) only. Each training problem gets a trace
drawn at random from *all* its correct answers, so the warm policy spreads probability over
several solutions (entropy GRPO can collapse). The result — model, tokenizer and
``warmstart.json`` (the config, its hash, the warm-start evaluation, timing) — is written
atomically to ``cache_dir/<task>-<hash>``; an existing directory is reused without training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from entflow.core.rules import Check, above, at_least, in_range, or_null
from entflow.errors import ParameterError
from entflow.lab.policy import (
    PolicyConfig,
    build_policy,
    build_tokenizer,
    count_parameters,
    load_policy,
)
from entflow.lab.tasks import LabTask, Problem, get_task
from entflow.trainer.config import check_keys, key_help, setting
from entflow.trainer.progress import ProgressBar, quiet_transformers
from entflow.trainer.rundir import default_cache_dir

__all__ = [
    "INFO_FILE",
    "PretrainConfig",
    "cache_path",
    "default_cache_dir",
    "load_policy",
    "make_sft_batch",
    "pretrain",
    "read_info",
    "sft_loss",
]

#: bump when the trace format, tokenizer layout or training recipe changes: old caches become stale
FORMAT_VERSION = 2
INFO_FILE = "warmstart.json"
# fields that do not change what is trained, so they are left out of the cache key
_NOT_HASHED = ("threads",)
# fields that enter the cache key only when changed from these defaults (warm starts cached before
# they existed keep their keys)
_KEYED_IF_SET = {"trace_exclude": "", "trace_exclude_frac": 1.0}


@dataclass
class PretrainConfig:
    """Supervised warm start. The defaults finish in about a minute on 2 CPU cores. With label
    smoothing 0.2 the countdown policy keeps a floor of probability on every character: temperature-1
    accuracy ≈ 0.07–0.10 and mean token entropy ≈ 1.5 nats while greedy decoding reaches ≈ 0.55 —
    room for GRPO to gain accuracy (by sharpening) while its entropy collapses."""

    task: str = setting("countdown", "the lab task whose solution traces the warm start is trained on")
    task_params: dict[str, Any] = field(default_factory=dict, metadata=key_help("parameters of the task"))
    policy: PolicyConfig = field(
        default_factory=PolicyConfig, metadata=key_help("the tiny policy's shape: {hidden_size: 128, num_layers: 4, …}")
    )
    steps: int = setting(300, "supervised steps", allowed=at_least(1))
    batch_size: int = setting(64, "traces per supervised step", allowed=at_least(1))
    lr: float = setting(2e-3, "peak learning rate (AdamW)", allowed=above(0))
    min_lr_ratio: float = setting(0.1, "cosine decay to lr * min_lr_ratio", allowed=in_range(0, 1))
    warmup_steps: int = setting(20, "linear warm-up steps of the learning rate", allowed=at_least(0))
    weight_decay: float = setting(0.0, "weight decay of the optimizer", allowed=at_least(0))
    grad_clip: float = setting(1.0, "clip the gradient norm to this value", allowed=above(0))
    seed: int = setting(0, "seed of the initial weights and of the traces drawn")
    eval_k: int = setting(4, "samples per validation problem in the warm-start evaluation", allowed=at_least(1))
    # a base model's noisy mix of right and wrong attempts: RL then has a wrong mode to unlearn, which
    # is what GRPO's accuracy gain is made of
    wrong_frac: float = setting(
        0.0, "fraction of traces that are well-formed but wrong", allowed=in_range(0, 1, hi_open=True)
    )
    # the warm policy keeps a floor of probability on every character, like a base model sampled too
    # hot, so temperature-1 samples slip; RL's gain is sharpening that away (the entropy–performance
    # exchange the papers study)
    label_smoothing: float = setting(
        0.2, "label smoothing of the supervised loss", allowed=in_range(0, 1, hi_open=True)
    )
    threads: int | None = setting(
        None,
        "torch threads while training (null: leave as is); not part of the cache key",
        allowed=or_null(at_least(1)),
    )
    # route bias (docs/regime.md): the defaults ("" / 1.0) leave the recipe, its random draws and the
    # cache key unchanged
    trace_exclude: str = setting(
        "",
        "characters a trace avoids: with probability trace_exclude_frac a problem's trace is drawn only from its "
        "correct answers without them (a problem with none is skipped), so the warm policy under-covers that route",
        allowed=Check("a string of characters", lambda v: isinstance(v, str)),
    )
    trace_exclude_frac: float = setting(
        1.0, "probability that a trace avoids trace_exclude's characters", allowed=in_range(0, 1)
    )

    def __post_init__(self) -> None:
        if isinstance(self.policy, dict):
            known = {f.name for f in dataclasses.fields(PolicyConfig)}
            unknown = sorted(set(self.policy) - known)
            if unknown:
                raise ParameterError("PretrainConfig", f"policy.{unknown[0]}", "is not a PolicyConfig field")
            self.policy = PolicyConfig(**self.policy)

    def validate(self) -> None:
        check_keys(self, error=lambda key, message: ParameterError("PretrainConfig", key, message))
        if self.trace_exclude and not hasattr(get_task(self.task, **self.task_params), "solutions"):
            what = f"needs a task that lists its solutions ({self.task!r} does not)"
            raise ParameterError("PretrainConfig", "trace_exclude", f"{what}, got {self.trace_exclude!r}")
        self.policy.validate()
        get_task(self.task, **self.task_params)  # unknown task / task parameter: fail before any work

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PretrainConfig:
        d = dict(d)
        unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ParameterError("PretrainConfig", unknown[0], "is not a PretrainConfig field")
        return cls(**d)

    def key(self) -> str:
        """Hash of everything that changes the trained policy (12 hex digits)."""
        d = {k: v for k, v in self.to_dict().items() if k not in _NOT_HASHED}
        for k, default in _KEYED_IF_SET.items():  # added later: at their defaults the old keys stay valid
            if d[k] == default:
                del d[k]
        blob = json.dumps({"format": FORMAT_VERSION, "config": d}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def cache_path(cfg: PretrainConfig, cache_dir: str | Path | None = None) -> Path:
    """Where ``pretrain(cfg, cache_dir)`` puts (or finds) its policy."""
    return Path(cache_dir if cache_dir is not None else default_cache_dir()) / f"{cfg.task}-{cfg.key()}"


# --------------------------------------------------------------------------------------------
# data


def _char_ids(tokenizer) -> dict[str, int]:
    table = getattr(tokenizer, "_entflow_char_to_id", None)
    if table is None:
        table = {t: i for t, i in tokenizer.get_vocab().items() if len(t) == 1}
        tokenizer._entflow_char_to_id = table
    return table


def make_sft_batch(tokenizer, prompts: list[str], responses: list[str]) -> dict[str, torch.Tensor]:
    """Left-padded ``[<bos> prompt response <eos>]``: ``input_ids``, ``attention_mask`` and
    ``loss_mask`` (1 on the response characters and the ``<eos>``)."""
    c2i = _char_ids(tokenizer)
    unk, bos, eos, pad = tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id
    rows, masks = [], []
    for p, r in zip(prompts, responses, strict=True):
        ids = [bos] + [c2i.get(c, unk) for c in p] + [c2i.get(c, unk) for c in r] + [eos]
        rows.append(ids)
        masks.append([0] * (1 + len(p)) + [1] * (len(r) + 1))
    width = max(map(len, rows))
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), width), dtype=torch.float32)
    for i, (ids, m) in enumerate(zip(rows, masks, strict=True)):
        n = len(ids)
        input_ids[i, width - n :] = torch.tensor(ids)
        attention[i, width - n :] = 1
        loss_mask[i, width - n :] = torch.tensor(m, dtype=torch.float32)
    return {"input_ids": input_ids, "attention_mask": attention, "loss_mask": loss_mask}


def sft_loss(model, batch: dict[str, torch.Tensor], label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean next-token cross-entropy (with optional label smoothing) over the loss-masked
    (response) tokens."""
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = batch["input_ids"][:, 1:]
    mask = batch["loss_mask"][:, 1:]
    nll = torch.nn.functional.cross_entropy(
        logits[:, :-1].float().transpose(1, 2), targets, reduction="none", label_smoothing=label_smoothing
    )
    return (nll * mask).sum() / mask.sum().clamp_min(1.0)


# --------------------------------------------------------------------------------------------
# training and cache


def _train(cfg: PretrainConfig, progress: bool = True) -> tuple[Any, Any, dict[str, Any]]:
    from entflow.lab.evaluate import evaluate  # the warm start's evaluation is the lab's one

    task = get_task(cfg.task, **cfg.task_params)
    tokenizer = build_tokenizer(task.alphabet, model_max_length=cfg.policy.max_positions)
    model = build_policy(tokenizer, cfg.policy, seed=cfg.seed)
    model.train()
    rng = random.Random(cfg.seed)
    decay, no_decay = [], []
    for p in model.parameters():
        (no_decay if p.dim() < 2 else decay).append(p)
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.98),
    )

    def lr_at(step: int) -> float:
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        t = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
        return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))

    bar = ProgressBar(progress, transient=True)
    bar.add(f"pretrain {cfg.task}", total=cfg.steps)
    t0 = time.perf_counter()
    losses: list[float] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        for step in range(cfg.steps):
            if cfg.trace_exclude:
                problems, responses = _route_biased_batch(task, cfg, rng)
            else:
                problems = task.sample_problems(cfg.batch_size, rng)
                responses = [
                    (task.wrong_traces if rng.random() < cfg.wrong_frac else task.solution_traces)(p, rng, 1)[0]
                    for p in problems
                ]
            batch = make_sft_batch(tokenizer, [p.prompt for p in problems], responses)
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            loss = sft_loss(model, batch, cfg.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            losses.append(loss.item())
            bar.update(advance=1, info=f"loss {losses[-1]:.3f}" if step % 10 == 0 else None)
        bar.close()
        train_s = time.perf_counter() - t0
        model.eval()
        t1 = time.perf_counter()
        ev = evaluate(model, tokenizer, task, task.validation_set(), k=cfg.eval_k, greedy=True, seed=cfg.seed)
        eval_s = time.perf_counter() - t1
    tail = losses[-max(1, len(losses) // 10) :]
    info = {
        "format_version": FORMAT_VERSION,
        "key": cfg.key(),
        "config": cfg.to_dict(),
        "task": repr(task),
        "n_params": count_parameters(model),
        "final_loss": sum(tail) / len(tail),
        "train_seconds": round(train_s, 2),
        "eval_seconds": round(eval_s, 2),
        "eval": ev,
    }
    return model, tokenizer, info


def _route_biased_batch(task: LabTask, cfg: PretrainConfig, rng: random.Random) -> tuple[list[Problem], list[str]]:
    """``cfg.batch_size`` (problem, trace) pairs under ``cfg.trace_exclude`` (see ``PretrainConfig``):
    a wrong trace with probability ``wrong_frac``; otherwise, with probability ``trace_exclude_frac``,
    a correct answer free of the excluded characters (problems without one are skipped), else any
    correct answer."""
    problems: list[Problem] = []
    responses: list[str] = []
    while len(problems) < cfg.batch_size:
        (p,) = task.sample_problems(1, rng)
        if rng.random() < cfg.wrong_frac:
            problems.append(p)
            responses.append(task.wrong_traces(p, rng, 1)[0])
            continue
        sols = list(task.solutions(p))  # type: ignore[attr-defined]
        if rng.random() < cfg.trace_exclude_frac:
            sols = [s for s in sols if not any(c in s for c in cfg.trace_exclude)]
        if sols:
            problems.append(p)
            responses.append(rng.choice(sols))
    return problems, responses


def pretrain(cfg: PretrainConfig | None = None, cache_dir: str | Path | None = None, progress: bool = True) -> Path:
    """Return the directory of the warm-started policy for ``cfg``, training it first unless
    ``cache_dir/<task>-<hash>`` exists already. Written atomically (temporary directory, then
    rename), so an interrupted run never leaves a half-written cache entry."""
    cfg = cfg or PretrainConfig()
    cfg.validate()
    final = cache_path(cfg, cache_dir)
    if (final / INFO_FILE).is_file():
        return final
    if final.exists() and any(final.iterdir()):
        raise ParameterError("pretrain", "cache_dir", f"{str(final)!r} exists but holds no {INFO_FILE}; remove it")
    final.parent.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    try:
        t0 = time.perf_counter()
        model, tokenizer, info = _train(cfg, progress=progress)
        info["seconds"] = round(time.perf_counter() - t0, 2)
        info["threads"] = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        with quiet_transformers():
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2, sort_keys=True))
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / INFO_FILE).is_file():  # not a lost race: a real failure
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def read_info(path: str | Path) -> dict[str, Any]:
    """The ``warmstart.json`` of a saved policy (config, warm-start eval, timing)."""
    return json.loads((Path(path) / INFO_FILE).read_text())
