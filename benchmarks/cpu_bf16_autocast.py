"""What bfloat16 autocast costs on this CPU: one SmolLM2-sized MLP (576 → 1536 → 576, SiLU),
forward + backward over 256 rows, float32 against ``torch.autocast("cpu", dtype=torch.bfloat16)``.

    PYTHONPATH=src .venv/bin/python benchmarks/cpu_bf16_autocast.py --runs 8 --threads 1

TRL's ``GRPOConfig`` defaults to ``bf16=True``, which with ``use_cpu=True`` trains under that
autocast; ``EntflowGRPOConfig`` warns where the CPU has no bfloat16 instructions
(``integrations/trl/config.py``). Medians of ``--runs`` interleaved calls (rotating order,
``benchmarks/_schedule.py``) after one warm-up call each.
"""

from __future__ import annotations

import argparse
import json

import torch

from _schedule import interleaved_medians  # benchmarks/_schedule.py
from entflow.integrations.trl.config import cpu_has_native_bf16


def mlp_step(mlp: torch.nn.Module, x: torch.Tensor, bf16: bool) -> None:
    """One forward + backward of ``mlp`` on ``x`` ``[N, 576]``, under bfloat16 autocast if ``bf16``."""
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = mlp(x).float().pow(2).mean()
    loss.backward()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, default=256)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(576, 1536), torch.nn.SiLU(), torch.nn.Linear(1536, 576))
    x = torch.randn(args.rows, 576)
    med = interleaved_medians(
        {"float32": lambda: mlp_step(mlp, x, False), "bf16 autocast": lambda: mlp_step(mlp, x, True)}, args.runs
    )
    print(
        json.dumps(
            {
                "torch": torch.__version__,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "native_bf16": cpu_has_native_bf16(),
                "threads": args.threads,
                "ms": {name: round(1e3 * m, 1) for name, m in med.items()},
                "bf16 / float32": round(med["bf16 autocast"] / med["float32"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
