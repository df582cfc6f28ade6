"""``F.linear(x, W)`` against ``(W @ xᵀ)ᵀ`` (``entflow.trainer.few_row_linear``) on this CPU, and
SmolLM2-135M's ``generate`` with and without :func:`few_row_linears`.

    PYTHONPATH=src .venv/bin/python benchmarks/few_row_linear.py [--threads 2] [--no-generate]

1. One layer, weight in cache: milliseconds per call (median of interleaved repeats) for the
   weight shapes of SmolLM2-135M (q/o 576², k/v 192×576, MLP 1536×576 and 576×1536, LM head
   49,152×576), the lab's tiny policy (512×128) and rows 1 … 264.
2. A decoding step's stack: SmolLM2's 30 layers × 7 weights on 16 rows, every weight read once per
   pass (so from memory, as in decoding).
3. ``entflow.trainer.rollout.generate`` of P = 4 prompts × G = 4 responses × 32 new tokens
   (``basic_arithmetic``, shared prompts): plain, with :func:`few_row_linears`, and with it on the
   LM head alone, interleaved, seconds per call.

``--out r.json`` writes every call's seconds of the three parts (``benchmarks/_result.py``);
``python benchmarks/few_row_linear.py --from-json r.json`` prints the tables from it and runs nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import random
import statistics

import _result  # benchmarks/_result.py

SMOL = {"q/o": (576, 576), "k/v": (192, 576), "gate/up": (1536, 576), "down": (576, 1536), "lm_head": (49152, 576)}
LAB = {"lab mlp": (512, 128)}
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 264)


def one_layer() -> list[dict]:
    """Per weight shape and row count: every interleaved call's seconds of ``plain`` and ``few``."""
    import torch
    from torch.nn import functional

    from _schedule import interleaved_times  # benchmarks/_schedule.py
    from entflow.trainer.few_row_linear import linear_few_rows

    out = []
    for name, (n, k) in {**SMOL, **LAB}.items():
        w = torch.randn(n, k)
        for m in ROWS:
            x = torch.randn(m, k)
            reps = 5 if n * m > 5_000_000 else 30
            plain, few = (lambda x=x, w=w: functional.linear(x, w)), (lambda x=x, w=w: linear_few_rows(x, w))
            out.append(
                {"weight": name, "shape": [n, k], "rows": m, **interleaved_times({"plain": plain, "few": few}, reps)}
            )
    return out


def decoding_stack(rows: int = 16) -> dict:
    """A decoding step's 30 × 7 weights on ``rows`` rows: every interleaved pass's seconds."""
    import torch
    from torch.nn import functional

    from _schedule import interleaved_times  # benchmarks/_schedule.py
    from entflow.trainer.few_row_linear import linear_few_rows

    shapes = [SMOL["q/o"], SMOL["k/v"], SMOL["k/v"], SMOL["q/o"], SMOL["gate/up"], SMOL["gate/up"], SMOL["down"]]
    layers = [[torch.randn(*s) for s in shapes] for _ in range(30)]
    xs = {576: torch.randn(rows, 576), 1536: torch.randn(rows, 1536)}

    def stack(fn):
        return lambda: [fn(xs[w.shape[1]], w) for ws in layers for w in ws]

    return {"rows": rows, **interleaved_times({"plain": stack(functional.linear), "few": stack(linear_few_rows)}, 20)}


def smollm2_generate(reps: int) -> dict[str, list[float]]:
    """SmolLM2-135M's ``generate`` under each arm: every interleaved call's seconds."""
    import torch

    import entflow.trainer.rollout as rollout
    from _schedule import interleaved_times  # benchmarks/_schedule.py
    from entflow.hf.setup import RealTrainConfig, real_setup
    from entflow.trainer.few_row_linear import few_row_linears

    cfg = RealTrainConfig(task="basic_arithmetic", task_params={"max_terms": 2, "max_digits": 1}, max_new_tokens=32)
    cfg.validate()
    parts = real_setup(cfg)
    parts.model.eval()
    prompts = [p.prompt for p in parts.task.sample_problems(4, random.Random(1))]

    def run(ctx):
        def call():
            rollout.few_row_linears = ctx
            torch.manual_seed(0)
            rollout.generate(parts.model, parts.tokenizer, prompts, 32, n=4, output_logits=True, share_prompts=True)

        return call

    arms = {
        "F.linear": run(lambda m: contextlib.nullcontext()),
        "few_row_linears": run(few_row_linears),
        "the LM head only": run(functools.partial(few_row_linears, min_weight=10**6)),
    }
    return interleaved_times(arms, reps)


def report(results: dict) -> str:
    """The three parts' tables: ms per call and ratio per shape, the stack's line, generate's table."""
    med = statistics.median
    parts = [f"torch {results['torch']}, {results['threads']} threads"]
    if results.get("one_layer"):
        rows = [
            [r["weight"], f"{r['shape'][0]}×{r['shape'][1]}", str(r["rows"]), f"{med(r['plain']) * 1e3:.3f}",
             f"{med(r['few']) * 1e3:.3f}", f"{med(r['few']) / med(r['plain']):.2f}"]
            for r in results["one_layer"]
        ]  # fmt: skip
        header = ["weight", "shape", "rows", "F.linear ms", "(W @ xᵀ)ᵀ ms", "ratio"]
        parts.append(_result.markdown_table(header, rows))
    if results.get("stack"):
        st = results["stack"]
        p, f = med(st["plain"]), med(st["few"])
        parts.append(
            f"30 layers × 7 weights, {st['rows']} rows (weights from memory): F.linear {p * 1e3:.1f} ms, "
            f"(W @ xᵀ)ᵀ {f * 1e3:.1f} ms, ratio {f / p:.2f}"
        )
    if results.get("generate"):
        gen = results["generate"]
        base = med(gen["F.linear"])
        reps = len(gen["F.linear"])
        parts.append(f"SmolLM2-135M generate, 4 prompts × 4 responses × 32 tokens, median of {reps} interleaved calls:")
        rows = [[name, f"{med(t):.2f}", f"{med(t) / base:.2f}"] for name, t in gen.items()]
        parts.append(_result.markdown_table(["arm", "median s", "× F.linear"], rows))
    return "\n\n".join(parts)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=8, help="generate calls per arm")
    ap.add_argument("--no-generate", action="store_true")
    ap.add_argument("--generate-only", action="store_true")


def measure(a: argparse.Namespace) -> dict:
    """The parts the options ask for, at ``--threads``, with the torch version and the threads."""
    import torch

    torch.set_num_threads(a.threads)
    results: dict = {"torch": torch.__version__, "threads": a.threads}
    if not a.generate_only:
        results["one_layer"] = one_layer()
        results["stack"] = decoding_stack()
    if not a.no_generate:
        results["generate"] = smollm2_generate(a.reps)
    return results


def main() -> None:
    _result.main(__doc__, options, measure, report)


if __name__ == "__main__":
    main()
