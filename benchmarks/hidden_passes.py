"""Benchmark: the passes computed from hidden states instead of full logits.

A Qwen2.5-0.5B-shaped model cut to one decoder layer (D = 896, V = 151,936, tied embeddings,
float32, random weights built in-process: no hub), a batch of ``--batch`` sequences of
``--prompt`` prompt + ``--completion`` completion tokens (default 8 × (32 + 128): 1,024 scored
tokens). Variants, each with all four statistics (logp, entropy, Σπ², Σπ² log π):

- ``trl_hidden`` / ``trl_logits``: the TRL adapter's no-grad rollout pass of the tabular estimator,
  ``integrations/trl/loss.py::rollout_token_stats_from_hidden`` (now used) /
  ``rollout_token_stats_from_logits`` (before; now the fallback for non-plain heads), one forward
  of the whole batch (``batch_size`` = batch); the logits path's ``token_stats`` in chunks of
  ``entflow_chunk_size`` = 256 rows (the adapter's default), the hidden path in its default tiles;
- ``update_hidden`` / ``update_logits``: the trainer's update forward with grad,
  ``trainer/rollout.py::response_token_stats(hidden_stats=True / False)``, then the backward of
  the sum of the four statistics over the batch (the body's and the tied embedding's gradients).

Every measurement is a fresh process (``OMP_NUM_THREADS`` = ``--threads``); peak extra memory =
peak RSS (``VmHWM``, reset through ``/proc/self/clear_refs`` just before the call, so building the
model is not counted) − RSS after the model, the inputs and a warm-up of the same variant on one
short sequence; variants interleaved, order rotated each repetition; medians of ``--runs``.

    python benchmarks/hidden_passes.py                 # 3 runs
    python benchmarks/hidden_passes.py --runs 1 --completion 16   # smoke run
    python benchmarks/hidden_passes.py --runs 3 --out r.json       # + the raw result
    python benchmarks/hidden_passes.py --from-json r.json          # its table; runs nothing

``--out FILE`` writes (``benchmarks/_result.py``) ``date``, ``machine``, ``command``, ``benchmark``
and ``results``: ``batch``, ``prompt``, ``completion``, ``vocab``, ``threads``, ``runs``,
``variants`` (in order), ``seconds`` (the whole run), ``day`` (local date), ``processor``, ``cpus``,
``torch`` and ``transformers`` (versions) and ``measurements`` (per variant, every repetition's
worker record ``{variant, time_s, cpu_s, peak_extra_mib}``). ``--from-json FILE...`` prints each
file's settings line and Markdown table exactly as the live run printed them.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import platform
import statistics
import time

import _result  # benchmarks/_result.py
from _memory import MIB, peak_rss_bytes, reset_peak_rss, rss_bytes  # benchmarks/_memory.py
from _schedule import in_fresh_process, interleaved_runs  # benchmarks/_schedule.py

VARIANTS = ("trl_hidden", "trl_logits", "update_hidden", "update_logits")
STATS = ("logp", "entropy", "sum_p2", "sum_p2_logp")


def _model(vocab: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=vocab,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=1,
        num_attention_heads=14,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    return Qwen2ForCausalLM(cfg)


def _batch(b: int, p: int, t: int, vocab: int) -> dict:
    import torch

    g = torch.Generator().manual_seed(1)
    prompt_mask = torch.ones(b, p, dtype=torch.long)
    prompt_mask[: b // 2, : p // 4] = 0  # left padding on half the rows
    return {
        "prompt_ids": torch.randint(0, vocab, (b, p), generator=g),
        "prompt_mask": prompt_mask,
        "completion_ids": torch.randint(0, vocab, (b, t), generator=g),
        "completion_mask": torch.ones(b, t, dtype=torch.long),
    }


def _call(variant: str, model, x: dict) -> None:
    import torch

    from entflow.integrations.trl.loss import rollout_token_stats_from_hidden, rollout_token_stats_from_logits
    from entflow.trainer.rollout import response_token_stats

    b = x["prompt_ids"].shape[0]
    if variant.startswith("trl_"):
        with torch.no_grad():
            if variant == "trl_hidden":
                rollout_token_stats_from_hidden(model, x, 0.7, b, contextlib.nullcontext)
            else:
                rollout_token_stats_from_logits(model, x, 0.7, b, 256, contextlib.nullcontext)
        return
    model.zero_grad(set_to_none=True)
    s = response_token_stats(
        model,
        x["prompt_ids"],
        x["prompt_mask"],
        x["completion_ids"],
        0.7,
        None,
        STATS,
        hidden_stats=variant == "update_hidden",
    )
    sum(getattr(s, f).sum() for f in STATS).backward()


def worker(variant: str, args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    model = _model(args.vocab)
    x = _batch(args.batch, args.prompt, args.completion, args.vocab)
    _call(variant, model, _batch(1, 4, 4, args.vocab))  # warm-up: one short sequence
    reset_peak_rss()
    base = rss_bytes()
    t0, c0 = time.perf_counter(), time.process_time()
    _call(variant, model, x)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = max(peak_rss_bytes() - base, 0) / MIB
    return {"variant": variant, "time_s": elapsed, "cpu_s": cpu, "peak_extra_mib": peak}


def run(variant: str, args: argparse.Namespace) -> dict:
    argv = ["--worker", variant, "--threads", str(args.threads), "--vocab", str(args.vocab), "--batch", str(args.batch)]
    argv += ["--prompt", str(args.prompt), "--completion", str(args.completion)]
    return in_fresh_process(__file__, argv, args.threads)


def report(results: dict) -> str:
    """The settings line and the table (medians; each hidden variant's ratios to its logits
    counterpart) of one result (what ``--out`` writes as ``results``)."""
    runs = results["measurements"]
    med = {v: {k: statistics.median(r[k] for r in rs) for k in ("time_s", "cpu_s", "peak_extra_mib")}
           for v, rs in runs.items()}  # fmt: skip
    batch, prompt, completion, vocab = (results[k] for k in ("batch", "prompt", "completion", "vocab"))
    rows = batch * completion
    logits_mib = rows * vocab * 4 / MIB
    lines = [
        f"{results['day']}, {results['processor']}, {results['cpus']} cores, {results['threads']} threads, "
        f"torch {results['torch']}, transformers {results['transformers']}; {results['runs']} runs, "
        f"{results['seconds']:.0f} s. Batch {batch} × ({prompt} + {completion}) = {rows} scored tokens, "
        f"V = {vocab}, D = 896 (the [rows, V] float32 logits: {logits_mib:.0f} MiB).",
        "",
    ]
    header = ["variant", "median wall (s)", "median CPU (s)", "peak extra MiB", "× logits wall", "× logits CPU",
              "× logits peak"]  # fmt: skip
    table = []
    for v in results["variants"]:
        m, ref = med[v], med.get(v.replace("hidden", "logits"))
        if ref is None:  # its logits counterpart was not measured
            ratios = ["—"] * 3
        else:
            mem_ratio = m["peak_extra_mib"] / max(ref["peak_extra_mib"], 1e-9)
            ratios = [f"{m['time_s'] / ref['time_s']:.2f}", f"{m['cpu_s'] / ref['cpu_s']:.2f}", f"{mem_ratio:.2f}"]
        table.append([v, f"{m['time_s']:.2f}", f"{m['cpu_s']:.2f}", f"{m['peak_extra_mib']:.0f}", *ratios])
    lines.append(_result.markdown_table(header, table))
    return "\n".join(lines)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--completion", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)


def measure(args: argparse.Namespace) -> dict:
    """Every variant ``--runs`` times, interleaved, each in a fresh process; the settings with them."""
    variants = args.variants.split(",")
    start = time.time()
    measurements = interleaved_runs(
        variants,
        args.runs,
        lambda v: run(v, args),
        lambda v, r: f"{v:14s} {r['time_s']:7.2f} s {r['peak_extra_mib']:7.0f} MiB",
    )
    import torch

    results = {
        "batch": args.batch,
        "prompt": args.prompt,
        "completion": args.completion,
        "vocab": args.vocab,
        "threads": args.threads,
        "runs": args.runs,
        "variants": variants,
        "seconds": time.time() - start,
        "day": time.strftime("%Y-%m-%d"),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "transformers": importlib.metadata.version("transformers"),
        "measurements": measurements,
    }
    print()
    return results


def main() -> None:
    _result.main(__doc__, options, measure, report, worker=lambda a: worker(a.worker, a))


if __name__ == "__main__":
    main()
