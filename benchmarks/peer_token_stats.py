"""Benchmark: ``ef.token_stats`` against the functions TRL and verl use for log-probs and entropy.

Peers, imported from the installed packages (their CPU paths):

- ``trl``: ``trl.trainer.utils.selective_log_softmax_and_entropy`` (TRL 1.16; on CUDA it would
  dispatch to TRL's fused Triton kernel, on CPU it runs its torch fallback);
- ``verl``: ``verl.utils.torch_functional.logprobs_from_logits`` +
  ``entropy_from_logits_with_chunking`` (verl 0.9.1; without flash-attn, its torch path);
- ``naive``: ``log_softmax`` over the whole tensor, gather, ``-(π·log π).sum``.

entflow runs with its defaults (``chunk_size=None`` = automatic, validation on): ``entflow2``
asks for logp + entropy (what the peers compute), ``entflow4`` for all four statistics.

Each measurement is a **fresh process** (time and peak extra RSS = ``ru_maxrss`` minus the RSS
after the logits were allocated and a small warm-up ran). Variants are interleaved, their order
rotated every repetition; the median of ``--runs`` is reported, with ratios to TRL.

    python benchmarks/peer_token_stats.py                 # 1,024 rows × V = 151,936, 2 threads, 3 runs
    python benchmarks/peer_token_stats.py --rows 64 --runs 1   # smoke run
    python benchmarks/peer_token_stats.py --rows 1024 --runs 3 --out r.json   # + the raw result
    python benchmarks/peer_token_stats.py --from-json r.json   # the report of a saved result; runs nothing

``--out FILE`` writes (``benchmarks/_result.py``) ``date``, ``machine``, ``command``, ``benchmark``
and ``results``: ``rows``, ``vocab``, ``threads``, ``clock``, ``runs``, ``seed``, ``variants`` and
``modes`` (in order), ``seconds`` (the whole run), ``platform``, ``cpus``, ``load_average`` (1, 5,
15 min, at the end) and ``measurements`` (``[mode][variant]``: every repetition's worker record,
``{variant, mode, time_s, peak_extra_mib, logp_sum, entropy_sum}``, + ``grad_abs_sum`` in
``fwd_bwd``). ``--from-json FILE...`` prints each file's report (the settings line, the Markdown
table, the agreement lines and the targets) exactly as the live run printed it.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import _result  # benchmarks/_result.py
from _memory import MIB, peak_rss_bytes, rss_bytes  # benchmarks/_memory.py
from _schedule import in_fresh_process, interleaved_runs  # benchmarks/_schedule.py

VARIANTS = ("entflow2", "entflow4", "trl", "verl", "naive")
MODES = ("fwd", "fwd_bwd")


def _function(variant: str):
    """``f(logits, ids) -> tuple of per-token tensors`` for one variant (imports only its library)."""
    import torch

    if variant.startswith("entflow"):
        import entflow as ef
        from entflow.core.stats_common import STAT_NAMES

        stats = ("logp", "entropy") if variant == "entflow2" else STAT_NAMES

        def f(x, ids):
            return tuple(o for o in ef.token_stats(x, ids, stats=stats) if o is not None)

    elif variant == "trl":
        from trl.trainer.utils import selective_log_softmax_and_entropy

        def f(x, ids):
            return selective_log_softmax_and_entropy(x, ids)

    elif variant == "verl":
        from verl.utils.torch_functional import entropy_from_logits_with_chunking, logprobs_from_logits

        def f(x, ids):
            return logprobs_from_logits(x, ids), entropy_from_logits_with_chunking(x)

    elif variant == "naive":

        def f(x, ids):
            logpi = torch.log_softmax(x, dim=-1)
            return logpi.gather(-1, ids.unsqueeze(-1)).squeeze(-1), -(logpi.exp() * logpi).sum(-1)

    else:
        raise ValueError(variant)
    return f


def worker(variant: str, mode: str, rows: int, vocab: int, threads: int, seed: int, clock: str = "wall") -> dict:
    import torch

    torch.set_num_threads(threads)
    f = _function(variant)
    torch.manual_seed(seed)
    logits = torch.randn(rows, vocab).mul_(2.0)  # allocated in place
    ids = torch.randint(0, vocab, (rows,))
    coef = torch.randn(4, dtype=torch.float64).tolist()
    backward = mode == "fwd_bwd"
    if backward:
        logits.requires_grad_(True)

    def objective(out):
        return sum(c * o.sum() for c, o in zip(coef, out, strict=False))

    small = logits.detach()[:8].clone().requires_grad_(backward)  # warm-up, outside the window
    out = f(small, ids[:8])
    if backward:
        objective(out).backward()
    del small, out

    now = time.perf_counter if clock == "wall" else time.process_time
    base = rss_bytes()
    t0 = now()
    out = f(logits, ids)
    if backward:
        objective(out).backward()
    elapsed = now() - t0
    peak = peak_rss_bytes()
    res = {"variant": variant, "mode": mode, "time_s": elapsed, "peak_extra_mib": max(peak - base, 0) / MIB}
    res["logp_sum"], res["entropy_sum"] = float(out[0].detach().double().sum()), float(out[1].detach().double().sum())
    if backward:
        res["grad_abs_sum"] = float(logits.grad.double().abs().sum())
    return res


def run(variant: str, mode: str, args: argparse.Namespace) -> dict:
    argv = ["--worker", variant, mode, "--rows", str(args.rows), "--vocab", str(args.vocab)]
    argv += ["--threads", str(args.threads), "--seed", str(args.seed), "--clock", args.clock]
    return in_fresh_process(__file__, argv, args.threads)


def report(results: dict) -> str:
    """The settings line, the table (medians, min–max, ratios to TRL), the agreement lines and the
    targets of one result (what ``--out`` writes as ``results``)."""
    variants, modes = results["variants"], results["modes"]
    pairs = [(v, m) for m in modes for v in variants]
    runs = {(v, m): results["measurements"][m][v] for v, m in pairs}
    rows, vocab, load = results["rows"], results["vocab"], results["load_average"]
    lines = [
        f"rows={rows}, V={vocab}, float32 logits ({rows * vocab * 4 / MIB:.0f} MiB), "
        f"{results['threads']} threads, {results['clock']} clock, median of {results['runs']} fresh processes, "
        f"{results['seconds']:.0f} s; "
        f"{results['platform']}, {results['cpus']} CPUs, "
        f"load average at the end {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}",
        "",
    ]
    med = {p: (statistics.median(r["time_s"] for r in rs), statistics.median(r["peak_extra_mib"] for r in rs))
           for p, rs in runs.items()}  # fmt: skip
    header = ["variant", "mode", "median time (s)", "min–max (s)", "× TRL time", "peak extra MiB", "× TRL memory"]
    table = []
    for v, m in pairs:
        t, mem = med[(v, m)]
        ts = [r["time_s"] for r in runs[(v, m)]]
        trl = med.get(("trl", m))
        rt = f"{t / trl[0]:.2f}" if trl else "—"
        rm = f"{mem / trl[1]:.2f}" if trl and trl[1] > 0 else "—"
        table.append([v, m, f"{t:.3f}", f"{min(ts):.3f}–{max(ts):.3f}", rt, f"{mem:.0f}", rm])
    lines.append(_result.markdown_table(header, table))
    # agreement: every variant computes the same logp and entropy
    for m in modes:
        ref = runs.get(("naive", m)) or runs[pairs[0]]
        for v in variants:
            a, b = runs[(v, m)][0], ref[0]
            d = max(abs(a[k] - b[k]) / max(abs(b[k]), 1e-12) for k in ("logp_sum", "entropy_sum"))
            lines.append(f"{m} {v}: relative difference of Σlogp, ΣH to {ref[0]['variant']}: {d:.1e}")
    if all(("trl", m) in med and (f"entflow{n}", m) in med for m in MODES for n in (2, 4)):
        r2f, r2b = (med[("entflow2", m)][0] / med[("trl", m)][0] for m in MODES)
        r4f, r4b = (med[("entflow4", m)][0] / med[("trl", m)][0] for m in MODES)
        mem = med[("entflow2", "fwd_bwd")][1] / med[("trl", "fwd_bwd")][1]
        ok = r2f <= 0.8 and r2b <= 0.8 and mem <= 1.0 and r4f <= 1.0 and r4b <= 1.0
        lines.append(
            f"\ntargets: logp+entropy fwd {r2f:.2f}× and fwd+bwd {r2b:.2f}× TRL (≤ 0.8), "
            f"memory {mem:.2f}× TRL (≤ 1), four stats fwd {r4f:.2f}× / fwd+bwd {r4b:.2f}× TRL's two (≤ 1): "
            f"{'PASS' if ok else 'FAIL'}"
        )
    return "\n".join(lines)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: process CPU time (use with --threads 1 on a loaded machine)",
    )
    ap.add_argument("--worker", nargs=2, default=None, help=argparse.SUPPRESS)


def measure(args: argparse.Namespace) -> dict:
    """Every (variant, mode) ``--runs`` times, interleaved, each in a fresh process; the settings with them."""
    variants, modes = args.variants.split(","), args.modes.split(",")
    start = time.time()
    runs = interleaved_runs(
        [(v, m) for m in modes for v in variants],
        args.runs,
        lambda vm: run(*vm, args),
        lambda vm, r: f"{vm[0]:9s} {vm[1]:8s} {r['time_s']:8.3f} s {r['peak_extra_mib']:8.0f} MiB",
    )
    results = {
        "rows": args.rows,
        "vocab": args.vocab,
        "threads": args.threads,
        "clock": args.clock,
        "runs": args.runs,
        "seed": args.seed,
        "variants": variants,
        "modes": modes,
        "seconds": time.time() - start,
        "platform": platform.machine(),
        "cpus": os.cpu_count(),
        "load_average": list(os.getloadavg()),
        "measurements": {m: {v: runs[(v, m)] for v in variants} for m in modes},
    }
    print()
    return results


def main() -> None:
    _result.main(
        __doc__,
        options,
        measure,
        report,
        worker=lambda a: worker(*a.worker, a.rows, a.vocab, a.threads, a.seed, a.clock),
    )


if __name__ == "__main__":
    main()
