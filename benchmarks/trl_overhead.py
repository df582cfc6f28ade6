"""Time per optimizer step: TRL's GRPOTrainer vs EntflowGRPOTrainer, and the lab's step.

    .venv/bin/python benchmarks/trl_overhead.py [--rounds 6] [--steps 4] [--prompts 8] [--group 8] [--threads 1]

Variants (same policy — by default the lab's architecture, ~1.06 M parameters, freshly
initialised; ``--model`` for another — same countdown prompts, same seed, same config):

- ``trl``: ``trl.GRPOTrainer`` (loss_type dapo);
- ``entflow:grpo`` / ``entflow:steer`` / ``entflow:clip_higher+kl_cov``: ``EntflowGRPOTrainer``;
- ``lab``: one step of entflow's lab trainer (``entflow.trainer.step.train_step``, GRPO, one
  mini-batch, no audit) at the same P × G, model and maximum response length (9 tokens).

One "step" is one optimizer step including generation (P·G completions with
``transformers.generate``), rewards, advantages, forward, loss, backward and AdamW. The variants
run interleaved: each round runs ``--steps`` optimizer steps of every variant, in a rotated order;
the first step of each run (warm-up) is dropped. Reported: the median step time of each variant
and its ratio to ``trl``, plus the median of the per-round ratios (robust to a shared machine).

``--out r.json`` writes every timed step of every variant and round (``benchmarks/_result.py``);
``python benchmarks/trl_overhead.py --from-json r.json`` prints the tables from it and trains nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import _result  # benchmarks/_result.py (torch, datasets, transformers, trl: imported by the measurement only)

METHODS = ("grpo", "steer", "clip_higher+kl_cov")


def step_timer():
    """A ``TrainerCallback`` recording the wall and CPU time of each optimizer step (generation
    included: TRL generates inside the step). CPU time (``time.process_time``, one torch thread) is
    what the step costs this process, much less sensitive than wall time to other jobs on a shared
    machine. (The class is made here so that ``--from-json`` never imports transformers.)"""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.wall: list[float] = []
            self.cpu: list[float] = []
            self._t0 = self._c0 = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._t0, self._c0 = time.perf_counter(), time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            self.wall.append(time.perf_counter() - self._t0)
            self.cpu.append(time.process_time() - self._c0)

    return StepTimer()


def timed(obj, name: str, acc: list[float]) -> None:
    """Wrap ``obj.name`` to add its CPU time to ``acc[0]`` (the part of the step entflow replaces)."""
    fn = getattr(obj, name)

    def wrapper(*args, **kwargs):
        c0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[0] += time.process_time() - c0

    setattr(obj, name, wrapper)


def countdown(n: int, seed: int):
    """The lab's countdown task, and the dataset and reward of examples/trl_grpo.py for TRL."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from trl_grpo import countdown_dataset  # examples/trl_grpo.py

    from entflow.lab.tasks import get_task

    return get_task("countdown"), *countdown_dataset(n, seed)


def trl_run(name: str, model_path: str, data, reward, a, out: str, keep: bool = False):
    from trl import GRPOConfig, GRPOTrainer

    from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer

    common = dict(
        output_dir=out,
        per_device_train_batch_size=a.prompts * a.group // a.grad_accum,
        gradient_accumulation_steps=a.grad_accum,
        num_generations=a.group,
        max_completion_length=a.max_len,
        max_steps=a.steps,
        learning_rate=1e-5,
        lr_scheduler_type="constant",
        temperature=1.0,
        seed=0,
        use_cpu=True,
        bf16=False,
        report_to="none",
        logging_steps=10_000,
        save_strategy="no",
        disable_tqdm=True,
    )
    if name == "trl":
        args = GRPOConfig(**common)
        cls = GRPOTrainer
    else:
        args = EntflowGRPOConfig(**common, entflow_method=name.split(":", 1)[1])
        cls = EntflowGRPOTrainer
    timer = step_timer()
    trainer = cls(model=model_path, reward_funcs=reward, args=args, train_dataset=data, callbacks=[timer])
    loss_cpu, gen_cpu = [0.0], [0.0]
    timed(trainer, "_compute_loss", loss_cpu)  # forward + entflow/TRL loss (backward is outside)
    timed(trainer, "_generate_and_score_completions", gen_cpu)
    trainer.train()
    if keep:
        return trainer
    n = len(timer.wall)
    return {
        "wall": timer.wall[1:],
        "cpu": timer.cpu[1:],
        "loss_cpu": [loss_cpu[0] / n],  # mean per step over the run (warm-up included)
        "gen_cpu": [gen_cpu[0] / n],
    }


def loss_timings(model_path: str, data, reward, a, out: str) -> dict[str, list[float]]:
    """CPU time of forward + loss + backward on one fixed generated micro-batch, per variant,
    interleaved ``a.loss_reps`` times: the part of the step entflow replaces, without the noise
    of generation."""
    variants = ["trl", *(f"entflow:{m}" for m in a.methods.split(","))]
    trainers = {}
    for v in variants:
        b = argparse.Namespace(**{**vars(a), "steps": 1})
        trainers[v] = trl_run(v, model_path, data, reward, b, os.path.join(out, "loss_" + v.replace(":", "_")), True)
    res: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(a.loss_reps):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            trainer = trainers[v]
            inputs = trainer._buffered_inputs[0]
            c0 = time.process_time()
            loss = trainer.compute_loss(trainer.model, inputs)
            loss.backward()
            res[v].append(time.process_time() - c0)
            trainer.model.zero_grad(set_to_none=True)
    return res


def lab_run(model_path: str, task, a, step0: int) -> dict[str, list[float]]:
    from entflow.lab.config import LabConfig
    from entflow.lab.policy import load_policy
    from entflow.methods import get_method
    from entflow.trainer.loop import make_optimizer
    from entflow.trainer.step import train_step

    model, tokenizer = load_policy(model_path)
    cfg = LabConfig(
        prompts_per_step=a.prompts, group_size=a.group, mini_batches=1, ppo_epochs=1, audit=False, progress=False
    )
    method = get_method("grpo")
    optimizer = make_optimizer(model, cfg)
    wall, cpu = [], []
    for s in range(a.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        train_step(model, tokenizer, task, method, optimizer, cfg, step0 + s)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall": wall[1:], "cpu": cpu[1:]}


def measure(a: argparse.Namespace) -> dict:
    """Every timed step's seconds per variant, kind and round, and the fixed-batch loss timings."""
    # every library the runs use, imported before the thread count is set (as when these were module imports)
    import datasets  # noqa: F401
    import torch
    import transformers  # noqa: F401
    import trl  # noqa: F401

    import entflow.integrations.trl
    import entflow.trainer.step  # noqa: F401
    from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer

    torch.set_num_threads(a.threads)
    task, data, reward = countdown(4096, 0)
    tmp_model = tempfile.TemporaryDirectory()
    model_path = a.model or tmp_model.name
    if a.model is None:  # the lab's policy architecture (~1.06 M parameters), freshly initialised
        tok = build_tokenizer(task.alphabet)
        build_policy(tok, PolicyConfig(), seed=0).save_pretrained(model_path)
        tok.save_pretrained(model_path)
    a.max_len = task.max_response_len
    variants = ["trl", *(f"entflow:{m}" for m in a.methods.split(","))] + (["lab"] if a.grad_accum == 1 else [])
    kinds = ("wall", "cpu", "loss_cpu", "gen_cpu")
    rounds: dict[str, dict[str, list[list[float]]]] = {v: {k: [] for k in kinds} for v in variants}
    with tempfile.TemporaryDirectory() as out:
        for r in range(a.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for v in order:
                if v == "lab":
                    res = lab_run(model_path, task, a, step0=r * a.steps)
                else:
                    res = trl_run(v, model_path, data, reward, a, os.path.join(out, v.replace(":", "_")))
                for k, t in res.items():
                    rounds[v][k].append(list(t))
            print(
                f"round {r + 1}/{a.rounds} (cpu s/step): "
                + ", ".join(f"{v} {statistics.median(rounds[v]['cpu'][-1]):.3f}" for v in variants),
                flush=True,
            )
    loss = {}
    if a.loss_reps:
        with tempfile.TemporaryDirectory() as out:
            loss = loss_timings(model_path, data, reward, a, out)
    settings = {k: getattr(a, k) for k in ("rounds", "steps", "prompts", "group", "threads", "grad_accum", "max_len")}
    return {**settings, "machine": platform.machine(), "torch": torch.__version__, "rounds_s": rounds, "loss_s": loss}


def report(results: dict) -> str:
    """The step tables (CPU and wall, with per-round ratios), the replaced parts and the loss table."""
    med = statistics.median
    rounds = results["rounds_s"]
    variants = list(rounds)
    out = [
        f"trl_overhead, {results['machine']}, torch {results['torch']}, threads={results['threads']}; "
        f"P={results['prompts']} G={results['group']} max_len={results['max_len']} "
        f"grad_accum={results['grad_accum']}; {results['rounds']} rounds × {results['steps'] - 1} timed steps"
    ]
    for kind, title in (("cpu", "CPU time per optimizer step"), ("wall", "wall time per optimizer step")):
        every = {v: [x for rnd in rounds[v][kind] for x in rnd] for v in variants}
        base = med(every["trl"])
        rows = []
        for v in variants:
            t = every[v]
            ratios = [med(x) / med(y) for x, y in zip(rounds[v][kind], rounds["trl"][kind], strict=True)]
            rows.append(
                [v, f"{med(t):.3f}", f"{min(t):.3f}–{max(t):.3f}", f"{med(t) / base:.3f}", f"{med(ratios):.3f}"]
            )
        header = ["variant", "median s", "min–max", "ratio to trl (medians)", "median of per-round ratios"]
        out += [title, _result.markdown_table(header, rows)]
    parts = [
        [v, f"{med([x for r in rounds[v]['loss_cpu'] for x in r]):.4f}",
         f"{med([x for r in rounds[v]['gen_cpu'] for x in r]):.4f}"]
        for v in variants if v != "lab"
    ]  # fmt: skip
    out += [
        "CPU s per step inside the parts entflow replaces (median over runs)",
        _result.markdown_table(
            ["variant", "forward + loss (`_compute_loss`)", "generation + scoring + advantages"], parts
        ),
    ]
    if results["loss_s"]:
        lt = results["loss_s"]
        base = med(lt["trl"])
        n = results["prompts"] * results["group"] // results["grad_accum"]
        rows = [[v, f"{med(t):.4f}", f"{min(t):.4f}–{max(t):.4f}", f"{med(t) / base:.3f}"] for v, t in lt.items()]
        out += [
            f"forward + loss + backward on one fixed micro-batch of {n} completions, CPU s",
            _result.markdown_table(["variant", "median s", "min–max", "ratio to trl"], rows),
        ]
    return "\n\n".join(out)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per run (the first is dropped)")
    ap.add_argument("--prompts", type=int, default=8, help="P prompts per step")
    ap.add_argument("--group", type=int, default=8, help="G completions per prompt")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--loss-reps", type=int, default=30, help="repetitions of the fixed-batch loss timing (0: skip)")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (>1: no lab row)")
    ap.add_argument("--methods", default=",".join(METHODS), help="entflow methods to time, comma-separated")
    ap.add_argument("--model", default=None, help="a saved policy (default: the lab's architecture, random init)")


def main() -> None:
    _result.main(__doc__, options, measure, report)


if __name__ == "__main__":
    main()
