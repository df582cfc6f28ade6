"""Cost of entflow's verl loss function next to verl's own ``ppo_loss`` (CPU, forward + backward).

Both run on the same micro-batch in verl's layout (flat no-padding log-probs, padded fields):
verl's ``ppo_loss`` with its ``vanilla`` loss, and ``entflow_ppo_loss`` with ``entflow.grpo``
(the same loss; the difference is entflow's bookkeeping: the §8 statistics and the rescaling),
and with ``steer`` and ``clip_cov`` (a method's own work). Variants are interleaved, order
rotating per repetition; medians and ratios to verl are reported (ratios survive a shared machine).

    .venv/bin/python benchmarks/verl_loss.py --rows 64 --tokens 512 --runs 15 [--out r.json]
    python benchmarks/verl_loss.py --from-json r.json     # the table of a saved result

``--out`` writes every repetition's seconds per variant (``benchmarks/_result.py``); ``--from-json``
prints the table from such a file and runs nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import _result  # benchmarks/_result.py


def measure(a: argparse.Namespace) -> dict:
    """Every repetition's seconds (forward + backward of the loss) per variant, after one warm-up round."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from verl.workers.config import PolicyLossConfig
    from verl.workers.utils.losses import ppo_loss

    from entflow.integrations.verl.losses import entflow_ppo_loss
    from entflow.integrations.verl.spec import WORKER_METHODS
    from support.verl_util import actor_config, entflow_config, random_token_tensors, verl_micro_batch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    N, T = a.rows, a.tokens
    t = random_token_tensors(N, T, g, min_len=T // 4)
    mask = t["mask"]
    data, flat = verl_micro_batch(t, P=8)
    variants = {
        "verl ppo_loss (vanilla)": (ppo_loss, actor_config(PolicyLossConfig(loss_mode="vanilla"))),
        "entflow_ppo_loss (grpo)": (entflow_ppo_loss, entflow_config("entflow.grpo")),
        "entflow_ppo_loss (steer)": (entflow_ppo_loss, entflow_config("entflow.steer")),
        "entflow_ppo_loss (clip_cov)": (entflow_ppo_loss, entflow_config("entflow.clip_cov")),
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for r in range(a.runs + 1):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            fn, cfg = variants[k]
            lp = t["logp"].clone().requires_grad_()
            WORKER_METHODS.clear()
            t0 = time.perf_counter()
            loss, _ = fn(cfg, {"log_probs": flat(lp)}, data)
            loss.backward()
            if r > 0:  # the first round warms up
                times[k].append(time.perf_counter() - t0)
    return {"rows": N, "tokens": T, "valid_tokens": int(mask.sum()), "runs": a.runs, "threads": 1, "seconds": times}


def report(results: dict) -> str:
    """The settings line and the table: each variant's median, min and max ms and its ratio to verl's."""
    times = results["seconds"]
    names = list(times)
    base = statistics.median(times[names[0]])
    head = (
        f"N={results['rows']} T={results['tokens']} valid tokens={results['valid_tokens']} "
        f"runs={results['runs']} torch threads={results['threads']}"
    )
    rows = []
    for k in names:
        med = statistics.median(times[k])
        spread = f"{min(times[k]) * 1e3:.2f}–{max(times[k]) * 1e3:.2f}"
        rows.append([k, f"{med * 1e3:.2f}", spread, f"{med / base:.2f}"])
    return head + "\n\n" + _result.markdown_table(["variant", "median ms", "min–max ms", f"× {names[0]}"], rows)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--runs", type=int, default=15)


def main() -> None:
    _result.main(__doc__, options, measure, report)


if __name__ == "__main__":
    main()
