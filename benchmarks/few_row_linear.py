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
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import random

import torch
from torch.nn import functional

from _schedule import interleaved_medians  # benchmarks/_schedule.py
from entflow.trainer.few_row_linear import linear_few_rows

SMOL = {"q/o": (576, 576), "k/v": (192, 576), "gate/up": (1536, 576), "down": (576, 1536), "lm_head": (49152, 576)}
LAB = {"lab mlp": (512, 128)}
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 264)


def one_layer() -> None:
    print("| weight | shape | rows | F.linear ms | (W @ xᵀ)ᵀ ms | ratio |\n|---|---|---:|---:|---:|---:|")
    for name, (n, k) in {**SMOL, **LAB}.items():
        w = torch.randn(n, k)
        for m in ROWS:
            x = torch.randn(m, k)
            reps = 5 if n * m > 5_000_000 else 30
            plain, few = (lambda x=x, w=w: functional.linear(x, w)), (lambda x=x, w=w: linear_few_rows(x, w))
            t = interleaved_medians({"plain": plain, "few": few}, reps)
            ms = f"{t['plain'] * 1e3:.3f} | {t['few'] * 1e3:.3f}"
            print(f"| {name} | {n}×{k} | {m} | {ms} | {t['few'] / t['plain']:.2f} |")


def decoding_stack(rows: int = 16) -> None:
    shapes = [SMOL["q/o"], SMOL["k/v"], SMOL["k/v"], SMOL["q/o"], SMOL["gate/up"], SMOL["gate/up"], SMOL["down"]]
    layers = [[torch.randn(*s) for s in shapes] for _ in range(30)]
    xs = {576: torch.randn(rows, 576), 1536: torch.randn(rows, 1536)}

    def stack(fn):
        return lambda: [fn(xs[w.shape[1]], w) for ws in layers for w in ws]

    t = interleaved_medians({"plain": stack(functional.linear), "few": stack(linear_few_rows)}, 20)
    print(
        f"\n30 layers × 7 weights, {rows} rows (weights from memory): F.linear {t['plain'] * 1e3:.1f} ms, "
        f"(W @ xᵀ)ᵀ {t['few'] * 1e3:.1f} ms, ratio {t['few'] / t['plain']:.2f}"
    )


def smollm2_generate(reps: int) -> None:
    import entflow.trainer.rollout as rollout
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
    t = interleaved_medians(arms, reps)
    print(f"\nSmolLM2-135M generate, 4 prompts × 4 responses × 32 tokens, median of {reps} interleaved calls:")
    for name, sec in t.items():
        print(f"  {name}: {sec:.2f} s ({sec / t['F.linear']:.2f}×)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=8, help="generate calls per arm")
    ap.add_argument("--no-generate", action="store_true")
    ap.add_argument("--generate-only", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"torch {torch.__version__}, {a.threads} threads\n")
    if not a.generate_only:
        one_layer()
        decoding_stack()
    if not a.no_generate:
        smollm2_generate(a.reps)


if __name__ == "__main__":
    main()
