"""A real-model training step, entflow against plain ``trl.GRPOTrainer``, split by phase.

    PYTHONPATH=src .venv/bin/python benchmarks/real_step.py --rounds 3 --steps 6
    ... --baseline-src /tmp/base/src --baseline-set checkpoint_every=1 --baseline-set checkpoint_minutes=null
    ... --trl-variant gradient_checkpointing=false     # the second TRL arm's GRPOConfig fields (this is the default)

Both trainers train SmolLM2-135M-Instruct (``load_model("smollm2")``, float32) on the same prompts:
``basic_arithmetic`` with two one-digit terms through the chat template, P = 4 prompts × G = 4
responses per step, at most 32 new tokens at temperature 1, two mini-batches (two AdamW steps of 8
responses per rollout; lr 1e-6, gradient clipping 1.0), ``exact_match`` reward, no KL term, the
same number of torch threads, float32 on both sides (``GRPOConfig(bf16=False)``: TRL's default
``bf16=True`` would autocast its CPU forward and backward to bfloat16). TRL's step is one
generation cycle (``steps_per_generation = 2`` optimizer steps, ``shuffle_dataset=False`` over
entflow's prompts of steps 1, 2, …, so cycle k sees entflow step k's prompts). Everything else
of TRL is its own default: the optimizer is ``GRPOConfig``'s default ``optim`` (transformers ≥ 5
with torch ≥ 2.8: ``adamw_torch_fused``, torch's fused AdamW kernel, which runs on the CPU too) and
gradient checkpointing is on (``GRPOConfig``'s default); a second TRL arm turns checkpointing off
(``--trl-variant``, default ``gradient_checkpointing=false``), so the ratio is reported against
both. Each TRL arm records the optimizer it resolved (``optim``, ``fused``) and its checkpointing
in its ``config`` line. entflow runs
``entflow.hf.setup.train_real`` at its defaults otherwise
(validation every ``eval_every`` steps, the audit, the checkpoint policy).

Every (round, arm) is a fresh process; the arms' order rotates each round (interleaved, so a
machine loaded by others weighs on every arm alike). Phases, seconds per step (median over steps
2…K of every round; step 1 warms up):

- generation: sampling the P·G responses (entflow: ``time/rollout_s`` − ``time/verify_s``; TRL: ``_generate``);
- scoring: the reward function (entflow ``time/verify_s``; TRL ``_calculate_rewards``);
- old log-probs: the rollout policy's token statistics + advantages (entflow ``time/old_stats_s`` +
  ``time/advantages_s``; TRL
  its no-grad ``_get_per_token_logps_and_entropies`` pass);
- update: forward + backward + optimizer steps of the mini-batches (entflow ``time/update_s``; TRL the
  cycle's wall time minus ``_generate_and_score_completions``);
- audit (entflow only): the forward after the update that measures the true entropy change;
- validation: entflow's held-out evaluation, per step (its total over the steps / K); TRL has none;
- checkpoint: one write of the run's checkpoint, and per step under the run's policy;
- step: wall time between consecutive steps' ends (everything, validation steps excluded), and
  ``step+val`` = mean over all steps with validation and checkpoints amortised.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
P, G, NEW_TOKENS, MINI_BATCHES, LR, SEED = 4, 4, 32, 2, 1e-6, 0
TASK_PARAMS = {"max_terms": 2, "max_digits": 1}
PHASES = ("generation", "scoring", "old_logp", "update", "audit", "validation", "checkpoint")


# --------------------------------------------------------------------------------------------
# workers (one fresh process per round and arm; print one JSON line)
# --------------------------------------------------------------------------------------------


def entflow_worker(steps: int, threads: int, sets: list[str]) -> dict:
    import entflow.trainer.loop as loop
    from entflow.hf.setup import RealTrainConfig, train_real
    from entflow.trainer.config import build_config
    from entflow.trainer.rundir import read_jsonl

    ckpt_s: list[float] = []
    save = loop.save_checkpoint

    def timed_save(path, **state):
        t0 = time.perf_counter()
        save(path, **state)
        ckpt_s.append(time.perf_counter() - t0)

    loop.save_checkpoint = timed_save
    with tempfile.TemporaryDirectory() as out:
        overrides = [
            f"out_dir={out}",
            "name=bench",
            f"steps={steps}",
            f"prompts_per_step={P}",
            f"group_size={G}",
            f"max_new_tokens={NEW_TOKENS}",
            f"mini_batches={MINI_BATCHES}",
            f"lr={LR}",
            f"seed={SEED}",
            f"threads={threads}",
            "progress=false",
            "task=basic_arithmetic",
            "task_params={max_terms: 2, max_digits: 1}",
            *sets,
        ]
        cfg = build_config({}, overrides, cls=RealTrainConfig)
        run = train_real(cfg)
        rows = read_jsonl(run / "timing.jsonl")
        resolved = json.dumps({k: getattr(cfg, k) for k in ("eval_every", "checkpoint_every", "checkpoint_minutes")})
    out_rows = []
    prev = None
    for r in rows:
        end = r["time/elapsed_s"]
        out_rows.append(
            {
                "step": r["step"],
                "generation": r["time/rollout_s"] - r["time/verify_s"],
                "scoring": r["time/verify_s"],
                "old_logp": r["time/old_stats_s"] + r["time/advantages_s"],
                "update": r["time/update_s"],
                "audit": r.get("time/audit_s", 0.0) + r.get("time/diag_s", 0.0),
                "validation": r.get("time/eval_s", 0.0),
                "total": None if prev is None else end - prev,
            }
        )
        prev = end
    return {"rows": out_rows, "checkpoint_s": ckpt_s, "config": resolved}


def trl_worker(steps: int, threads: int, sets: list[str]) -> dict:
    """TRL's arm; ``sets`` (``key=value``, YAML values) override ``GRPOConfig`` fields, e.g.
    ``gradient_checkpointing=false`` (TRL's ``GRPOConfig`` turns it on by default). The optimizer
    is left at ``GRPOConfig``'s default (recorded in the result's ``config``)."""
    import random

    import torch
    import yaml
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from entflow.hf.setup import RealTrainConfig, real_setup
    from entflow.trainer.rollout import step_seed

    torch.set_num_threads(threads)
    cfg = RealTrainConfig(task="basic_arithmetic", task_params=dict(TASK_PARAMS), max_new_tokens=NEW_TOKENS, seed=SEED)
    cfg.validate()
    parts = real_setup(cfg)
    task = parts.task
    problems = [
        p for step in range(1, steps + 1) for p in task.sample_problems(P, random.Random(step_seed(SEED, step)))
    ]
    data = Dataset.from_dict({"prompt": [p.prompt for p in problems], "idx": list(range(len(problems)))})

    def exact_match(completions, idx, **kwargs) -> list[float]:
        return [task.reward(problems[i], c) for c, i in zip(completions, idx, strict=True)]

    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=P * G // MINI_BATCHES,
            gradient_accumulation_steps=1,
            steps_per_generation=MINI_BATCHES,
            num_generations=G,
            max_completion_length=NEW_TOKENS,
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            learning_rate=LR,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            max_grad_norm=1.0,
            beta=0.0,
            max_steps=steps * MINI_BATCHES,
            shuffle_dataset=False,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            bf16=False,  # float32 as entflow's model (GRPOConfig's default, bf16=True, autocasts the CPU to bfloat16)
            seed=SEED,
            disable_tqdm=True,
            **{k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in sets)},
        )
        trainer = GRPOTrainer(
            model=parts.model, reward_funcs=exact_match, args=args, train_dataset=data, processing_class=parts.tokenizer
        )
        spent: dict[str, float] = {"generation": 0.0, "scoring": 0.0, "old_logp": 0.0, "prep": 0.0}

        def timed(name, fn, only_no_grad=False):
            def wrapper(*a, **k):
                if only_no_grad and torch.is_grad_enabled():
                    return fn(*a, **k)
                t0 = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spent[name] += time.perf_counter() - t0

            return wrapper

        trainer._generate = timed("generation", trainer._generate)
        trainer._calculate_rewards = timed("scoring", trainer._calculate_rewards)
        trainer._get_per_token_logps_and_entropies = timed(
            "old_logp", trainer._get_per_token_logps_and_entropies, only_no_grad=True
        )
        trainer._generate_and_score_completions = timed("prep", trainer._generate_and_score_completions)
        ends: list[tuple[float, dict[str, float]]] = []

        class Clock(TrainerCallback):
            def on_train_begin(self, *a, **k):
                ends.append((time.perf_counter(), dict(spent)))

            def on_step_end(self, a, state, control, **k):
                if state.global_step % MINI_BATCHES == 0:  # the end of one generation cycle
                    ends.append((time.perf_counter(), dict(spent)))

        trainer.add_callback(Clock())
        trainer.train()
    rows = []
    for k in range(1, len(ends)):
        (t0, s0), (t1, s1) = ends[k - 1], ends[k]
        d = {n: s1[n] - s0[n] for n in spent}
        rows.append(
            {
                "step": k,
                "generation": d["generation"],
                "scoring": d["scoring"],
                "old_logp": d["old_logp"],
                "update": (t1 - t0) - d["prep"],
                "audit": 0.0,
                "validation": 0.0,
                "total": (t1 - t0) if k > 1 else None,  # cycle 1 includes the trainer's own setup
            }
        )
    logged = sorted({k for h in trainer.state.log_history for k in h})
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate wraps torch's optimizer
    resolved = {
        "optim": getattr(args.optim, "value", str(args.optim)),
        "optimizer": type(opt).__name__,
        "fused": bool(opt.defaults.get("fused")),
        "gradient_checkpointing": bool(args.gradient_checkpointing),
        "bf16": bool(args.bf16),
    }
    return {"rows": rows, "checkpoint_s": [], "logged": logged, "config": resolved}


# --------------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------------


def run_arm(arm: dict, steps: int, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([arm["src"], str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    cmd = [sys.executable, __file__, "--worker", arm["kind"], "--steps", str(steps), "--threads", str(threads)]
    for s in arm.get("sets", []):
        cmd += ["--set", s]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{arm['name']} failed:\n{proc.stderr[-3000:]}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    out = json.loads(line)
    out["wall_s"] = time.perf_counter() - t0
    return out


def summarize(results: list[dict]) -> dict[str, float]:
    rows = [r for res in results for r in res["rows"] if r["step"] >= 2]
    med = {p: statistics.median(r[p] for r in rows) for p in PHASES if p != "checkpoint"}
    plain = [r["total"] for r in rows if r["total"] is not None and r["validation"] == 0.0]
    med["step"] = statistics.median(plain)
    ck = [c for res in results for c in res["checkpoint_s"]]
    med["checkpoint"] = statistics.median(ck) if ck else 0.0
    totals = [r["total"] for r in rows if r["total"] is not None]
    # validation steps count with their validation; checkpoints under the run's own policy are
    # already in the step ends, except the one after the last step (not timed by the run)
    med["step+val"] = statistics.mean(totals)
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6, help="entflow steps = TRL generation cycles per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", action="append", default=[], help="entflow config override key=value")
    ap.add_argument("--baseline-src", default=None, help="another entflow source tree, as a third arm")
    ap.add_argument("--baseline-set", action="append", default=[], help="overrides for the baseline arm")
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument(
        "--trl-variant",
        action="append",
        default=[],
        help="GRPOConfig override key=value for a second TRL arm (default: gradient_checkpointing=false)",
    )
    ap.add_argument("--worker", choices=["entflow", "trl"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="write every round's raw numbers to this JSON file")
    ap.add_argument("--first-round", type=int, default=0, help="the first round's index (sets its arm order)")
    ap.add_argument("--from-json", nargs="+", default=None, help="print the table of --out files, merged (no run)")
    a = ap.parse_args()
    if a.from_json:
        merged: dict[str, list[dict]] = {}
        for f in a.from_json:
            for name, res in json.loads(Path(f).read_text()).items():
                merged.setdefault(name, []).extend(res)
        print_table(merged)
        return
    if a.worker == "entflow":
        print(json.dumps(entflow_worker(a.steps, a.threads, a.set)))
        return
    if a.worker == "trl":
        print(json.dumps(trl_worker(a.steps, a.threads, a.set)))
        return

    arms = [{"name": "entflow", "kind": "entflow", "src": str(ROOT / "src"), "sets": a.set}]
    if a.baseline_src:
        arms.append({"name": "entflow@base", "kind": "entflow", "src": a.baseline_src, "sets": a.baseline_set})
    if not a.no_trl:
        arms.append({"name": "trl", "kind": "trl", "src": str(ROOT / "src")})
        variant = a.trl_variant or ["gradient_checkpointing=false"]
        name = f"trl[{','.join(variant)}]"
        arms.append({"name": name, "kind": "trl", "src": str(ROOT / "src"), "sets": variant})
    results: dict[str, list[dict]] = {arm["name"]: [] for arm in arms}
    for r in range(a.first_round, a.first_round + a.rounds):
        order = arms[r % len(arms) :] + arms[: r % len(arms)]
        for arm in order:
            res = run_arm(arm, a.steps, a.threads)
            results[arm["name"]].append(res)
            load = os.getloadavg()[0]
            print(f"round {r + 1} {arm['name']}: {res['wall_s']:.0f} s (load {load:.1f})", file=sys.stderr)
            if a.out:  # after every arm: a long run stopped early keeps what it measured
                Path(a.out).write_text(json.dumps(results, indent=1))
    print_table(results)


def print_table(results: dict[str, list[dict]]) -> None:
    """The markdown table of per-phase medians and the ratios to TRL (arms without a round are left out)."""
    results = {name: res for name, res in results.items() if res}
    summary = {name: summarize(res) for name, res in results.items()}
    cols = [*PHASES, "step", "step+val"]
    refs = [name for name in summary if name.startswith("trl")]  # every TRL arm is a reference
    heads = "".join(f" × {r} step | × {r} step+val |" for r in refs) or " × TRL |"
    print("| arm | rounds | " + " | ".join(cols) + " |" + heads)
    print("|---|" + "---:|" * (len(cols) + 1 + max(2 * len(refs), 1)))
    for name, s in summary.items():
        ratios = [f"{s[c] / summary[r][c]:.2f}" for r in refs for c in ("step", "step+val")] or ["—"]
        cells = " | ".join(f"{s[c]:.2f}" for c in cols)
        print(f"| {name} | {len(results[name])} | {cells} | {' | '.join(ratios)} |")
    for name, res in results.items():
        if "logged" in res[0]:
            print(f"{name} logs: {', '.join(res[0]['logged'])}")
        if "config" in res[0]:
            print(f"{name} config: {res[0]['config']}")


if __name__ == "__main__":
    main()
