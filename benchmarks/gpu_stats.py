"""Benchmark on a GPU: the per-token statistics, entflow's kernels against TRL's and Liger's, side by side.

Every variant computes, forward + backward, ``0.7·Σ logp − 1.3·Σ entropy`` (what a policy loss with an
entropy term differentiates) from bf16 inputs:

- **logits** ``[N, V]``: ``ef.token_stats(backend="triton")`` (logp + entropy at several forward
  blocks, and all four statistics), ``backend="torch"``, TRL 1.16's
  ``selective_log_softmax_and_entropy`` (its Triton kernel on CUDA) and the naive ``log_softmax``;
- **hidden** ``[N, D]`` and an LM head ``[V, D]``: ``ef.token_stats_from_hidden`` (the fused Triton
  kernel, logp + entropy and all four statistics, plus a sweep of tile settings), TRL 1.16's fused head
  (``trl.kernels.ChunkedLogProbFunction``, the vocabulary chunk its trainer passes), Liger-Kernel's
  ``LigerFusedLinearScaledCrossEntropyFunction`` (its Hopper CuTe kernel where it can be imported,
  else its torch fallback, which is verl's), Liger's Triton fused linear cross-entropy (log-probs only:
  it has no entropy) and the naive ``hidden @ W.T`` then ``log_softmax``.

Variants run interleaved (``benchmarks/_schedule.py``), the order rotated every repetition; time between
``torch.cuda.synchronize`` calls, peak extra memory from ``torch.cuda.max_memory_allocated`` above the
inputs; medians. Every variant's sums and gradient norm are printed next to naive's, so a fast wrong
path shows. The bf16 matmul peak is measured in the same run (8192³, cuBLAS), and each hidden variant's
achieved fraction of it is reported for the three head matmuls a step needs at least (forward, ∇h, ∇W:
6·N·V·D flops), as Liger's README counts them.

    python benchmarks/gpu_stats.py --out gpu_stats.json          # the shapes of docs/benchmarks.md
    python benchmarks/gpu_stats.py --table gpu_stats.json        # print the docs table from a result
    python benchmarks/gpu_stats.py --device cpu --quick          # a smoke run of the torch variants
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable

import torch

import entflow as ef
from _schedule import interleaved  # benchmarks/_schedule.py
from entflow.core.hidden_stats import token_stats_from_hidden
from entflow.doctor.speed import naive_path

MIB = 1024 * 1024
TRL_CHUNK = 32768  # the vocabulary chunk TRL 1.16's GRPO trainer passes to ChunkedLogProbFunction
TWO = ("logp", "entropy")
FOUR = ("logp", "entropy", "sum_p2", "sum_p2_logp")
# (N, D, V): Qwen2.5-0.5B's head at one and eight sequences of 1,024 tokens; Liger's README shape
HIDDEN_SHAPES = [(1024, 896, 151_936), (8192, 896, 151_936), (8192, 4096, 131_072)]
LOGITS_SHAPE = (8192, 151_936)
# fused-kernel settings swept: name -> (forward kernel settings, backward kernel settings, backward chunk
# rows × vocabulary); None keeps the default (src/entflow/core/_triton_hidden_kernels.py, CONFIGS)
SWEEP = {
    "s4": ({"num_stages": 4}, None, None),
    "waves1": ({"waves": 1}, None, None),
    "flat": ({"flat": True}, None, None),
    "flat_s4_waves1": ({"flat": True, "num_stages": 4, "waves": 1}, None, None),
    "bk128": ({"BK": 128}, {"BK": 128}, None),
    "grad_bm64_w4": (None, {"BM": 64, "BN": 128, "num_warps": 4}, None),
    "chunks8192x16384": (None, None, (8192, 16384)),
    "flat_s4_waves1_chunks": ({"flat": True, "num_stages": 4, "waves": 1}, None, (8192, 16384)),
}

Fn = Callable[..., tuple[torch.Tensor, ...]]


def logits_variants(triton: bool, trl: bool) -> dict[str, Fn]:
    """``f(logits [N, V], ids [N]) -> (logp, entropy, ...)`` per variant."""
    out: dict[str, Fn] = {
        "naive": naive_path,
        "ef2_torch": lambda x, ids: tuple(ef.token_stats(x, ids, stats=TWO, backend="torch"))[:2],
    }
    if triton:
        from entflow.core.triton_token_stats import token_stats_triton

        def blocked(block: int, stats: tuple[str, ...]) -> Fn:
            want = tuple(s in stats for s in FOUR)
            return lambda x, ids: token_stats_triton(x.unsqueeze(0), ids, 1.0, want, None, block)  # type: ignore[arg-type]

        # without the input checks (validate=False), as TRL runs; ef2_checked with them (the default)
        out["ef2"] = lambda x, ids: tuple(ef.token_stats(x, ids, stats=TWO, backend="triton", validate=False))[:2]
        out["ef4"] = lambda x, ids: tuple(ef.token_stats(x, ids, stats=FOUR, backend="triton", validate=False))
        out["ef2_checked"] = lambda x, ids: tuple(ef.token_stats(x, ids, stats=TWO, backend="triton"))[:2]
        for block in (1024, 2048, 8192):
            out[f"ef2@block{block}"] = blocked(block, TWO)
    if trl:
        from trl.trainer.utils import selective_log_softmax_and_entropy

        out["trl"] = lambda x, ids: tuple(selective_log_softmax_and_entropy(x, ids))
    return out


def _liger() -> tuple[dict[str, Fn], dict[str, str]]:
    """Liger-Kernel's variants, and why any is missing."""
    out: dict[str, Fn] = {}
    missing: dict[str, str] = {}
    if importlib.util.find_spec("liger_kernel") is None:
        return out, {"liger": "liger-kernel not installed"}
    from liger_kernel.ops import fused_linear_scaled_cross_entropy as scaled

    def with_entropy(impl) -> Fn:
        def f(h, w, ids):
            nll, entropy = impl(h, w, ids, 1.0, -100, True)
            return -nll, entropy

        return f

    try:  # the Hopper CuTe kernel (needs nvidia-cutlass-dsl)
        sm90 = scaled._load_sm90_function()
        out["liger_sm90"] = with_entropy(lambda h, w, ids, t, ii, e: sm90.apply(h, w, ids, t, ii, 1, e))
    except Exception as exc:  # an optional dependency: record why and go on
        missing["liger_sm90"] = f"{type(exc).__name__}: {exc}"[:200]
    out["liger_fallback"] = with_entropy(scaled._FusedLinearPPOFallbackFunction.apply)
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction

    def flce_logp(h, w, ids):  # log-probs only (no entropy): the entropy term is left out of its loss
        nll = LigerFusedLinearCrossEntropyFunction.apply(h, w, ids, None, None, -100, 0.0, 0.0, "none")
        nll = nll[0] if isinstance(nll, tuple) else nll
        return -nll, torch.zeros_like(nll)

    out["liger_flce_logp_only"] = flce_logp
    return out, missing


def hidden_variants(triton: bool, trl: bool, sweep: bool) -> tuple[dict[str, Fn], dict[str, str]]:
    """``f(hidden [N, D], weight [V, D], ids [N]) -> (logp, entropy)`` per variant, and the missing ones."""

    def naive(h, w, ids):
        return naive_path(h @ w.T, ids)

    def entflow(backend: str, stats=TWO, fold=None, grad=None, chunks=None, checked=False) -> Fn:
        rows, cols = chunks if chunks else (None, None)

        def f(h, w, ids):
            ts = token_stats_from_hidden(
                h, w, ids, stats=stats, backend=backend, chunk_rows=rows, chunk_vocab=cols, validate=checked
            )
            return tuple(ts)[:2]

        f.settings = (fold, grad)  # type: ignore[attr-defined]  # applied by measure() around forward + backward
        return f

    out: dict[str, Fn] = {"naive": naive}
    if triton:
        out["ef2"] = entflow("triton")
        out["ef4"] = entflow("triton", FOUR)
        out["ef2_checked"] = entflow("triton", checked=True)
        if sweep:
            for name, (fold, grad, chunks) in SWEEP.items():
                out[f"ef2@{name}"] = entflow("triton", fold=fold, grad=grad, chunks=chunks)
    if trl:
        from trl.kernels import ChunkedLogProbFunction

        def trl_fn(h, w, ids):
            res = ChunkedLogProbFunction.apply(h, w, None, ids, 1.0, TRL_CHUNK, None, 1.0, ("entropy",))
            return res[0], res[1]

        out["trl"] = trl_fn
    liger, missing = _liger()
    out.update(liger)
    return out, missing


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def kernel_settings(settings: tuple[dict | None, dict | None] | None):
    """The fused hidden-state kernels' forward and backward settings changed for the block's duration."""
    if settings is None:
        yield
        return
    from entflow.core import _triton_hidden_kernels as fused

    saved = dict(fused.CONFIGS)
    fused.CONFIGS["half"] = {**saved["half"], **(settings[0] or {})}
    fused.CONFIGS["half_grad"] = {**saved["half_grad"], **(settings[1] or {})}
    try:
        yield
    finally:
        fused.CONFIGS.update(saved)


def measure(f: Fn, inputs: tuple[torch.Tensor, ...], ids: torch.Tensor, device: torch.device) -> dict:
    """One forward + backward: seconds (and the forward's alone, between synchronisations), peak extra
    MiB (CUDA), the outputs' sums and the gradients' norm."""
    with kernel_settings(getattr(f, "settings", None)):
        return _measure(f, inputs, ids, device)


def _measure(f: Fn, inputs: tuple[torch.Tensor, ...], ids: torch.Tensor, device: torch.device) -> dict:
    leaves = [t.detach().requires_grad_(True) for t in inputs]
    _sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    logp, entropy = f(*leaves, ids)[:2]
    _sync(device)
    forward = time.perf_counter() - t0
    (0.7 * logp.float().sum() - 1.3 * entropy.float().sum()).backward()
    _sync(device)
    seconds = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated(device) - base) / MIB if device.type == "cuda" else float("nan")
    grad_norm = sum(float(t.grad.float().norm()) ** 2 for t in leaves) ** 0.5
    return {
        "seconds": seconds,
        "forward_seconds": forward,
        "peak_extra_mib": peak,
        "logp_sum": float(logp.detach().double().sum()),
        "entropy_sum": float(entropy.detach().double().sum()),
        "grad_norm": grad_norm,
    }


def bench(name: str, variants: dict[str, Fn], inputs: tuple, ids: torch.Tensor, device, runs: int) -> dict:
    errors: dict[str, str] = {}
    for v, f in list(variants.items()):  # warm-up: kernels compiled, allocator primed; a variant that fails is reported
        try:
            measure(f, inputs, ids, device)
        except Exception as exc:
            errors[v] = f"{type(exc).__name__}: {exc}"[:300]
            del variants[v]
    rows: dict[str, list[dict]] = {v: [] for v in variants}
    for _, order in interleaved(list(variants), runs):
        for v in order:
            rows[v].append(measure(variants[v], inputs, ids, device))
    med = {v: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for v, rs in rows.items()}
    base = med["naive"]
    print(f"\n{name}: medians of {runs} (ratio = time / naive's; sums and |grad| against naive's)")
    head = f"{'variant':<26}{'ms':>10}{'fwd ms':>8}{'ratio':>8}{'peak MiB':>11}"
    print(head + f"{'Δlogp rel':>12}{'ΔH rel':>10}{'|g|/naive':>11}")
    for v, m in med.items():
        m["ratio_to_naive"] = m["seconds"] / base["seconds"]
        m["logp_rel_diff"] = abs(m["logp_sum"] - base["logp_sum"]) / max(1.0, abs(base["logp_sum"]))
        m["entropy_rel_diff"] = abs(m["entropy_sum"] - base["entropy_sum"]) / max(1.0, abs(base["entropy_sum"]))
        m["grad_ratio"] = m["grad_norm"] / base["grad_norm"]
        print(
            f"{v:<26}{m['seconds'] * 1e3:>10.2f}{m['forward_seconds'] * 1e3:>8.2f}{m['ratio_to_naive']:>8.2f}"
            f"{m['peak_extra_mib']:>11.0f}"
            f"{m['logp_rel_diff']:>12.1e}{m['entropy_rel_diff']:>10.1e}{m['grad_ratio']:>11.4f}"
        )
    for v, e in errors.items():
        print(f"{v:<26}failed: {e}")
    return {"variants": med, "failed": errors}


def matmul_peak_tflops(device: torch.device, n: int = 8192, reps: int = 10) -> float:
    """bf16 ``n³`` matrix products through cuBLAS: TFLOP/s, mean of ``reps`` after three warm-ups."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    _sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12


def summarize(results: dict) -> dict:
    """Per input: entflow's default call (``ef2``) and its fastest setting against the fastest peer with
    entropy, the memory ratio, the four statistics' cost, and (hidden states) the achieved fraction of the
    bf16 matmul peak for the three head matmuls."""
    out: dict = {}
    peak = results["env"].get("bf16_matmul_tflops")
    for key, res in results.items():
        if not key.startswith(("hidden", "logits")) or "ef2" not in res["variants"]:
            continue
        v = res["variants"]
        best = min((k for k in v if k.startswith("ef2")), key=lambda k: v[k]["seconds"])
        s: dict = {"ef2_ms": v["ef2"]["seconds"] * 1e3, "best_setting": best, "best_ms": v[best]["seconds"] * 1e3}
        s["ef4_over_ef2"] = v["ef4"]["seconds"] / v["ef2"]["seconds"]
        if "forward_seconds" in v["ef2"] and "trl" in v:
            s["forward_ms"] = (v["ef2"]["forward_seconds"] * 1e3, v["trl"]["forward_seconds"] * 1e3)
        peers = {p: v[p] for p in ("trl", "liger_sm90", "liger_fallback") if p in v}
        if peers:
            fastest = min(peers, key=lambda p: peers[p]["seconds"])
            s["fastest_peer"] = fastest
            s["ef2_time_ratio"] = v["ef2"]["seconds"] / peers[fastest]["seconds"]
            s["best_time_ratio"] = v[best]["seconds"] / peers[fastest]["seconds"]
            least = min(p["peak_extra_mib"] for p in peers.values())
            s["memory_ratio"] = v["ef2"]["peak_extra_mib"] / least
            s["best_memory_ratio"] = v[best]["peak_extra_mib"] / least
        if key.startswith("hidden") and peak:
            n, d, vocab = res["shape"]["N"], res["shape"]["D"], res["shape"]["V"]
            s["peak_fraction_3mm"] = 6 * n * d * vocab / v["ef2"]["seconds"] / 1e12 / peak
            s["best_peak_fraction_3mm"] = 6 * n * d * vocab / v[best]["seconds"] / 1e12 / peak
        out[key] = s
    return out


def table(results: dict) -> str:
    """The markdown table of docs/benchmarks.md ("On a GPU") from a result JSON."""
    env = results["env"]
    lines = [
        f"{env['device']}, torch {env['torch']}, Triton {env['triton']}, TRL {env['trl']}, "
        f"Liger-Kernel {env.get('liger_kernel')}; {env['date']}; bf16 matmul peak measured "
        f"{env.get('bf16_matmul_tflops', float('nan')):.0f} TFLOP/s; `{env.get('command', '')}`",
        "",
        "| input | variant | ms | peak extra MiB | × fastest peer |",
        "|---|---|---:|---:|---:|",
    ]
    for key, res in results.items():
        if not key.startswith(("hidden", "logits")):
            continue
        v = res["variants"]
        peers = [v[p]["seconds"] for p in ("trl", "liger_sm90", "liger_fallback") if p in v]
        fastest = min(peers) if peers else float("nan")
        shape = ", ".join(f"{k} = {x:,}" for k, x in res["shape"].items())
        for name, m in sorted(v.items(), key=lambda kv: kv[1]["seconds"]):
            ratio = m["seconds"] / fastest
            lines.append(f"| {key.split('_')[0]} ({shape}) | {name} | {m['seconds'] * 1e3:.2f} | "
                         f"{m['peak_extra_mib']:,.0f} | {ratio:.2f} |")  # fmt: skip
        for name, why in res.get("failed", {}).items():
            lines.append(f"| {key.split('_')[0]} ({shape}) | {name} | failed: {why[:80]} | | |")
    summary = summarize(results)  # recomputed, so that every result JSON prints the same columns
    if summary:
        lines += [
            "",
            "| input | entflow `ef2` ms (× fastest peer) | fastest entflow setting ms (× peer) | peer | "
            "memory × peers' least (fastest setting) | 4 stats × 2 | bf16 peak reached, 3 matmuls (fastest) | "
            "forward alone: entflow / TRL ms |",
            "|---|---:|---:|---|---:|---:|---:|---:|",
        ]
        for key, s in summary.items():
            frac = (
                f"{s['peak_fraction_3mm']:.0%} ({s['best_peak_fraction_3mm']:.0%})"
                if "peak_fraction_3mm" in s
                else "n/a"
            )
            lines.append(
                f"| {key} | {s['ef2_ms']:.2f} ({s.get('ef2_time_ratio', float('nan')):.2f}) | "
                f"{s['best_ms']:.2f} ({s.get('best_time_ratio', float('nan')):.2f}) `{s['best_setting']}` | "
                f"{s.get('fastest_peer')} | {s.get('memory_ratio', float('nan')):.2f} "
                f"({s.get('best_memory_ratio', float('nan')):.2f}) | {s['ef4_over_ef2']:.2f} | {frac} | "
                + ("{:.2f} / {:.2f} |".format(*s["forward_ms"]) if "forward_ms" in s else "n/a |")
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    ap.add_argument("--no-sweep", action="store_true", help="leave out the fused-kernel settings sweep")
    ap.add_argument("--out", default=None, help="write the medians as JSON here")
    ap.add_argument("--table", default=None, help="print the docs table of this result JSON and exit")
    args = ap.parse_args()
    if args.table:
        with open(args.table) as f:
            print(table(json.load(f)))
        return
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_stats: --device cuda but torch sees no CUDA device (use --device cpu for a smoke run)")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    triton = device.type == "cuda" and importlib.util.find_spec("triton") is not None
    trl = importlib.util.find_spec("trl") is not None

    def version(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    env = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
        "torch": torch.__version__,
        "dtype": str(dtype),
        "trl": version("trl"),
        "triton": version("triton"),
        "liger_kernel": version("liger-kernel"),
        "command": " ".join(["python", "benchmarks/gpu_stats.py", *sys.argv[1:]]),
    }
    if device.type == "cuda":
        env["bf16_matmul_tflops"] = matmul_peak_tflops(device)
    print(json.dumps(env))
    results: dict = {"env": env}
    g = torch.Generator(device="cpu").manual_seed(0)
    n, vocab = (64, 4096) if args.quick else LOGITS_SHAPE
    ids = torch.randint(0, vocab, (n,), generator=g).to(device)
    logits = (torch.randn(n, vocab, generator=g) * 2.0).to(device, dtype)  # std 2, as the CPU benchmarks
    res = bench(f"logits [{n}, {vocab}] {dtype}", logits_variants(triton, trl), (logits,), ids, device, args.runs)
    results["logits"] = {"shape": {"N": n, "V": vocab}, **res}
    _write(args.out, results)
    del logits
    shapes = [(64, 32, 4096)] if args.quick else HIDDEN_SHAPES
    for n, d, vocab in shapes:
        ids = torch.randint(0, vocab, (n,), generator=g).to(device)
        h = torch.randn(n, d, generator=g).to(device, dtype)
        w = (torch.randn(vocab, d, generator=g) * (2.0 / d**0.5)).to(device, dtype)
        variants, missing = hidden_variants(triton, trl, sweep=n >= 8192 and not args.no_sweep)
        name = f"hidden [{n}, {d}] · W [{vocab}, {d}] {dtype}"
        res = bench(name, variants, (h, w), ids, device, args.runs)
        res["failed"].update(missing)
        results[f"hidden_N{n}_D{d}"] = {"shape": {"N": n, "D": d, "V": vocab}, **res}
        _write(args.out, results)  # after each shape: a run cut short keeps what it measured
        del h, w
        if device.type == "cuda":
            torch.cuda.empty_cache()
    results["summary"] = summarize(results)
    print("\n" + table(results))
    _write(args.out, results)


def _write(path: str | None, results: dict) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
