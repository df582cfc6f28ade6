"""Cost of the default path vs the fast path of ``compute_advantages`` + ``policy_loss`` + backward.

Variants, interleaved in one loop (order reshuffled every round, fixed seed), median CPU time:

- ``default``: ``TokenBatch(validate=True)``, ``metrics="float"`` (checks + one host read of all metrics);
- ``fast``: ``TokenBatch(validate=False)``, ``metrics="tensor"`` (no host sync at all);
- ``none``: ``validate=False``, ``metrics="none"`` (no §8 statistics);
- ``global``: the fast path on two micro-batches with ``prepare_statistics`` (one process).

On a CPU a host "sync" costs nothing, so this measures only the extra tensor work of each path;
on a GPU the fast path also removes ~20 stream synchronisations per call (untested here).

Usage::

    python benchmarks/fast_path.py [--n 64] [--t 1024] [--rounds 20] [--out r.json]
    python benchmarks/fast_path.py --from-json r.json     # the table of a saved result

``--out`` writes every round's CPU seconds per method and path (``benchmarks/_result.py``);
``--from-json`` prints the table from such a file and runs nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import _result  # benchmarks/_result.py

PATHS = ("fast", "none", "global")
METHODS = [
    ("grpo", {}),
    ("steer", {}),
    ("opefo", {}),
    ("clip_cov", {}),
    ("kl_cov", {}),
    ("forking_tokens", {}),
    ("quadrant", {"preset": "uplift"}),
]


def make_steps(n: int, t: int) -> dict[str, object]:
    import torch

    import entflow as ef

    g = torch.Generator().manual_seed(0)
    base = -torch.rand(n, t, generator=g) * 3
    old_logp = base + 0.05 * torch.randn(n, t, generator=g)
    H = torch.rand(n, t, generator=g) * 2
    lengths = torch.randint(t // 4, t + 1, (n,), generator=g)
    mask = (torch.arange(t) < lengths[:, None]).float()
    rewards = torch.randint(0, 2, (n,), generator=g).float()
    gi = torch.arange(n) // 8
    steps = {}
    for name, params in METHODS:
        m = ef.get_method(name, **params)

        def step(m=m, validate=True, metrics="float", split=False) -> None:
            logp = base.clone().requires_grad_(True)
            full = ef.TokenBatch(logp, old_logp, None, mask, old_entropy=H, rewards=rewards, group_index=gi,
                                 validate=validate)  # fmt: skip
            adv = ef.compute_advantages(full, m)
            if not split:
                b = ef.TokenBatch(logp, old_logp, adv, mask, old_entropy=H, validate=validate)
                ef.policy_loss(b, m, metrics=metrics).loss.backward()
                return
            halves = (slice(0, n // 2), slice(n // 2, n))
            mbs = [ef.TokenBatch(old_logp[s], old_logp[s], adv[s], mask[s], old_entropy=H[s], validate=False)
                   for s in halves]  # fmt: skip
            stats = ef.prepare_statistics(mbs, m)
            for s, st in zip(halves, stats, strict=True):
                b = ef.TokenBatch(logp[s], old_logp[s], adv[s], mask[s], old_entropy=H[s], validate=False)
                ef.policy_loss(b, m, metrics="tensor", stats=st).loss.backward()

        steps[f"{name}/default"] = step
        steps[f"{name}/fast"] = lambda step=step: step(validate=False, metrics="tensor")
        steps[f"{name}/none"] = lambda step=step: step(validate=False, metrics="none")
        steps[f"{name}/global"] = lambda step=step: step(split=True)
    return steps


def measure(n: int, t: int, rounds: int) -> dict:
    """Every round's process CPU seconds of each ``method/path`` step (two warm-up rounds dropped)."""
    import torch

    torch.set_num_threads(1)
    steps = make_steps(n, t)
    times: dict[str, list[float]] = {k: [] for k in steps}
    rng = random.Random(0)
    names = list(steps)
    for r in range(rounds + 2):
        rng.shuffle(names)
        for k in names:
            t0 = time.process_time()
            steps[k]()
            if r >= 2:
                times[k].append(time.process_time() - t0)
    return {"n": n, "t": t, "rounds": rounds, "threads": 1, "clock": "process CPU time", "seconds": times}


def report(results: dict) -> str:
    """The settings line and the table: each method's default-path ms and the other paths' (× default)."""
    med = {k: statistics.median(v) * 1e3 for k, v in results["seconds"].items()}
    head = f"[{results['n']}, {results['t']}] float32, 1 thread, CPU time, median of {results['rounds']} rounds"
    rows = []
    for name in dict.fromkeys(k.split("/")[0] for k in med):
        d = med[f"{name}/default"]
        rows.append([name, f"{d:.1f}", *(f"{med[f'{name}/{v}']:.1f} ({med[f'{name}/{v}'] / d:.2f})" for v in PATHS)])
    header = ["method", "default ms", "fast ms (× default)", "none ms (× default)"]
    header.append("global (2 micro-b.) ms (× default)")
    return head + "\n\n" + _result.markdown_table(header, rows)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--t", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=20)


def main() -> None:
    _result.main(__doc__, options, lambda a: measure(a.n, a.t, a.rounds), report)


if __name__ == "__main__":
    main()
