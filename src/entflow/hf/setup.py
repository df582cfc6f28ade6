"""Training a real Hugging Face model with any entflow method (docs/design.md §11 + §10).

The lab trainer (``entflow.trainer.loop.train``) runs unchanged; this module only supplies what
differs for a real model — :class:`RealTrainConfig` (the lab's config plus model / generation /
reward keys, with defaults sized for SmolLM2-135M on a CPU) and :func:`real_setup` (the model,
its tokenizer and a :class:`~entflow.hf.data.ChatTask`). So a real run writes the same run
directory as a lab run (``config.yaml``, ``metrics.jsonl``, ``timing.jsonl``, ``samples.jsonl``,
checkpoints, resume, ``entflow analyze`` report, the entropy-change audit).

``task`` names the data (``basic_arithmetic``, ``gsm_symbolic``, a lab task or a file) and
``task_params`` go to :func:`entflow.hf.data.load_data`. Validation (step 0, every ``eval_every``
steps and the last) is :func:`entflow.hf.evaluate.evaluate_task` on ``val_size`` held-out problems
with ``eval_k`` samples at the training temperature, logged as ``val/acc`` (avg@k),
``val/pass@k``, ``val/maj@k``, ``val/acc_greedy``, ``val/entropy``, ``val/response_len`` and
``val/unparseable_frac`` and ``val/truncated_frac`` (the share of sampled responses that hit
``max_new_tokens`` without an eos). Unless ``probe_prompts`` is 0 (its default is ``val_size``) every
validation also logs ``val/probe_entropy``: the policy's teacher-forced mean token entropy on a
fixed set of prompt + response pairs (:mod:`entflow.hf.probe`), sampled once from the starting
policy on the first ``probe_prompts`` held-out problems at step 0, saved as the run's
``probe.jsonl`` (and, for a model of entflow's cache, in that folder's ``probes/``, so every later
run with the same model, prompts and settings measures the very same tokens); ``val/probe_tokens``
is how many tokens it averages over. With ``coverage_n`` > 0 the starting and the final policy are also
sampled ``coverage_n`` times per held-out problem for their pass@k curves (``coverage.json``, as
a lab run writes it).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from entflow.core.rules import Check, above, at_least, at_least_of, at_most_of, choice, or_null
from entflow.errors import ConfigError, EntflowError
from entflow.trainer.config import TrainConfig, key_help, setting

if TYPE_CHECKING:  # the trainer's loop imports torch: reading the config (``entflow train --help``) does not
    from entflow.trainer.loop import RunSetup

__all__ = ["RealTrainConfig", "add_lora", "real_setup", "train_real"]

VAL_BATCH_ROWS = 64  # most sequences one validation generate call decodes together
# what a real run's starting coverage depends on besides its model and the trainer's keys
WARM_COVERAGE_KEYS = (
    "model",
    "dtype",
    "max_new_tokens",
    "system_prompt",
    "prompt_suffix",
    "few_shot",
    "reward",
    "reward_timeout_s",
    "val_size",
    "coverage_size",
    "coverage_greedy",
    "lora_rank",
    "lora_alpha",
    "share_prompts",
)


DTYPES = ("float32", "bfloat16", "float16", "float64")


def _few_shot_ok(v: Any) -> bool:
    pair = (list, tuple)
    return v is None or (
        isinstance(v, list)
        and all(isinstance(p, pair) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in v)
    )


@dataclass
class RealTrainConfig(TrainConfig):
    """:class:`~entflow.trainer.config.TrainConfig` + the keys of a real model. ``task`` is the data."""

    # the model
    model: str = setting("smollm2", "short name (smollm2), a saved model directory, or a hub id (with allow_hub)")
    allow_hub: bool = setting(False, "allow downloading the model or the data from the Hugging Face hub")
    dtype: str = setting("float32", "dtype of the model's weights", allowed=choice(*DTYPES))
    # prompts, generation, reward
    max_new_tokens: int = setting(48, "most tokens generated per response", allowed=at_least(1))
    system_prompt: str | None = setting(None, "system message of the chat prompt; null: none")
    prompt_suffix: str | None = setting(
        None, "text appended to each problem; null: the data's default (math: the boxed-answer instruction)"
    )
    few_shot: list[list[str]] | None = field(
        default=None,
        metadata=key_help(
            "worked examples [[question, answer], ...] shown as earlier chat turns before each problem; null: none",
            Check("a list of [question, answer] string pairs or null", _few_shot_ok),
        ),
    )
    reward: str | None = setting(None, "the verifiable reward's name; null: the data's default reward")
    reward_timeout_s: float | None = setting(
        5.0, "seconds one reward call may take; null: no limit", allowed=or_null(above(0))
    )
    val_size: int = setting(16, "held-out problems evaluated every eval_every steps", allowed=at_least(1))
    coverage_size: int | None = setting(
        None,
        "held-out problems of the coverage evaluation (the first ones of the evaluated set, a superset of "
        "the val_size evaluated every eval_every steps); null: val_size",
        allowed=or_null(at_least_of("val_size", lambda c: c.val_size, ("val_size",))),
    )
    coverage_greedy: bool = setting(False, "the coverage evaluation also decodes each problem once greedily")
    coverage_seed: int | None = setting(
        None,
        "seed of the coverage evaluation's sampling; null: the run's seed. Fixed, every run seed shares "
        "one evaluation of the starting model (its problems are the same, so only sampling noise is shared)",
    )
    # LoRA (Hu et al. 2021, arXiv 2106.09685) through peft: rank r > 0 trains only the adapters
    # B·A added to every linear layer of the body (peft's "all-linear"; the LM head stays frozen)
    lora_rank: int = setting(
        0,
        "LoRA rank r: r > 0 trains only adapters on every linear layer of the body (needs peft); 0: full fine-tuning",
        allowed=at_least(0),
    )
    lora_alpha: float | None = setting(
        None, "the adapters' scale is alpha / r; null: alpha = 2r", allowed=or_null(above(0))
    )
    # the fixed-text probe (entflow.hf.probe): an entropy measured on the same tokens at every evaluation
    probe_prompts: int | None = setting(
        None,
        "held-out problems of the fixed-text probe (val/probe_entropy), one response each sampled once "
        "from the starting policy; null: val_size; 0: no probe",
        allowed=or_null(at_least(0) & at_most_of("val_size", lambda c: c.val_size, ("val_size",))),
    )
    probe_seed: int = setting(0, "seed of the probe's one sampling (the same probe for every run seed)")
    probe_file: str | None = setting(
        None, "a saved probe (a run's probe.jsonl) measured instead of sampling one; null: sample it at step 0"
    )
    # lab keys with defaults sized for a 135M model on a 2-core CPU (their help is TrainConfig's)
    task: str = field(
        default="basic_arithmetic",
        metadata=key_help("the data: basic_arithmetic, gsm_symbolic, a lab task or a .jsonl/.parquet file"),
    )
    steps: int = 10
    prompts_per_step: int = 2
    group_size: int = 4
    mini_batches: int = 2
    lr: float = 1e-6
    eval_every: int = 5
    eval_k: int = 2
    chunk_size: int | None = 1024
    # checkpoint policy (entflow.trainer.loop): a full fine-tune's checkpoint is the weights plus two
    # AdamW moments (1.6 GB at 135M, 84 GB at 7B) and takes seconds to minutes to write, so a real
    # run checkpoints every 5 minutes of wall clock (and after its last step), not every step
    checkpoint_every: int = 1000
    checkpoint_minutes: float | None = 5.0
    # the fast real-model step (docs/benchmarks.md "real_step against trl.GRPOTrainer"): each
    # group's prompt runs once per forward, the audit's extra forward only on validation steps
    # (with the §9 diagnostics), AdamW as torch's fused kernel
    share_prompts: bool = True
    audit_every: int = 0
    optimizer: str = "adamw_fused"

    @property
    def run_name(self) -> str:
        return self.name or f"{Path(self.model).name}-{self.method.replace('+', '_')}"

    def validate_task(self) -> None:
        """The model, data and reward keys, checked before any model is loaded or converted
        (the shared keys are checked by :meth:`TrainConfig.validate`, which calls this)."""
        from entflow.hf.data import load_data
        from entflow.hf.models import resolve_model
        from entflow.hf.rewards import get_reward

        def need(ok: bool, key: str, what: str) -> None:
            if not ok:
                raise ConfigError(key, f"{what}, got {getattr(self, key)!r}")

        # each key's own values are its Check's (TrainConfig.validate ran them before this)
        if self.probe_prompts is None:
            self.probe_prompts = self.val_size  # config.yaml names the probe size actually used
        if self.probe_file is not None:
            from entflow.hf.probe import Probe

            Probe.load(self.probe_file)  # a missing or corrupt probe fails before any model loads
        if self.lora_rank > 0:
            import importlib.util

            need(importlib.util.find_spec("peft") is not None, "lora_rank", "needs peft (pip install 'entflow[real]')")
            need(not self.hidden_stats, "hidden_stats", "is not available with a LoRA adapter (lora_rank > 0)")
        resolve_model(self.model, allow_hub=self.allow_hub, convert=False)
        try:
            data = load_data(self.task, allow_hub=self.allow_hub, **self.task_params)
        except EntflowError as e:
            raise ConfigError(getattr(e, "key", "task"), str(e)) from e
        except TypeError as e:
            raise ConfigError("task_params", str(e)) from e
        if self.reward is None and isinstance(data.reward, str):
            self.reward = data.reward  # config.yaml names the reward actually used
        if self.reward is not None:
            get_reward(self.reward)


class _ProbeSource:
    """The run's probe, found or made once: the run's own ``probe.jsonl`` (a resumed run), else
    ``probe_file``, else the model cache's copy for these settings, else sampled now (step 0 only:
    the probe must come from the starting policy)."""

    def __init__(self, cfg: RealTrainConfig, cache: Path | None):
        self.cfg, self.cache, self.probe = cfg, cache, None

    def _cache_file(self, prompts: list[str]) -> Path | None:
        if self.cache is None:
            return None
        keys = {k: getattr(self.cfg, k) for k in (*WARM_COVERAGE_KEYS, "temperature", "probe_prompts", "probe_seed")}
        blob = json.dumps({**keys, "prompts": prompts}, sort_keys=True, default=str).encode()
        return self.cache / "probes" / f"{hashlib.sha256(blob).hexdigest()[:20]}.jsonl"

    def get(self, model: Any, tokenizer: Any, task: Any, step: int) -> Any:
        from entflow.hf.probe import Probe, sample_probe

        if self.probe is not None:
            return self.probe
        own = self.cfg.run_dir / "probe.jsonl"
        prompts = [p.prompt for p in task.validation_set()[: self.cfg.probe_prompts]]
        cached = self._cache_file(prompts)
        if own.is_file():
            self.probe = Probe.load(own)
            return self.probe
        if self.cfg.probe_file is not None:
            self.probe = Probe.load(self.cfg.probe_file)
        elif cached is not None and cached.is_file():
            self.probe = Probe.load(cached)
        elif step == 0:
            source = {"model": str(self.cfg.model), "prompts": "the first probe_prompts held-out problems"}
            c = self.cfg
            self.probe = sample_probe(model, tokenizer, prompts, c.max_new_tokens, c.temperature, c.probe_seed, source)
            if cached is not None:
                self.probe.save(cached)
        else:
            raise ConfigError("probe_prompts", f"the run has no probe.jsonl and step {step} is not the starting policy")
        self.probe.save(own)
        return self.probe


def _probe_metrics(probe_source: _ProbeSource, model: Any, tokenizer: Any, task: Any, step: int) -> dict[str, float]:
    from entflow.hf.probe import probe_entropy

    probe = probe_source.get(model, tokenizer, task, step)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    cfg = probe_source.cfg
    h = probe_entropy(model, probe, pad, cfg.temperature, share_prompts=cfg.share_prompts)
    return {"val/probe_entropy": h, "val/probe_tokens": float(probe.n_tokens)}


def _validate(
    model: Any, tokenizer: Any, task: Any, cfg: RealTrainConfig, step: int, probe: _ProbeSource | None = None
) -> dict[str, float]:
    from entflow.hf.evaluate import SamplingConfig, evaluate_task
    from entflow.trainer.seeds import VALIDATION, stream_seed

    sampling = SamplingConfig(
        temperature=cfg.temperature,
        max_new_tokens=cfg.max_new_tokens,
        seed=stream_seed(cfg.seed, VALIDATION, step),
        share_prompts=cfg.share_prompts,
        # the whole validation set in one generate call (up to VAL_BATCH_ROWS rows): a CPU decodes
        # 32 rows in one call ≈ 0.7× the time of two calls of 16 (docs/benchmarks.md "real_step")
        batch_size=max(
            cfg.eval_k, cfg.prompts_per_step * cfg.group_size, min(cfg.val_size * cfg.eval_k, VAL_BATCH_ROWS)
        ),
    )
    res = evaluate_task(model, tokenizer, task, task.validation_set(), cfg.eval_k, sampling=sampling)
    m = {name: v for name, (v, _) in res.metrics.items()}
    k = cfg.eval_k
    out = {
        "val/acc": m[f"avg@{k}"],
        "val/pass@k": m[f"pass@{k}"],
        "val/maj@k": m[f"maj@{k}"],
        "val/acc_greedy": m["greedy"],
        "val/entropy": res.extras["token_entropy"],
        "val/response_len": res.extras["response_len"],
        "val/truncated_frac": res.extras["truncated_frac"],
        "val/unparseable_frac": res.extras["unparseable_frac"],
    }
    if probe is not None:
        out.update(_probe_metrics(probe, model, tokenizer, task, step))
    return out


def _coverage(model: Any, tokenizer: Any, task: Any, cfg: RealTrainConfig) -> dict[str, dict[str, Any]]:
    """The run's coverage (``coverage_n`` > 0): pass@k curves of the policy on the first
    ``coverage_size`` (default ``val_size``) held-out problems, ``coverage_n`` samples each at the
    training temperature, and with ``coverage_greedy`` each problem's greedy answer
    (:func:`entflow.trainer.evaluate.coverage_curves`, the lab's evaluation, one problem's samples
    per ``generate`` call at least, its prefill shared with ``share_prompts``). Written to
    ``coverage.json`` for the starting policy (step 0) and the final one. Its reward calls are not
    counted in the next step's ``reward/errors``."""
    from entflow.trainer.evaluate import coverage_curves

    out = coverage_curves(
        model,
        tokenizer,
        task,
        cfg,
        batch_size=VAL_BATCH_ROWS,
        share_prompts=cfg.share_prompts,
        val_problems=task.coverage_set(cfg.coverage_size or cfg.val_size),
        greedy=cfg.coverage_greedy,
    )
    task.reward_fn.pop_counts()
    return out


def _load_held_out(cfg: RealTrainConfig) -> Any:
    """``cfg.task``'s data with the held-out problems both evaluations read: the periodic
    ``val_size`` and the start/end ``coverage_size``. A set smaller than ``coverage_size`` is a
    ConfigError naming ``coverage_size``."""
    from entflow.errors import ConfigError
    from entflow.hf.data import load_data

    need = max(cfg.val_size, cfg.coverage_size or 0)
    try:
        return load_data(cfg.task, allow_hub=cfg.allow_hub, val_size=need, **cfg.task_params)
    except ConfigError as e:
        if e.key != "val_size" or need == cfg.val_size:
            raise
        raise ConfigError("coverage_size", f"{e.message} (coverage_size={need} > val_size={cfg.val_size})") from e


def real_setup(cfg: RealTrainConfig) -> RunSetup:
    """The model and tokenizer of ``cfg.model`` and a :class:`~entflow.hf.data.ChatTask` for ``cfg.task``."""
    from entflow.hf.data import ChatTask
    from entflow.hf.models import load_model, resolve_model
    from entflow.trainer.loop import RunSetup
    from entflow.trainer.rundir import cache_folder_of

    def load() -> tuple[Any, Any]:
        return load_model(cfg.model, dtype=cfg.dtype, allow_hub=cfg.allow_hub)

    data = _load_held_out(cfg)  # before the model: a held-out set too small fails in seconds
    model, tokenizer = load()
    if cfg.lora_rank > 0:
        model = add_lora(model, cfg.lora_rank, cfg.lora_alpha, cfg.seed)
    task = ChatTask(
        data,
        tokenizer,
        cfg.max_new_tokens,
        cfg.system_prompt,
        cfg.prompt_suffix,
        cfg.reward,
        cfg.reward_timeout_s,
        val_size=cfg.val_size,
        few_shot=cfg.few_shot,
    )
    path = resolve_model(cfg.model, allow_hub=cfg.allow_hub)
    validate = _validate
    if cfg.probe_prompts > 0 or cfg.probe_file is not None:
        validate = functools.partial(_validate, probe=_ProbeSource(cfg, cache_folder_of(path)))
    return RunSetup(
        task,
        model,
        tokenizer,
        path,
        lambda: load()[0],
        validate=validate,
        coverage=_coverage,
        # a model of entflow's cache (SmolLM2's conversion) never changes: runs that start from it with
        # the same seed and settings (GRPO and Clip-Cov of one seed) evaluate its coverage once
        warm_coverage_cache=cache_folder_of(path),
        warm_coverage_key={k: getattr(cfg, k) for k in WARM_COVERAGE_KEYS},
    )


def add_lora(model: Any, rank: int, alpha: float | None = None, seed: int = 0) -> Any:
    """``model`` with LoRA adapters of rank ``rank`` on every linear layer of its body (peft
    ``target_modules="all-linear"``, no dropout, no bias), everything else frozen. peft initialises
    A at random (seeded here by ``seed``, in a forked RNG) and B = 0, so the adapted model starts
    exactly at ``model``."""
    import torch
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank if alpha is None else alpha,
        lora_dropout=0.0,
        target_modules="all-linear",
        bias="none",
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def train_real(cfg: RealTrainConfig, resume: bool = False, overwrite: bool = False, on_step=None) -> Path:
    """Train (or resume) a real model; returns the run directory (same layout as a lab run)."""
    from entflow.trainer.loop import train

    return train(cfg, resume=resume, overwrite=overwrite, on_step=on_step, setup=real_setup)
