"""Is one real-model training step bit-reproducible on this CPU with several threads, and if not, which
op is not? (the fix: :func:`entflow.trainer.determinism.deterministic_kernels`).

    PYTHONPATH=src .venv/bin/python benchmarks/determinism.py bisect [--repeats 3] [--compete] [--no-fix]
        [--ops] [--modules] [--dump FILE] [--against FILE] [--steps 1]
    PYTHONPATH=src .venv/bin/python benchmarks/determinism.py compare DUMP_A DUMP_B
    PYTHONPATH=src .venv/bin/python benchmarks/determinism.py replay [--reruns 10] [--no-fix]
    PYTHONPATH=src .venv/bin/python benchmarks/determinism.py cost [--reps 5] [--out FILE]
    PYTHONPATH=src .venv/bin/python benchmarks/determinism.py twins [--steps 20] [--collect --work DIR] [--out FILE]
    PYTHONPATH=src .venv/bin/python benchmarks/determinism.py --from-json FILE...

``bisect`` runs one step of the real-v2 design setting
(``src/entflow/hf/configs/real_v2_design.yaml``, KL-Cov with ratio 2e-3 as the registry's
``kl_cov_paper``, seed 8, 2 threads; SmolLM2-135M) as its pieces — the rollout (``generate`` and the
rollout policy's statistics), then per mini-batch the update's forward, the loss, the backward, the
gradient norm and the optimizer step — ``--repeats`` times in this process from the same starting
weights and seeds, and reports the first piece (and tensor) that differs from the first repeat's.
``--ops`` also records every aten op of step 1's first ``--trace-batches`` mini-batches' forward and
backward (a ``TorchDispatchMode``: the op, a checksum of its inputs before the call and of its
outputs after) and names the first op whose inputs agree with the first repeat's and whose outputs
do not — the op that is not deterministic. ``--modules`` records each module's ``grad_input`` /
``grad_output`` (``register_full_backward_hook``). ``--compete`` keeps a second process busy on both
cores (a torch matmul loop with 2 threads) during every repeat after the first. ``--dump FILE``
saves the first repeat's records and ``--against FILE`` compares with a saved one; ``compare A B``
compares two saved ones (two processes started together). ``--no-fix`` runs without
``deterministic_kernels`` (the state before the fix); ``--steps`` runs that many consecutive steps
per repeat.

``replay`` localises without depending on a race happening twice alike: step 1's rollout, then its
first mini-batch's forward, loss and backward with every computing aten op rerun ``--reruns`` times,
back to back, on copies of its own inputs; it prints each op whose reruns are not bit-identical to
its first call (a tracer that pauses between ops lets the worker threads fall asleep, which hides
a race: ``bisect --ops`` on a repeat that raced shows where it spread, ``replay`` which op raced).

``twins`` is the whole-run check: three ``entflow train`` processes of that setting (``--steps``,
checkpoints every ``--checkpoint-every`` steps) started at the same time, so that they compete for
the cores; the third is killed with SIGKILL at a random moment (a seeded draw: once its log has a
random step, after a random further delay) and resumed with ``--resume``. It records each run's
SHA-256 of ``metrics.jsonl``, ``samples.jsonl``, the checkpoint after the last step (weights, AdamW's
moments, RNG states) and the final model, the kill's moment and the resume's line, and whether all
three are byte-identical; ``--out`` writes it. ``--collect --work DIR`` only compares the runs already
in ``DIR`` (the same ``--steps`` and ``--kill-seed``): for runs stopped after their last step, a file
not written by all three is named and left out.

``cost`` times whole steps of that setting (``entflow.trainer.step.train_step``, from the same
weights, seed and step each time) with and without :func:`deterministic_kernels`, interleaved
(``benchmarks/_schedule.py``), and reports the medians; ``--out`` writes every time
(``benchmarks/_result.py``), ``--from-json`` prints the table from a saved file.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _result  # benchmarks/_result.py

PRESET = Path(__file__).resolve().parents[1] / "src/entflow/hf/configs/real_v2_design.yaml"
OVERRIDES = ["method=kl_cov", "method.ratio=0.002", "seed=8", "threads=2", "progress=false", "audit=false"]
# a second process keeping both cores busy: torch matmuls on 2 threads
COMPETITOR = "import torch\ntorch.set_num_threads(2)\na = torch.randn(512, 512)\nwhile True:\n    a = (a @ a).tanh()\n"


def digest(t: Any) -> str:
    """A hash of a tensor's bytes (dtype and shape included): equal iff bit-identical (up to collisions)."""
    import torch

    t = t.detach()
    if t.layout != torch.strided or t.device.type != "cpu":
        t = t.to_dense().cpu() if t.layout != torch.strided else t.cpu()
    raw = t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes()
    return hashlib.blake2b(raw + f"{t.dtype}{tuple(t.shape)}".encode(), digest_size=8).hexdigest()


def quick_digest(t: Any) -> int:
    """A fast bit checksum for the op trace: the sum of the tensor's bytes read as integers (a
    torch reduction, not a hash; two bit patterns that differ almost never sum alike)."""
    import torch

    t = t.detach()
    if t.layout != torch.strided or t.device.type != "cpu" or t.numel() == 0:
        return 0 if t.numel() == 0 else hash(digest(t))
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return int(t.reshape(-1).view(width).sum(dtype=torch.int64)) if t.dtype != torch.bool else int(t.sum())


# ops whose outputs are uninitialized memory: their bits say nothing
UNINITIALIZED = ("aten.empty", "aten.new_empty", "aten.empty_like", "aten.empty_strided")


def _tensors(x: Any) -> list:
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(x) if isinstance(t, torch.Tensor)]


def op_tracer():
    """A ``TorchDispatchMode`` recording ``(op, input checksums, output checksums)`` of every aten op
    (inputs before the call, so an in-place op's input is what it read; an ``empty`` op's output,
    uninitialized memory, not at all)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpTrace(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.records: list[tuple[str, list[str], list[str]]] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            ins = [quick_digest(t) for t in _tensors((args, kwargs))]
            out = func(*args, **kwargs)
            name = str(func)
            outs = [] if name.startswith(UNINITIALIZED) else [quick_digest(t) for t in _tensors(out)]
            self.records.append((name, ins, outs))
            return out

    return OpTrace()


def op_replayer(k: int):
    """A ``TorchDispatchMode`` that runs every computing aten op ``k`` more times, back to back, on
    copies of the inputs it was given, and records each op whose outputs are not bit-identical to
    its first call's: ``(index, op, reruns that differ, output shapes)``. Views (outputs aliasing an
    input), ``empty`` ops (uninitialized memory) and ops without a floating-point output are not
    rerun. Back to back, the threads are awake, as they are inside one training step."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    def clone(x):
        return x.clone() if isinstance(x, torch.Tensor) else x

    def same(a, b) -> bool:
        return a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))

    class Replay(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.flagged: list[tuple[int, str, int, list]] = []
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            schema = func._schema
            aliasing = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
            skip = aliasing or str(func).startswith(UNINITIALIZED) or func is torch.ops.aten.detach.default
            saved = None if skip else (tree_map(clone, args), tree_map(clone, kwargs))
            out = func(*args, **kwargs)
            self.n += 1
            first = [t for t in _tensors(out) if t.is_floating_point()]
            if saved is None or not first:
                return out
            first = [t.detach().clone() for t in first]
            differ = 0
            for _ in range(k):
                a, kw = tree_map(clone, saved[0]), tree_map(clone, saved[1])
                again = [t for t in _tensors(func(*a, **kw)) if t.is_floating_point()]
                differ += any(not same(x, y) for x, y in zip(first, again, strict=True))
            if differ:
                self.flagged.append((self.n - 1, str(func), differ, [list(t.shape) for t in first]))
            return out

    return Replay()


def replay(a: argparse.Namespace) -> None:
    """Step 1's rollout, then its first mini-batch's forward and backward with every op rerun
    ``--reruns`` times on its own inputs (:func:`op_replayer`): the ops that are not deterministic."""
    import torch

    from entflow.methods.objective import compute_advantages, policy_loss
    from entflow.trainer.collect import collect_rollout, rollout_batch
    from entflow.trainer.determinism import deterministic_kernels
    from entflow.trainer.seeds import STEP, stream_seed
    from entflow.trainer.step import current_stats, mini_batch

    h = Harness(a.override)
    cfg, plan, model = h.cfg, h.plan, h.parts.model
    fix = "off" if a.no_fix else "on"
    head = f"real-v2 design, {cfg.method} {cfg.method_params}, seed {cfg.seed}, {cfg.threads} threads, fix {fix}"
    print(f"{head}: every op of step 1's first mini-batch rerun {a.reruns} times", flush=True)
    h.reset()
    with deterministic_kernels(not a.no_fix):
        torch.manual_seed(stream_seed(cfg.seed, STEP, 1))
        col = collect_rollout(model, h.parts.tokenizer, h.parts.task, cfg, 1, plan.rollout_stats(False))
        full = rollout_batch(col, cfg, 1)
        adv = compute_advantages(full, h.method, scale=cfg.adv_scale)
        model.train()
        gen = torch.Generator().manual_seed(stream_seed(cfg.seed, STEP, 1))
        idx = torch.randperm(col.roll.rewards.shape[0], generator=gen).chunk(plan.mini_batches)[0]
        with op_replayer(a.reruns) as fwd:
            cur, topk = current_stats(model, col.roll, idx, cfg, plan)
            res = policy_loss(mini_batch(full, adv, idx, cur, topk), h.method, plan.spec)
        with op_replayer(a.reruns) as bwd:
            res.loss.backward()
    for what, mode in (("forward and loss", fwd), ("backward", bwd)):
        print(f"{what}: {mode.n} ops, {len(mode.flagged)} not deterministic on their own inputs")
        for i, op, differ, shapes in mode.flagged:
            print(f"  op {i}: {op}, {differ} of {a.reruns} reruns differ, outputs {shapes}")


def module_hooks(model: Any, records: list) -> list:
    """``register_full_backward_hook`` on every module: ``(name, grad_output hashes, grad_input hashes)``."""

    def hook(name):
        def f(module, grad_input, grad_output):
            records.append((name, [quick_digest(g) for g in grad_output if g is not None],
                            [digest(g) for g in grad_input if g is not None]))  # fmt: skip

        return f

    return [m.register_full_backward_hook(hook(n)) for n, m in model.named_modules() if n]


class Harness:
    """The real-v2 design setting's model, task, method and step plan, and its starting weights."""

    def __init__(self, overrides: list[str]):
        import torch
        import yaml

        from entflow.hf.setup import RealTrainConfig, real_setup
        from entflow.settings.compare import one_run_of
        from entflow.trainer.config import build_config
        from entflow.trainer.step import plan_steps

        raw = one_run_of(yaml.safe_load(PRESET.read_text()), method_chosen=True)  # OVERRIDES name the method
        self.cfg = build_config(raw, [*OVERRIDES, *overrides], cls=RealTrainConfig)
        torch.set_num_threads(self.cfg.threads)
        self.method = self.cfg.validate()
        self.parts = real_setup(self.cfg)
        self.plan = plan_steps(self.method, self.cfg)
        self.start = {k: v.detach().clone() for k, v in self.parts.model.state_dict().items()}

    def reset(self):
        """The starting weights, a fresh method state and optimizer (``make_optimizer``, as a run has)."""
        import torch

        from entflow.trainer.loop import make_optimizer

        with torch.no_grad():
            for k, v in self.parts.model.state_dict().items():
                v.copy_(self.start[k])
        self.method = self.cfg.validate()
        return make_optimizer(self.parts.model, self.cfg)

    def pieces(self, steps: int, ops: bool, modules: bool, trace_batches: int = 1) -> list[tuple[str, str, Any]]:
        """One repeat: ``(piece, tensor name, hash or op records)`` in the order they were made; op
        records (``ops``) of step 1's first ``trace_batches`` mini-batches."""
        import torch

        from entflow.methods.objective import compute_advantages, policy_loss
        from entflow.trainer.collect import collect_rollout, rollout_batch
        from entflow.trainer.seeds import STEP, stream_seed
        from entflow.trainer.step import current_stats, mini_batch

        cfg, plan, model, tok, task = self.cfg, self.plan, self.parts.model, self.parts.tokenizer, self.parts.task
        out: list[tuple[str, str, Any]] = []
        optimizer = self.reset()
        for step in range(1, steps + 1):
            s = f"step {step}"
            torch.manual_seed(stream_seed(cfg.seed, STEP, step))
            col = collect_rollout(model, tok, task, cfg, step, plan.rollout_stats(False))
            roll = col.roll
            for name in ("response_ids", "logits"):
                out.append((f"{s} rollout (generate)", name, digest(getattr(roll, name))))
            for name in plan.old_stats:
                out.append((f"{s} rollout statistics", name, digest(getattr(col.old, name))))
            full = rollout_batch(col, cfg, step)
            adv = compute_advantages(full, self.method, scale=cfg.adv_scale)
            out.append((f"{s} advantages", "adv", digest(adv)))
            model.train()
            gen = torch.Generator().manual_seed(stream_seed(cfg.seed, STEP, step))
            order = torch.randperm(roll.rewards.shape[0], generator=gen)
            for i, idx in enumerate(order.chunk(plan.mini_batches)):
                mb = f"{s} mini-batch {i + 1}"
                traced = ops and i < trace_batches and step == 1
                trace = op_tracer() if traced else contextlib.nullcontext()
                with trace:
                    cur, topk = current_stats(model, roll, idx, cfg, plan)
                if traced:
                    out.append((f"{mb} forward ops", "ops", trace.records))
                for name in plan.update_stats:
                    out.append((f"{mb} forward", name, digest(getattr(cur, name))))
                res = policy_loss(mini_batch(full, adv, idx, cur, topk), self.method, plan.spec)
                out.append((f"{mb} loss", "loss", digest(res.loss)))
                optimizer.zero_grad(set_to_none=True)
                hooks, mods = (module_hooks(model, mrec := []), True) if modules else ([], False)
                trace = op_tracer() if traced else contextlib.nullcontext()
                with trace:
                    res.loss.backward()
                for h in hooks:
                    h.remove()
                if traced:
                    out.append((f"{mb} backward ops", "ops", trace.records))
                if mods:
                    out.append((f"{mb} backward modules", "modules", mrec))
                for name, p in model.named_parameters():
                    if p.grad is not None:
                        out.append((f"{mb} backward (gradient)", name, digest(p.grad)))
                norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
                out.append((f"{mb} grad norm", "grad_norm", digest(norm)))
                optimizer.step()
                for name, p in model.named_parameters():
                    out.append((f"{mb} optimizer step (parameter)", name, digest(p)))
            self.method.update({"step": step - 1, "entropy": float(full.old_entropy.mean())})
        return out


def first_op_difference(a: list, b: list) -> str:
    """The first op whose outputs differ, and the first whose inputs agree but outputs differ."""
    first = culprit = None
    for k, (ra, rb) in enumerate(zip(a, b, strict=False)):
        if ra[0] != rb[0]:
            return f"op sequences part at op {k}: {ra[0]} vs {rb[0]}"
        if ra[2] != rb[2]:
            if first is None:
                first = f"op {k} {ra[0]}"
            if ra[1] == rb[1] and culprit is None:
                culprit = f"op {k} {ra[0]} (inputs identical, outputs differ)"
    if first is None:
        return f"all {len(a)} ops identical"
    n = sum(ra[2] != rb[2] for ra, rb in zip(a, b, strict=False))
    return (
        f"first differing output: {first}; first op nondeterministic on identical inputs: {culprit}; "
        f"{n} of {len(a)} op outputs differ"
    )


def compare(a: list, b: list) -> list[str]:
    """Per piece: identical, or the first tensor that differs (and for op records, the op)."""
    lines, seen, reported = [], set(), 0
    for (pa, na, ha), (pb, nb, hb) in zip(a, b, strict=True):
        assert (pa, na) == (pb, nb), (pa, na, pb, nb)
        if na == "ops":
            verdict = first_op_difference(ha, hb)
            if not verdict.startswith("all"):
                lines.append(f"  {pa}: {verdict}")
            continue
        if na == "modules":
            diff = [ra[0] for ra, rb in zip(ha, hb, strict=False) if ra[2] != rb[2]]
            if diff:
                lines.append(f"  {pa}: {len(diff)} modules' grad_input differ, first in backward order: {diff[0]}")
            continue
        if ha != hb and pa not in seen:
            seen.add(pa)
            reported += 1
            lines.append(f"  {pa}: DIFFERS (first: {na})")
    return lines or ["  every piece bit-identical"]


class Competitor:
    """A second process keeping the cores busy while inside (``enabled``)."""

    def __init__(self, enabled: bool):
        self.enabled, self.proc = enabled, None

    def __enter__(self):
        if self.enabled:
            self.proc = subprocess.Popen([sys.executable, "-c", COMPETITOR])
            time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()


def bisect(a: argparse.Namespace) -> None:
    from entflow.trainer.determinism import deterministic_kernels

    h = Harness(a.override)
    print(f"real-v2 design, {h.cfg.method} {h.cfg.method_params}, seed {h.cfg.seed}, {h.cfg.threads} threads, "
          f"fix {'off' if a.no_fix else 'on'}, {a.steps} step(s) per repeat", flush=True)  # fmt: skip
    runs = []
    for rep in range(a.repeats):
        t0 = time.perf_counter()
        with Competitor(a.compete and rep > 0), deterministic_kernels(not a.no_fix):
            runs.append(h.pieces(a.steps, a.ops, a.modules, a.trace_batches))
        busy = " (a second process busy on both cores)" if a.compete and rep > 0 else ""
        print(f"repeat {rep + 1}{busy}: {time.perf_counter() - t0:.1f} s", flush=True)
        if rep > 0:
            print("\n".join(compare(runs[0], runs[-1])), flush=True)
    if a.dump:
        Path(a.dump).write_text(json.dumps(runs[0]))
    if a.against:
        print(f"against {a.against}:")
        print("\n".join(compare(json.loads(Path(a.against).read_text()), json.loads(json.dumps(runs[0])))))


def op_times(reps: int) -> dict[str, list[float]]:
    """Seconds of the op alone: the backward of ``body[0][reads]`` at a real-v2 mini-batch's shape
    (8 rows of 16 tokens, hidden 576, each row's first read its group's last prompt token), with
    and without :func:`deterministic_kernels`, interleaved."""
    import torch

    from _schedule import interleaved_times  # benchmarks/_schedule.py
    from entflow.trainer.determinism import deterministic_kernels

    g = torch.Generator().manual_seed(0)
    n, t, d, length = 8, 16, 576, 200
    group = torch.tensor([0, 1, 0, 2, 3, 0, 1, 3])  # the groups of a mini-batch's rows
    reads = torch.cat([(10 + 8 * group)[:, None], 60 + torch.arange(n)[:, None] * (t - 1) + torch.arange(t - 1)], 1)
    body = torch.randn(length, d, generator=g).requires_grad_()
    grad = torch.randn(n, t, d, generator=g)

    def backward(on: bool) -> None:
        with deterministic_kernels(on):
            body.grad = None
            body[reads].backward(grad)

    return interleaved_times({"without": lambda: backward(False), "with": lambda: backward(True)}, reps)


def cost(a: argparse.Namespace) -> None:
    import torch

    from _schedule import interleaved  # benchmarks/_schedule.py
    from entflow.trainer.determinism import deterministic_kernels
    from entflow.trainer.seeds import STEP, stream_seed
    from entflow.trainer.step import train_step

    torch.set_num_threads(2)
    results: dict = {"op": op_times(a.op_reps)}
    h = Harness(a.override)
    arms = {"without": False, "with": True}
    wall: dict[str, list[float]] = {k: [] for k in arms}
    cpu: dict[str, list[float]] = {k: [] for k in arms}
    parts: dict[str, list[dict]] = {k: [] for k in arms}

    def one(arm: str) -> tuple[float, float, dict]:
        optimizer = h.reset()
        torch.manual_seed(stream_seed(h.cfg.seed, STEP, 1))
        with deterministic_kernels(arms[arm]):
            t0, c0 = time.perf_counter(), time.process_time()
            _, _, timings = train_step(
                h.parts.model, h.parts.tokenizer, h.parts.task, h.method, optimizer, h.cfg, 1, plan=h.plan
            )
            return time.perf_counter() - t0, time.process_time() - c0, timings

    for arm in arms:  # warm-up
        one(arm)
    for rep, order in interleaved(list(arms), a.reps):
        for arm in order:
            s, c, timings = one(arm)
            wall[arm].append(s)
            cpu[arm].append(c)
            parts[arm].append(timings)
            print(f"repeat {rep + 1} {arm}: {s:.2f} s, CPU {c:.2f} s (update {timings['time/update_s']:.2f} s)",
                  flush=True)  # fmt: skip
    results |= {"setting": "real_v2_design.yaml + " + " ".join([*OVERRIDES, *a.override]), "wall_s": wall,
                "cpu_s": cpu, "timings": parts}  # fmt: skip
    _result.print_and_save(results, report, a.out)


def report(results: dict) -> str:
    """The step's medians (wall, process CPU, the update's wall) per arm and the op's, each × without."""
    med = statistics.median
    wall, cpu, timings = results["wall_s"], results["cpu_s"], results["timings"]
    rows = []
    for arm in wall:
        upd = [t["time/update_s"] for t in timings[arm]]
        cells = [f"{med(x[arm]):.2f} ({med(x[arm]) / med(x['without']):.3f}×)" for x in (wall, cpu)]
        base_upd = med(t["time/update_s"] for t in timings["without"])
        rows.append([arm, str(len(wall[arm])), *cells, f"{med(upd):.2f} ({med(upd) / base_upd:.3f}×)"])
    head = ["deterministic_kernels", "steps", "step wall s", "step process CPU s", "update wall s"]
    op = results["op"]
    op_rows = [
        [arm, str(len(ts)), f"{med(ts) * 1e3:.3f} ({med(ts) / med(op['without']):.2f}×)"] for arm, ts in op.items()
    ]
    return (
        f"One step of {results['setting']}, medians of interleaved repeats (× without):\n\n"
        + _result.markdown_table(head, rows)
        + "\n\nThe op alone: the backward of the packed forward's read `body[0][reads]` (8 rows × 16 tokens × 576):\n\n"
        + _result.markdown_table(["deterministic_kernels", "calls", "ms (median)"], op_rows)
    )


#: what twins compares: the logs, the checkpoint after the last step (weights, AdamW's moments, every RNG
#: state) and the final model (written after the final evaluation)
RUN_FILES = ("metrics.jsonl", "samples.jsonl", "checkpoints/last.pt", "checkpoints/final/model.safetensors")
RUNS = ("a", "b", "killed")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def twins(a: argparse.Namespace) -> dict:
    """Two uninterrupted runs and one killed and resumed, all started together (``twins`` above); with
    ``--collect``, the result of a twins folder whose runs were stopped after their last step."""
    import random
    import tempfile

    out = Path(a.work or tempfile.mkdtemp(prefix="entflow-twins-"))
    draw = random.Random(a.kill_seed)
    kill_step, kill_delay = draw.randint(1, a.steps - 2), draw.uniform(0.0, a.kill_delay_max)
    kill = {"after_logged_step": kill_step, "delay_s": round(kill_delay, 2)}
    t0 = time.time()
    if not a.collect:
        kill |= run_twins(out, a, kill_step, kill_delay)
    resumed = next(ln for ln in (out / "killed.log").read_text().splitlines() if "resuming" in ln)
    kill["resume_line"] = resumed.replace(str(out), "…").strip()
    present = [f for f in RUN_FILES if all((out / n / f).is_file() for n in RUNS)]
    digests = {n: {f: sha256(out / n / f) for f in present} for n in RUNS}
    return {
        "twins": True,
        "setting": "real_v2_design.yaml + " + " ".join([*OVERRIDES, *a.override]),
        "steps": a.steps,
        "checkpoint_every": a.checkpoint_every,
        "kill": kill,
        "wall_s": None if a.collect else round(time.time() - t0, 1),
        "collected": bool(a.collect),
        "metrics_lines": {n: len((out / n / "metrics.jsonl").read_text().splitlines()) for n in RUNS},
        "last_step": {n: json.loads((out / n / "metrics.jsonl").read_text().splitlines()[-1])["step"] for n in RUNS},
        "not_written": [f for f in RUN_FILES if f not in present],
        "sha256": digests,
        "identical": {f: len({d[f] for d in digests.values()}) == 1 for f in present},
    }


def run_twins(out: Path, a: argparse.Namespace, kill_step: int, kill_delay: float) -> dict:
    """Start the three runs in ``out``, SIGKILL the third ``kill_delay`` s after its log reaches
    ``kill_step``, resume it, wait for all; the kill's moment."""
    import os
    import signal

    keys = [*OVERRIDES, f"steps={a.steps}", f"checkpoint_every={a.checkpoint_every}", f"out_dir={out}", *a.override]
    base = [sys.executable, "-m", "entflow", "train", "--config", str(PRESET), *keys]  # method= picks the run
    env = {**os.environ, "TQDM_DISABLE": "1"}
    logs = {name: (out / f"{name}.log").open("w") for name in RUNS}

    def start(name: str, *extra: str) -> subprocess.Popen:
        cmd = [*base, "--name", name, *extra] if not extra else [*base[:4], *extra]
        return subprocess.Popen(cmd, stdout=logs[name], stderr=subprocess.STDOUT, env=env)

    t0 = time.time()
    procs = {name: start(name) for name in RUNS}
    metrics = out / "killed" / "metrics.jsonl"
    while not (metrics.exists() and any(json.loads(x)["step"] >= kill_step for x in metrics.read_text().splitlines())):
        if procs["killed"].poll() is not None:
            raise RuntimeError(f"the run to kill ended before step {kill_step}: {out / 'killed.log'}")
        time.sleep(1)
    time.sleep(kill_delay)
    procs["killed"].send_signal(signal.SIGKILL)
    procs["killed"].wait()
    moment = {"wall_s": round(time.time() - t0, 1)}
    moment["last_logged_step_at_kill"] = max(json.loads(x)["step"] for x in metrics.read_text().splitlines())
    logs["killed"].write("\n--- SIGKILL ---\n")
    logs["killed"].flush()
    procs["killed"] = start("killed", "--resume", str(out / "killed"))
    codes = {name: p.wait() for name, p in procs.items()}
    for f in logs.values():
        f.close()
    if any(codes.values()):
        raise RuntimeError(f"a run failed: exit codes {codes}; logs in {out}")
    return moment


def twins_report(results: dict) -> str:
    """Which files of the three runs are byte-identical, and where the third was killed."""
    k = results["kill"]
    rows = [
        [f"`{f}`", *(results["sha256"][n][f][:16] for n in RUNS), "yes" if same else "NO"]
        for f, same in results["identical"].items()
    ]
    when = (
        f" ({k['wall_s']} s after the start; its log's last step then {k['last_logged_step_at_kill']})"
        if "wall_s" in k
        else ""
    )
    lines = [
        f"{results['setting']}, {results['steps']} steps, three runs started together (checkpoints every "
        f"{results['checkpoint_every']} steps); the third killed with SIGKILL {k['delay_s']} s after its log "
        f'reached step {k["after_logged_step"]}{when} and resumed: "{k["resume_line"].strip()}"',
        "",
        _result.markdown_table(["file", "run a (SHA-256)", "run b", "killed and resumed", "identical"], rows),
        "",
        f"metrics.jsonl lines: {results['metrics_lines']}; last step logged: {results['last_step']}"
        + (f"; all three wall {results['wall_s']} s." if results.get("wall_s") else "."),
    ]
    if results.get("not_written"):
        lines.append(
            f"Not compared, not written by every run (the runs were stopped after their last step, during the "
            f"final evaluation): {', '.join(f'`{f}`' for f in results['not_written'])}."
        )
    return "\n".join(lines)


def any_report(results: dict) -> str:
    """``--from-json``: the table of a ``twins`` or a ``cost`` result."""
    return twins_report(results) if results.get("twins") else report(results)


def main() -> None:
    if sys.argv[1:2] == ["--from-json"]:  # docs_tables.py prints a saved result of any subcommand this way
        _result.print_saved(sys.argv[2:], any_report)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bisect")
    b.add_argument("--repeats", type=int, default=3)
    b.add_argument("--steps", type=int, default=1)
    b.add_argument("--compete", action="store_true")
    b.add_argument("--no-fix", action="store_true")
    b.add_argument("--ops", action="store_true")
    b.add_argument("--trace-batches", type=int, default=1, help="--ops: trace step 1's first N mini-batches")
    b.add_argument("--modules", action="store_true")
    b.add_argument("--dump", default=None)
    b.add_argument("--against", default=None)
    b.add_argument("--override", nargs="*", default=[], help="more key=value overrides of the setting")
    d = sub.add_parser("compare", help="compare two --dump files (two processes' first repeats)")
    d.add_argument("files", nargs=2)
    r = sub.add_parser("replay", help="rerun every op of step 1's first mini-batch on its own inputs")
    r.add_argument("--reruns", type=int, default=10)
    r.add_argument("--no-fix", action="store_true")
    r.add_argument("--override", nargs="*", default=[])
    c = sub.add_parser("cost")
    c.add_argument("--reps", type=int, default=5)
    c.add_argument("--op-reps", type=int, default=200, help="calls of the op alone per arm")
    c.add_argument("--override", nargs="*", default=[])
    _result.add_arguments(c)
    w = sub.add_parser("twins", help="two runs and one killed and resumed, started together, byte for byte")
    w.add_argument("--steps", type=int, default=20)
    w.add_argument("--checkpoint-every", type=int, default=5)
    w.add_argument("--kill-seed", type=int, default=0, help="seed of the kill's random moment")
    w.add_argument("--kill-delay-max", type=float, default=30.0, help="the kill waits up to this many s after its step")
    w.add_argument("--work", default=None, help="folder of the three runs (default: a new temporary one)")
    w.add_argument("--override", nargs="*", default=[])
    w.add_argument("--collect", action="store_true", help="only compare the runs already in --work")
    w.add_argument("--out", default=None, help="also write the result as JSON (date, machine, command)")
    a = ap.parse_args()
    if a.cmd == "twins":
        _result.print_and_save(twins(a), twins_report, a.out)
        return
    if a.cmd == "cost" and a.from_json:
        _result.print_saved(a.from_json, report)
        return
    if a.cmd == "compare":
        x, y = (json.loads(Path(f).read_text()) for f in a.files)
        print("\n".join(compare(x, y)))
        return
    {"bisect": bisect, "replay": replay, "cost": cost}[a.cmd](a)


if __name__ == "__main__":
    main()
