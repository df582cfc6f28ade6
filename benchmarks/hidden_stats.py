"""Benchmark: per-token statistics straight from hidden states vs materialised logits.

Shape: ``rows`` hidden states ``[rows, D]`` and an output projection ``[V, D]`` (float32, no bias),
default 1,024 rows × V = 151,936 at D = 896 and D = 3,584. Variants:

- ``hidden2`` / ``hidden4``: ``ef.core.token_stats_from_hidden`` with ``stats=("logp", "entropy")``
  / all four statistics, default chunks;
- ``logits_ts``: ``ef.token_stats(hidden @ W.T, ids)`` (all four statistics; the ``[rows, V]``
  logits are built first, default chunk size);
- ``trl2`` / ``trl_s2``: TRL 1.16's ``trl.kernels.ChunkedLogProbFunction`` (its CPU torch path)
  with ``outputs=("entropy",)`` / ``("entropy", "log_sum_sq_probs")``, the vocabulary chunk its
  GRPO trainer passes (32,768). Its ``log_sum_sq_probs`` is not differentiable, so ``trl_s2``'s
  backward carries the gradients of logp and entropy only;
- ``naive``: ``log_softmax(hidden @ W.T)``, gather, ``−Σ π log π``.

Modes: ``fwd`` (no autograd) and ``fwd_bwd`` (``hidden`` and ``W`` require grad; forward, then
backward of a random linear combination of the differentiable outputs).

Memory, honestly: every measurement is a fresh process (``OMP_NUM_THREADS`` = ``--threads``);
peak extra memory = peak RSS (``ru_maxrss``) − RSS after the inputs were allocated and a small
warm-up (8 rows × 4,096 vocabulary rows, so the warm-up's own peak stays far below the run's)
ran. It counts everything the process touched, torch's allocations included (tracemalloc would
not see them). ``working`` subtracts the gradients the call must return (∇hidden and ∇W,
``rows·D + V·D`` floats, the same for every variant), leaving the memory the method itself needs.
Variants are interleaved, the order rotated every repetition; medians of ``--runs``. Time is
wall clock (``perf_counter``) and, next to it, the process's CPU time (``process_time``, all
threads), which is less sensitive to other processes sharing the cores.

    python benchmarks/hidden_stats.py                                  # D = 896 and 3,584, 3 runs
    python benchmarks/hidden_stats.py --dims 896 --runs 1 --rows 128   # smoke run
    python benchmarks/hidden_stats.py --tile-sweep 1024,8192,32768 --dims 896   # chunk_vocab, forward

``--tile-sweep``: forward + backward of ``hidden4`` at each ``chunk_vocab`` listed (default
``chunk_rows``), interleaved in one process (inputs allocated once; time only), medians of ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from _memory import peak_rss_bytes, rss_bytes  # benchmarks/_memory.py
from _schedule import interleaved  # benchmarks/_schedule.py

MIB = 1024 * 1024
VARIANTS = ("hidden2", "hidden4", "logits_ts", "trl2", "trl_s2", "naive")
MODES = ("fwd", "fwd_bwd")
TRL_CHUNK = 32768  # trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE in TRL 1.16


def _function(variant: str):
    """``f(hidden, weight, ids) -> tuple of differentiable per-token tensors`` (logp first, then entropy)."""
    import torch

    if variant in ("hidden2", "hidden4"):
        from entflow.core.hidden_stats import token_stats_from_hidden

        stats = ("logp", "entropy") if variant == "hidden2" else ("logp", "entropy", "sum_p2", "sum_p2_logp")

        def f(h, w, ids):
            return tuple(o for o in token_stats_from_hidden(h, w, ids, stats=stats) if o is not None)

    elif variant == "logits_ts":
        import entflow as ef

        def f(h, w, ids):
            return tuple(ef.token_stats(h @ w.T, ids))

    elif variant in ("trl2", "trl_s2"):
        from trl.kernels import ChunkedLogProbFunction

        outputs = ("entropy",) if variant == "trl2" else ("entropy", "log_sum_sq_probs")

        def f(h, w, ids):
            out = ChunkedLogProbFunction.apply(h, w, None, ids, 1.0, TRL_CHUNK, None, 1.0, outputs)
            return tuple(o for o in out[:2])  # logp, entropy (log_sum_sq_probs: not differentiable)

    elif variant == "naive":

        def f(h, w, ids):
            logpi = torch.log_softmax(h @ w.T, dim=-1)
            return logpi.gather(-1, ids.unsqueeze(-1)).squeeze(-1), -(logpi.exp() * logpi).sum(-1)

    else:
        raise ValueError(variant)
    return f


def worker(variant: str, mode: str, rows: int, vocab: int, dim: int, threads: int, seed: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    f = _function(variant)
    torch.manual_seed(seed)
    hidden = torch.randn(rows, dim)
    weight = torch.randn(vocab, dim).mul_(2.0 / dim**0.5)  # logits with std ≈ 2, as in the other benchmarks
    ids = torch.randint(0, vocab, (rows,))
    coef = torch.randn(4, dtype=torch.float64).tolist()
    backward = mode == "fwd_bwd"

    def objective(out):
        return sum(c * o.sum() for c, o in zip(coef, out, strict=False))

    # warm-up on a small slice (thread pools, kernels), outside the measured window
    hs, ws = hidden[:8].clone().requires_grad_(backward), weight[:4096].clone().requires_grad_(backward)
    out = f(hs, ws, ids[:8] % 4096)
    if backward:
        objective(out).backward()
    del hs, ws, out
    hidden.requires_grad_(backward)
    weight.requires_grad_(backward)

    base = rss_bytes()
    c0 = time.process_time()
    t0 = time.perf_counter()
    if backward:
        out = f(hidden, weight, ids)
        objective(out).backward()
    else:
        with torch.no_grad():
            out = f(hidden, weight, ids)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - c0
    peak = peak_rss_bytes()
    res = {"variant": variant, "mode": mode, "time_s": elapsed, "peak_extra_mib": max(peak - base, 0) / MIB}
    res["cpu_s"] = cpu
    res["logp_sum"], res["entropy_sum"] = float(out[0].detach().double().sum()), float(out[1].detach().double().sum())
    if backward:
        res["grad_h_abs_sum"] = float(hidden.grad.double().abs().sum())
        res["grad_w_abs_sum"] = float(weight.grad.double().abs().sum())
        res["grads_mib"] = (hidden.grad.numel() * hidden.grad.element_size() + weight.grad.numel() * 4) / MIB
    return res


def run(variant: str, mode: str, dim: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", variant, mode, str(dim)]
    cmd += ["--rows", str(args.rows), "--vocab", str(args.vocab), "--threads", str(args.threads)]
    cmd += ["--seed", str(args.seed)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    res = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if res.returncode:
        raise RuntimeError(f"{variant} {mode} D={dim} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def report(dim: int, pairs, results, args, seconds: float) -> None:
    load = os.getloadavg()
    print(
        f"\nD={dim}: rows={args.rows}, V={args.vocab}, float32, {args.threads} threads, median of {args.runs} "
        f"fresh processes, {seconds:.0f} s; {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}\n"
    )
    med = {}
    for p, rs in results.items():
        t = statistics.median(r["time_s"] for r in rs)
        m = statistics.median(r["peak_extra_mib"] for r in rs)
        work = statistics.median(r["peak_extra_mib"] - r.get("grads_mib", 0.0) for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        med[p] = (t, m, work, cpu)
    print("| variant | mode | median time (s) | min–max (s) | × logits_ts time | × trl2 time | CPU s | × logits_ts CPU "
          "| × trl2 CPU | peak extra MiB | working MiB | × logits_ts peak | × logits_ts working |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for v, m in pairs:
        t, mem, work, cpu = med[(v, m)]
        ts = [r["time_s"] for r in results[(v, m)]]
        base, trl = med.get(("logits_ts", m)), med.get(("trl2", m))
        rt = f"{t / base[0]:.2f}" if base else "—"
        rtrl = f"{t / trl[0]:.2f}" if trl else "—"
        rm = f"{mem / base[1]:.3f}" if base and base[1] > 0 else "—"
        rw = f"{work / base[2]:.3f}" if base and base[2] > 0 else "—"
        rc = f"{cpu / base[3]:.2f}" if base else "—"
        rctrl = f"{cpu / trl[3]:.2f}" if trl else "—"
        print(f"| {v} | {m} | {t:.2f} | {min(ts):.2f}–{max(ts):.2f} | {rt} | {rtrl} | {cpu:.1f} | {rc} | {rctrl} "
              f"| {mem:.0f} | {work:.0f} | {rm} | {rw} |")  # fmt: skip
    for m in {m for _, m in pairs}:
        for v in {v for v, mm in pairs if mm == m}:
            # the gradients of four statistics compare with logits_ts, those of two with naive
            other = {"hidden4": "logits_ts", "logits_ts": "hidden4"}.get(v, "naive")
            ref = results.get((other, m)) or results[pairs[0]]
            a, b = results[(v, m)][0], ref[0]
            keys = ["logp_sum", "entropy_sum"] + (["grad_h_abs_sum", "grad_w_abs_sum"] if m == "fwd_bwd" else [])
            d = max(abs(a[k] - b[k]) / max(abs(b[k]), 1e-12) for k in keys)
            print(f"{m} {v}: relative difference of Σlogp, ΣH (and Σ|∇h|, Σ|∇W|) to {b['variant']}: {d:.1e}")
    need = [(v, "fwd_bwd") for v in ("hidden2", "hidden4", "logits_ts", "trl2")]
    if all(p in med for p in need):
        h2, h4, ts, trl = (med[p] for p in need)
        checks = [
            ("peak extra memory hidden4 / logits_ts ≤ 0.25", h4[1] / ts[1], 0.25),
            ("working memory hidden4 / logits_ts ≤ 0.25", h4[2] / ts[2], 0.25),
            ("time hidden4 / logits_ts ≤ 1.2", h4[0] / ts[0], 1.2),
            ("time hidden2 / logits_ts ≤ 1.2", h2[0] / ts[0], 1.2),
            ("time hidden2 / trl2 ≤ 1.0", h2[0] / trl[0], 1.0),
            ("time hidden4 / trl2 ≤ 1.2", h4[0] / trl[0], 1.2),
            ("CPU time hidden4 / logits_ts ≤ 1.2", h4[3] / ts[3], 1.2),
            ("CPU time hidden2 / trl2 ≤ 1.0", h2[3] / trl[3], 1.0),
            ("CPU time hidden4 / trl2 ≤ 1.2", h4[3] / trl[3], 1.2),
        ]
        print(f"\ntargets (forward+backward, D={dim}):")
        for name, val, lim in checks:
            print(f"- {name}: {val:.3f} → {'met' if val <= lim else 'NOT met'}")


def tile_sweep(dim: int, cols: list[int], args: argparse.Namespace) -> None:
    import torch

    from entflow.core.hidden_stats import token_stats_from_hidden

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    hidden = torch.randn(args.rows, dim, requires_grad=True)
    weight = torch.randn(args.vocab, dim).mul_(2.0 / dim**0.5).requires_grad_(True)
    ids = torch.randint(0, args.vocab, (args.rows,))
    times: dict[int, list[float]] = {c: [] for c in cols}
    for rep in range(args.runs):
        for c in cols if rep % 2 == 0 else cols[::-1]:
            hidden.grad = weight.grad = None
            t0 = time.perf_counter()
            out = token_stats_from_hidden(hidden, weight, ids, chunk_vocab=c)
            sum(o.sum() for o in out).backward()
            times[c].append(time.perf_counter() - t0)
            print(f"D={dim} chunk_vocab={c}: {times[c][-1]:.2f} s", flush=True)
    print(f"\n| chunk_vocab (D={dim}, {args.rows} rows, V={args.vocab}) | median fwd+bwd (s) | min–max (s) |")
    print("|---:|---:|---:|")
    for c in cols:
        print(f"| {c} | {statistics.median(times[c]):.2f} | {min(times[c]):.2f}–{max(times[c]):.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--dims", default="896,3584")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--tile-sweep", default=None, help="comma-separated chunk_vocab values to time (hidden4)")
    ap.add_argument("--worker", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tile_sweep:
        for dim in (int(d) for d in args.dims.split(",")):
            tile_sweep(dim, [int(c) for c in args.tile_sweep.split(",")], args)
        return
    if args.worker:
        v, m, d = args.worker
        print(json.dumps(worker(v, m, args.rows, args.vocab, int(d), args.threads, args.seed)))
        return

    pairs = [(v, m) for m in args.modes.split(",") for v in args.variants.split(",")]
    for dim in (int(d) for d in args.dims.split(",")):
        results: dict[tuple[str, str], list[dict]] = {p: [] for p in pairs}
        start = time.time()
        for rep, order in interleaved(pairs, args.runs):
            for v, m in order:
                r = run(v, m, dim, args)
                results[(v, m)].append(r)
                print(f"D={dim} run {rep + 1}/{args.runs} {v:9s} {m:8s} {r['time_s']:8.2f} s "
                      f"{r['peak_extra_mib']:8.0f} MiB", flush=True)  # fmt: skip
        report(dim, pairs, results, args, time.time() - start)


if __name__ == "__main__":
    main()
