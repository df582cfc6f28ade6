"""What bfloat16 autocast costs on this CPU: one SmolLM2-sized MLP (576 → 1536 → 576, SiLU),
forward + backward over 256 rows, float32 against ``torch.autocast("cpu", dtype=torch.bfloat16)``.

    PYTHONPATH=src .venv/bin/python benchmarks/cpu_bf16_autocast.py --runs 8 --threads 1 [--out r.json]
    python benchmarks/cpu_bf16_autocast.py --from-json r.json     # the table of a saved result

TRL's ``GRPOConfig`` defaults to ``bf16=True``, which with ``use_cpu=True`` trains under that
autocast; ``EntflowGRPOConfig`` warns where the CPU has no bfloat16 instructions
(``integrations/trl/config.py``). Medians of ``--runs`` interleaved calls (rotating order,
``benchmarks/_schedule.py``) after one warm-up call each. ``--out`` writes every call's time
(``benchmarks/_result.py``); ``--from-json`` prints the table from such a file and runs nothing.
"""

from __future__ import annotations

import argparse
import statistics

import _result  # benchmarks/_result.py

VARIANTS = ("float32", "bf16 autocast")


def mlp_step(mlp, x, bf16: bool) -> None:
    """One forward + backward of ``mlp`` on ``x`` ``[N, 576]``, under bfloat16 autocast if ``bf16``."""
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = mlp(x).float().pow(2).mean()
    loss.backward()


def measure(runs: int, threads: int, rows: int) -> dict:
    """Every interleaved call's seconds per variant, with the CPU facts the table names."""
    import torch

    from _schedule import interleaved_times  # benchmarks/_schedule.py
    from entflow.integrations.trl.config import cpu_has_native_bf16

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(576, 1536), torch.nn.SiLU(), torch.nn.Linear(1536, 576))
    x = torch.randn(rows, 576)
    fns = {"float32": lambda: mlp_step(mlp, x, False), "bf16 autocast": lambda: mlp_step(mlp, x, True)}
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": cpu_has_native_bf16(),
        "threads": threads,
        "rows": rows,
        "runs": runs,
        "seconds": interleaved_times(fns, runs),
    }


def report(results: dict) -> str:
    """The settings line and the table: median ms of each variant and its ratio to float32."""
    med = {k: statistics.median(results["seconds"][k]) for k in VARIANTS}
    head = (
        f"MLP 576 → 1536 → 576 forward + backward, {results['rows']} rows, {results['threads']} thread(s), "
        f"median of {results['runs']} interleaved calls; torch {results['torch']}, CPU capability "
        f"{results['cpu_capability']}, native bfloat16: {'yes' if results['native_bf16'] else 'no'}"
    )
    rows = [
        [k, f"{1e3 * med[k]:.1f}", f"{1e3 * min(results['seconds'][k]):.1f}–{1e3 * max(results['seconds'][k]):.1f}",
         f"{med[k] / med['float32']:.2f}"]
        for k in VARIANTS
    ]  # fmt: skip
    return head + "\n\n" + _result.markdown_table(["variant", "median ms", "min–max ms", "× float32"], rows)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, default=256)


def main() -> None:
    _result.main(__doc__, options, lambda a: measure(a.runs, a.threads, a.rows), report)


if __name__ == "__main__":
    main()
