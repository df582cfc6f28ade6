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

    python benchmarks/hidden_stats.py --dims 896 --runs 3 --out r.json   # + the raw result
    python benchmarks/hidden_stats.py --from-json r.json                 # its tables; runs nothing

``--out FILE`` writes (``benchmarks/_result.py``) ``date``, ``machine``, ``command``, ``benchmark``
and ``results`` (rewritten after each dimension): ``kind`` ("variants", or "tile_sweep" with
``--tile-sweep``), ``rows``, ``vocab``, ``threads``, ``runs``, ``seed`` and ``dims`` (keyed by D as a
string). For "variants" also ``variants``, ``modes`` (in order), ``platform``, ``cpus``, and per D
``seconds``, ``load_average`` (1, 5, 15 min, at its end) and ``measurements`` (``[mode][variant]``:
every repetition's worker record, ``{variant, mode, time_s, cpu_s, peak_extra_mib, logp_sum,
entropy_sum}``, + ``grad_h_abs_sum``, ``grad_w_abs_sum``, ``grads_mib`` in ``fwd_bwd``). For
"tile_sweep" also ``chunk_vocab`` (in order), and per D ``times`` (per ``chunk_vocab`` as a string,
every repetition's seconds). ``--from-json FILE...`` prints each file's tables (with the settings,
agreement and target lines of the variants) exactly as the live run printed them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import _result  # benchmarks/_result.py
from _memory import MIB, peak_rss_bytes, rss_bytes  # benchmarks/_memory.py
from _schedule import alternating, in_fresh_process, interleaved_runs  # benchmarks/_schedule.py

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
    argv = ["--worker", variant, mode, str(dim), "--rows", str(args.rows), "--vocab", str(args.vocab)]
    argv += ["--threads", str(args.threads), "--seed", str(args.seed)]
    return in_fresh_process(__file__, argv, args.threads)


def report(results: dict, dim: int) -> str:
    """One dimension's settings line, table (medians, min–max, ratios to logits_ts and trl2, working
    memory), agreement lines and targets, from a result of the variants (what ``--out`` writes as
    ``results``; ``dim`` one of its ``dims``)."""
    variants, modes = results["variants"], results["modes"]
    pairs = [(v, m) for m in modes for v in variants]
    d = results["dims"][str(dim)]
    runs = {(v, m): d["measurements"][m][v] for v, m in pairs}
    load = d["load_average"]
    lines = [
        f"D={dim}: rows={results['rows']}, V={results['vocab']}, float32, {results['threads']} threads, "
        f"median of {results['runs']} fresh processes, {d['seconds']:.0f} s; {results['platform']}, "
        f"{results['cpus']} CPUs, load average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}",
        "",
    ]
    med = {}
    for p, rs in runs.items():
        t = statistics.median(r["time_s"] for r in rs)
        m = statistics.median(r["peak_extra_mib"] for r in rs)
        work = statistics.median(r["peak_extra_mib"] - r.get("grads_mib", 0.0) for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        med[p] = (t, m, work, cpu)
    header = ["variant", "mode", "median time (s)", "min–max (s)", "× logits_ts time", "× trl2 time", "CPU s",
              "× logits_ts CPU", "× trl2 CPU", "peak extra MiB", "working MiB", "× logits_ts peak",
              "× logits_ts working"]  # fmt: skip
    table = []
    for v, m in pairs:
        t, mem, work, cpu = med[(v, m)]
        ts = [r["time_s"] for r in runs[(v, m)]]
        base, trl = med.get(("logits_ts", m)), med.get(("trl2", m))
        rt = f"{t / base[0]:.2f}" if base else "—"
        rtrl = f"{t / trl[0]:.2f}" if trl else "—"
        rm = f"{mem / base[1]:.3f}" if base and base[1] > 0 else "—"
        rw = f"{work / base[2]:.3f}" if base and base[2] > 0 else "—"
        rc = f"{cpu / base[3]:.2f}" if base else "—"
        rctrl = f"{cpu / trl[3]:.2f}" if trl else "—"
        table.append([v, m, f"{t:.2f}", f"{min(ts):.2f}–{max(ts):.2f}", rt, rtrl, f"{cpu:.1f}", rc, rctrl,
                      f"{mem:.0f}", f"{work:.0f}", rm, rw])  # fmt: skip
    lines.append(_result.markdown_table(header, table))
    for m in modes:
        for v in variants:
            # the gradients of four statistics compare with logits_ts, those of two with naive
            other = {"hidden4": "logits_ts", "logits_ts": "hidden4"}.get(v, "naive")
            ref = runs.get((other, m)) or runs[next(p for p in pairs if p[1] == m)]
            a, b = runs[(v, m)][0], ref[0]
            keys = ["logp_sum", "entropy_sum"] + (["grad_h_abs_sum", "grad_w_abs_sum"] if m == "fwd_bwd" else [])
            rel = max(abs(a[k] - b[k]) / max(abs(b[k]), 1e-12) for k in keys)
            lines.append(f"{m} {v}: relative difference of Σlogp, ΣH (and Σ|∇h|, Σ|∇W|) to {b['variant']}: {rel:.1e}")
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
        lines.append(f"\ntargets (forward+backward, D={dim}):")
        lines += [f"- {name}: {val:.3f} → {'met' if val <= lim else 'NOT met'}" for name, val, lim in checks]
    return "\n".join(lines)


def tile_table(results: dict, dim: int) -> str:
    """One dimension's table of a tile sweep (what ``--tile-sweep --out`` writes as ``results``):
    median and min–max forward + backward seconds at each ``chunk_vocab``."""
    times = results["dims"][str(dim)]["times"]
    header = [f"chunk_vocab (D={dim}, {results['rows']} rows, V={results['vocab']})", "median fwd+bwd (s)",
              "min–max (s)"]  # fmt: skip
    rows = []
    for c in results["chunk_vocab"]:
        ts = times[str(c)]
        rows.append([str(c), f"{statistics.median(ts):.2f}", f"{min(ts):.2f}–{max(ts):.2f}"])
    return _result.markdown_table(header, rows)


def tables(results: dict) -> str:
    """Every dimension's report (or tile-sweep table) of one result, as the live run printed them."""
    printer = tile_table if results["kind"] == "tile_sweep" else report
    return "\n\n".join(printer(results, int(dim)) for dim in results["dims"])


def tile_sweep(dim: int, cols: list[int], args: argparse.Namespace) -> dict[str, list[float]]:
    """Seconds of each repetition at each ``chunk_vocab`` (keys: ``str(chunk_vocab)``)."""
    import torch

    from entflow.core.hidden_stats import token_stats_from_hidden

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    hidden = torch.randn(args.rows, dim, requires_grad=True)
    weight = torch.randn(args.vocab, dim).mul_(2.0 / dim**0.5).requires_grad_(True)
    ids = torch.randint(0, args.vocab, (args.rows,))
    times: dict[int, list[float]] = {c: [] for c in cols}
    for _, order in alternating(cols, args.runs):
        for c in order:
            hidden.grad = weight.grad = None
            t0 = time.perf_counter()
            out = token_stats_from_hidden(hidden, weight, ids, chunk_vocab=c)
            sum(o.sum() for o in out).backward()
            times[c].append(time.perf_counter() - t0)
            print(f"D={dim} chunk_vocab={c}: {times[c][-1]:.2f} s", flush=True)
    return {str(c): t for c, t in times.items()}


def options(ap: argparse.ArgumentParser) -> None:
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


def measure(args: argparse.Namespace) -> None:
    """Each dimension in turn: the tile sweep (``--tile-sweep``), or every (variant, mode) ``--runs``
    times, interleaved, each in a fresh process; its table printed and, with ``--out``, the result
    saved after it, so that a later dimension that fails keeps the earlier."""
    settings = {"rows": args.rows, "vocab": args.vocab, "threads": args.threads, "runs": args.runs, "seed": args.seed}
    if args.tile_sweep:
        cols = [int(c) for c in args.tile_sweep.split(",")]
        results = {"kind": "tile_sweep", **settings, "chunk_vocab": cols, "dims": {}}
    else:
        variants, modes = args.variants.split(","), args.modes.split(",")
        results = {"kind": "variants", **settings, "variants": variants, "modes": modes}
        results |= {"platform": platform.machine(), "cpus": os.cpu_count(), "dims": {}}
    for dim in (int(d) for d in args.dims.split(",")):
        if args.tile_sweep:
            results["dims"][str(dim)] = {"times": tile_sweep(dim, cols, args)}
        else:
            start = time.time()
            runs = interleaved_runs(
                [(v, m) for m in modes for v in variants],
                args.runs,
                lambda vm, dim=dim: run(*vm, dim, args),
                lambda vm, r: f"{vm[0]:9s} {vm[1]:8s} {r['time_s']:8.2f} s {r['peak_extra_mib']:8.0f} MiB",
                prefix=f"D={dim} ",
            )
            results["dims"][str(dim)] = {
                "seconds": time.time() - start,
                "load_average": list(os.getloadavg()),
                "measurements": {m: {v: runs[(v, m)] for v in variants} for m in modes},
            }
        print()
        print((tile_table if args.tile_sweep else report)(results, dim))
        if args.out:
            _result.write(args.out, results)


def main() -> None:
    _result.main(
        __doc__,
        options,
        measure,
        tables,
        worker=lambda a: worker(a.worker[0], a.worker[1], a.rows, a.vocab, int(a.worker[2]), a.threads, a.seed),
    )


if __name__ == "__main__":
    main()
