"""pass@k curves of a lab policy on the two held-out splits of ``countdown_routes`` (docs/regime.md).

    PYTHONPATH=src python experiments/regime/passk.py POLICY_DIR --n 256 --out result.json [task params as k=v]

POLICY_DIR is a warm start (``entflow pretrain`` / the cache) or a run's ``checkpoints/final``.
n samples per problem at temperature 1; unbiased pass@k (``entflow.hf.evaluate.pass_at_k``) for
k = 1, 4, 16, 64, 256 (≤ n); also the mean number of distinct correct answers and the fraction of
correct samples that use the route character.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from entflow.lab.evaluate import generate_responses
from entflow.lab.policy import load_policy
from entflow.lab.tasks import get_task
from entflow.trainer.config import parse_override
from entflow.trainer.evaluate import pass_at_k


def split_passk(model, tok, task, problems, n: int, seed: int, max_batch: int = 2048) -> dict:
    per = max(1, max_batch // n)
    counts, distinct, route_use, n_correct = [], [], 0, 0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for s in range(0, len(problems), per):
            chunk = problems[s : s + per]
            texts, _, _ = generate_responses(model, tok, task, [p.prompt for p in chunk], k=n)
            for i, p in enumerate(chunk):
                ok = [t for t in texts[i * n : (i + 1) * n] if task.reward(p, t) > 0]
                counts.append(len(ok))
                distinct.append(len(set(ok)))
                route_use += sum(task.route in t for t in ok)
                n_correct += len(ok)
    ks = [k for k in (1, 4, 16, 64, 256) if k <= n]
    out = {f"pass@{k}": sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}
    out |= {
        "n": n,
        "n_problems": len(problems),
        "distinct_correct": sum(distinct) / len(distinct),
        "route_share_of_correct": route_use / max(n_correct, 1),
        "solved_frac": sum(c > 0 for c in counts) / len(counts),
        "per_problem_correct": counts,
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("policy")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out")
    ap.add_argument("--task", default="countdown_routes")
    ap.add_argument("--splits", default="val,hard", help="comma-separated: val, hard")
    ap.add_argument("params", nargs="*")
    a = ap.parse_args()
    torch.set_num_threads(1)
    task = get_task(a.task, **dict(parse_override(x) for x in a.params))
    model, tok = load_policy(a.policy)
    model.eval()
    t0 = time.perf_counter()
    res = {"policy": a.policy, "task": repr(task)}
    splits = a.splits.split(",")
    if "val" in splits:
        res["val"] = split_passk(model, tok, task, task.validation_set(), a.n, a.seed)
    if "hard" in splits:
        res["hard"] = split_passk(model, tok, task, task.hard_set(), a.n, a.seed + 1)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    for split in splits:
        r = res[split]
        print(split, {k: round(v, 4) for k, v in r.items() if k != "per_problem_correct" and isinstance(v, float)})
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
