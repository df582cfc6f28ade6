"""Benchmark: ``ef.token_stats`` at its default (automatic) chunk size vs a naive full-softmax
computation (docs/design.md §3; target: memory at the default ≤ 1/8 of naive).

Both compute the same four per-token statistics (logp, entropy, Σπ², Σπ² log π) of
``[tokens, vocab]`` float32 logits. Every measurement runs in a fresh subprocess, so memory is
measured robustly: peak extra memory = peak RSS of the process (``ru_maxrss``) minus its RSS
just after the logits were allocated (and a small warm-up call ran). Variants are interleaved
(order alternating per repetition) and the median of ``--runs`` repetitions is reported.

    python benchmarks/token_stats.py                      # V = 151,936, 2,048 tokens, default chunk, 5 runs
    python benchmarks/token_stats.py --chunk 128          # an explicit chunk size instead
    python benchmarks/token_stats.py --tokens 256 --runs 2  # quick smoke run

Variants: ``naive`` (forward), ``chunked`` (forward), ``chunked_fwd_bwd`` (forward + backward of
a random linear combination of the four outputs; its figure includes the [tokens, vocab]
gradient itself, which any backward must allocate). ``--naive-backward`` adds
``naive_fwd_bwd`` (needs several GiB more memory).

    python benchmarks/token_stats.py --runs 3 --out r.json    # + the raw result (date, machine, command)
    python benchmarks/token_stats.py --from-json r.json       # the report of a saved result; runs nothing

``--out FILE`` writes (``benchmarks/_result.py``) ``date``, ``machine``, ``command``, ``benchmark``
and ``results``: ``tokens``, ``vocab``, ``chunk`` ("auto" or the rows given), ``auto_chunk_rows``
(``auto_chunk_size(vocab)``), ``runs``, ``seed``, ``torch_threads``, ``variants`` (in order) and
``measurements`` (per variant, every repetition's ``{variant, time_s, peak_extra_mib, check}``,
``check`` being the sum of all outputs). ``--from-json FILE...`` prints each file's report (the
settings line, the Markdown table, the ratios and the verdict) exactly as the live run printed it.
"""

from __future__ import annotations

import argparse
import statistics
import time

import _result  # benchmarks/_result.py
from _memory import MIB, peak_rss_bytes, rss_bytes  # benchmarks/_memory.py
from _schedule import alternating, in_fresh_process, interleaved_runs  # benchmarks/_schedule.py


def _naive(logits, ids):
    import torch

    logpi = torch.log_softmax(logits.float(), dim=-1)
    pi = logpi.exp()
    logp = logpi.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    entropy = -(pi * logpi).sum(-1)
    p2 = pi * pi
    return logp, entropy, p2.sum(-1), (p2 * logpi).sum(-1)


def worker(variant: str, tokens: int, vocab: int, chunk: int | None, seed: int) -> dict:
    import torch

    import entflow as ef

    torch.manual_seed(seed)
    logits = torch.randn(tokens, vocab)  # allocated in place: no temporary copy
    logits.mul_(2.0)
    ids = torch.randint(0, vocab, (tokens,))
    coef = torch.randn(4, dtype=torch.float64)
    backward = variant.endswith("fwd_bwd")
    if backward:
        logits.requires_grad_(True)

    def call(x, i):
        if variant.startswith("naive"):
            return _naive(x, i)
        return tuple(ef.token_stats(x, i, chunk_size=chunk))

    # warm-up on a small slice (kernel/thread-pool initialisation), outside the measured window
    small = logits.detach()[: min(8, tokens)].clone().requires_grad_(backward)
    out = call(small, ids[: small.shape[0]])
    if backward:
        sum(c * o.sum() for c, o in zip(coef.tolist(), out, strict=True)).backward()
    del small, out

    base = rss_bytes()
    t0 = time.perf_counter()
    out = call(logits, ids)
    if backward:
        sum(c * o.sum() for c, o in zip(coef.tolist(), out, strict=True)).backward()
    elapsed = time.perf_counter() - t0
    peak = peak_rss_bytes()
    check = float(sum(float(o.double().sum()) for o in out))
    return {"variant": variant, "time_s": elapsed, "peak_extra_mib": max(peak - base, 0) / MIB, "check": check}


def run_variant(variant: str, args: argparse.Namespace, seed: int) -> dict:
    argv = ["--worker", variant, "--tokens", str(args.tokens), "--vocab", str(args.vocab), "--chunk", args.chunk]
    return in_fresh_process(__file__, [*argv, "--seed", str(seed)])


def report(results: dict) -> str:
    """The settings line, the table of medians and min–max, the chunked / naive ratios and the
    acceptance verdict of one result (what ``--out`` writes as ``results``)."""
    runs = results["measurements"]
    variants = results["variants"]
    fwd = [runs[v][0]["check"] for v in ("naive", "chunked")]
    rel = abs(fwd[0] - fwd[1]) / max(abs(fwd[0]), 1e-12)
    logits_mib = results["tokens"] * results["vocab"] * 4 / MIB
    auto = f" (= {results['auto_chunk_rows']} rows)" if results["chunk"] == "auto" else ""
    lines = [
        f"tokens={results['tokens']}, vocab={results['vocab']}, float32, chunk_size={results['chunk']}{auto}, "
        f"runs={results['runs']} (median; min–max), logits = {logits_mib:.0f} MiB; "
        f"torch threads = {results['torch_threads']}",
        "",
    ]
    header = [
        "variant",
        "median time (s)",
        "time min–max (s)",
        "median peak extra memory (MiB)",
        "memory min–max (MiB)",
    ]
    rows = []
    med = {}
    for v in variants:
        ts = [r["time_s"] for r in runs[v]]
        ms = [r["peak_extra_mib"] for r in runs[v]]
        med[v] = (statistics.median(ts), statistics.median(ms))
        rows.append(
            [v, f"{med[v][0]:.3f}", f"{min(ts):.3f}–{max(ts):.3f}", f"{med[v][1]:.0f}", f"{min(ms):.0f}–{max(ms):.0f}"]
        )
    lines += [_result.markdown_table(header, rows), ""]
    t_ratio = med["chunked"][0] / med["naive"][0]
    m_ratio = med["chunked"][1] / max(med["naive"][1], 1e-9)
    ok = m_ratio <= 1 / 8 and t_ratio <= 1.2
    lines += [
        f"chunked / naive: time {t_ratio:.2f}×, peak extra memory {m_ratio:.3f}× (1/{1 / max(m_ratio, 1e-9):.1f})",
        f"sum of all outputs, naive vs chunked: relative difference {rel:.2e}",
        f"acceptance (memory ≤ 1/8 of naive at ≤ 1.2× naive time): {'PASS' if ok else 'FAIL'}",
    ]
    return "\n".join(lines)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--chunk", default="auto", help="rows per chunk, or 'auto' (chunk_size=None, the default)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-backward", action="store_true", help="skip chunked forward+backward")
    ap.add_argument("--naive-backward", action="store_true", help="also naive forward+backward (memory-hungry)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)


def _worker(args: argparse.Namespace) -> dict:
    chunk = None if args.chunk == "auto" else int(args.chunk)
    return worker(args.worker, args.tokens, args.vocab, chunk, args.seed)


def measure(args: argparse.Namespace) -> dict:
    """Every variant ``--runs`` times, the order alternating, each in a fresh process; the settings with them."""
    import torch

    from entflow.core.token_stats import auto_chunk_size

    variants = ["naive", "chunked"]
    if not args.no_backward:
        variants.append("chunked_fwd_bwd")
    if args.naive_backward:
        variants.append("naive_fwd_bwd")
    measurements = interleaved_runs(
        variants,
        args.runs,
        lambda v: run_variant(v, args, args.seed),
        lambda v, r: f"{v:16s} {r['time_s']:7.3f} s  {r['peak_extra_mib']:9.1f} MiB",
        schedule=alternating,
    )
    results = {
        "tokens": args.tokens,
        "vocab": args.vocab,
        "chunk": args.chunk,
        "auto_chunk_rows": auto_chunk_size(args.vocab),
        "runs": args.runs,
        "seed": args.seed,
        "torch_threads": torch.get_num_threads(),
        "variants": variants,
        "measurements": measurements,
    }
    print()
    return results


def main() -> None:
    _result.main(__doc__, options, measure, report, worker=_worker)


if __name__ == "__main__":
    main()
