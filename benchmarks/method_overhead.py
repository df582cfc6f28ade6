"""Per-method overhead of ``compute_advantages`` + ``policy_loss`` + backward, relative to grpo.

Two cases, every method interleaved with grpo in the same loop: each round runs ``--repeats``
steps of every method, the order reshuffled before each pass with a fixed seed, and keeps each
method's median step time in that round. grpo, the reference, steps first in each pass and again
after every ``REFERENCE_EVERY`` (8) other methods, so its median in a round comes from steps spread
over the round (files before 2026-11-29: one grpo step per pass, in a shuffled place):

(a) tensors: ``[N, T]`` float32 token statistics, ``logp`` (and ``entropy``) leaves with grad.
(b) model: a small Llama (built in-process from ``LlamaConfig``, no hub) forward →
    ``ef.token_stats`` → ``compute_advantages`` + ``policy_loss`` → backward on an ``[N, T]``
    batch. Rollout-time fields (old_logp, old_entropy, rewards, groups) are precomputed, as a
    trainer has them. ``kl_ref`` is timed twice: with ``ref_logp`` precomputed, and with the
    extra no-grad forward of a reference model inside the step ("kl_ref+ref_fwd"), which is
    what it costs in a trainer that does not cache reference log-probs.

The ratio of a method to grpo is taken per round (the two ran in the same round, so a slow
stretch of the machine slows both): ``r_i = t_method,i / t_grpo,i``. The table gives the
median of the r_i and a 95 % interval: a Student-t interval on the mean of log r_i, mapped back
with exp (so it is an interval for the geometric-mean ratio; it needs ≥ 2 rounds). A method is
within 1.05× grpo when the interval's upper end is ≤ 1.05 ("yes"), above it when the lower end
is > 1.05 ("no"), and undecided ("open") otherwise. The Python garbage collector runs before
each timed step and is off during it, so that no step pays for another's garbage.

With ``--case both`` and ``--t`` equal to ``--t-model``, a second table splits the step: for the
methods whose model forward and backward are grpo's own (no entropy gradient, no top-K, no
reference forward; the seven field methods are such), a step exceeds grpo's by the loss part
alone, so case (a)'s extra time over case (b)'s grpo step is the (b) ratio without the model's
timing noise (``loss_share``).

Usage::

    python benchmarks/method_overhead.py                       # both cases, defaults below
    python benchmarks/method_overhead.py --case a --rounds 15
    python benchmarks/method_overhead.py --t-model 128 --wall --threads 2
    python benchmarks/method_overhead.py --case b --rounds-model 10 --repeats 3 --methods clipb,stare
    python benchmarks/method_overhead.py --case both --t 128 --rounds 30 --repeats 3   # + the loss-part split
    python benchmarks/method_overhead.py --case b --out r.json    # + date, machine, command, results
    python benchmarks/method_overhead.py --from-json r.json       # the table of a saved result

``--out`` writes ``date``, ``machine``, ``command``, ``clock``, ``info``, ``results`` (each
method's median seconds per step over rounds), ``rounds`` (its per-round seconds), ``repeats``,
``interval`` (how the interval is taken) and ``ratios`` (per method: the per-round ratios, their
median, the geometric mean and the interval) and ``loss_share`` (the split above, or empty).
``--from-json`` also prints files written before the per-round ratios existed (medians only),
as it printed them then.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import entflow as ef
from entflow.core.topk import topk_logprobs
from entflow.errors import AnalysisError
from entflow.evidence.records import cpu_model
from entflow.methods.needs import needs_of

CLOCK = time.process_time
PARAMS = {
    "opefo_target": {"target": 1.0},
    "quadrant": {"preset": "uplift"},
    "pos_adv_reweight": {},
    "dro": {"dro_beta": 0.1},  # required parameters (no default, as verl / TRL)
    "off_policy_mask": {"threshold": 0.5},
}
# the work each method adds, for the acceptance rule (token weighting / advantage shaping ≤ 1.05×)
KIND = {
    "grpo": "baseline",
    "entropy_bonus": "loss term (entropy with grad)",
    "adaptive_entropy": "loss term (entropy with grad)",
    "kl_ref": "loss term (ref_logp)",
    "kl_ref+ref_fwd": "loss term + reference forward",
    "kl_cov": "per-token loss",
    "siren": "loss term (entropy with grad)",
    "entropic": "loss term (ratio with grad)",
    "aepo": "grpo (its REINFORCE rows are extra batch rows)",
    "cispo": "per-token loss",
    "gspo": "per-token loss",
    "sapo": "per-token loss",
    "ce_gppo": "per-token loss",
    "archer": "per-token loss + loss term (ref_logp)",
    "simko": "per-token loss (+ top-K log-probs from the logits)",
    "aer": "loss term (entropy with grad)",
    # verl's and TRL's loss modes (methods/loss_modes.py)
    "geo_mean": "sequence loss",
    "dppo_tv": "per-token loss",
    "dppo_kl": "per-token loss",
    "gpg": "per-token loss",
    "dro": "per-token loss",
    "vespo": "per-token loss",
    "luspo": "sequence loss",
    # the methods of other RL libraries (docs/methods.md)
    "topr": "per-token loss",
    "positive_nll": "loss term (NLL of the correct responses)",
    "chord": "token mask (expert rows) + loss term (SFT)",
    "clipb": "advantage shaping + token mask (batch mean/std)",
    "stare": "token weighting (batch top-P by surprisal)",
    # the rollout–training mismatch corrections (methods/corrections.py), reading rollout_logp
    "tis": "token weighting (rollout ratio, truncated)",
    "icepop": "token weighting (rollout ratio in a band)",
    "rs_token": "token mask (rollout divergence)",
    "rs_seq_sum": "token mask (rollout divergence, response sum)",
    "rs_seq_mean": "token mask (rollout divergence, response mean)",
    "rs_seq_max": "token mask (rollout divergence, response max)",
    "kpop": "token weighting (binary KL mask, rollout ratio)",
    "m2po": "per-token loss + token weighting (batch sort of (log r)²)",
    "ipo": "per-token loss (ratio to the rollout policy)",
}


def kind_of(name: str) -> str:
    if name in KIND:
        return KIND[name]
    if name.startswith("clip_") and name not in ("clip_cov",):
        return "clip bounds"
    m = ef.get_method(name, **PARAMS.get(name, {}))
    return "advantage shaping" if m.overrides("shape_advantages") else "token weighting"


ONLY: list[str] | None = None  # --methods: time only these (and grpo, the baseline)


def method_names() -> list[str]:
    names = ef.list_methods()
    return names if ONLY is None else [n for n in names if n == "grpo" or n in ONLY]


def build(name: str) -> ef.Method:
    return ef.get_method(name, **PARAMS.get(name, {}))


def interleave(
    steps: dict[str, Callable[[], None]],
    rounds: int,
    warmup: int = 2,
    seed: int = 0,
    repeats: int = 1,
    reference: str | None = None,
    reference_every: int = 0,
) -> dict[str, list[float]]:
    """Seconds per step of each callable, per timed round: the median of its steps in that round.
    A round is ``repeats`` passes over the callables, each pass in a new shuffled order; the first
    ``warmup`` rounds are not kept.

    With ``reference`` and ``reference_every`` = k > 0, the reference (grpo) does not take one
    shuffled place per pass: it steps first and again after every k others, so its median in a round
    comes from steps spread over the whole round. Every ratio of a round divides by that median; with
    a single reference step, that one step's noise (or the machine's speed at its moment) moved every
    ratio of the round together.

    Time is this process's CPU time (``time.process_time``) by default — on a shared machine
    wall-clock time mostly measures the neighbours; ``CLOCK = time.perf_counter`` for wall time.
    """
    rng = random.Random(seed)
    spread = reference is not None and reference_every > 0
    names = [n for n in steps if not spread or n != reference]
    per_round: dict[str, list[float]] = {n: [] for n in steps}
    for r in range(warmup + rounds):
        times: dict[str, list[float]] = {n: [] for n in steps}
        for _ in range(repeats):
            rng.shuffle(names)
            order = list(names)
            if spread:
                order = [
                    n
                    for i in range(0, len(names), reference_every)
                    for n in (reference, *names[i : i + reference_every])
                ]
            for n in order:
                gc.collect()
                gc.disable()
                try:
                    t0 = CLOCK()
                    steps[n]()
                    times[n].append(CLOCK() - t0)
                finally:
                    gc.enable()
        if r >= warmup:
            for n in steps:
                per_round[n].append(statistics.median(times[n]))
    return per_round


REFERENCE_EVERY = 8  # grpo steps first and after every 8 other methods (interleave)
LIMIT = 1.05  # the acceptance rule: a method's step within 1.05× grpo's
LEVEL = 0.95
LOSS_SHARE = (
    "The methods whose model forward and backward equal grpo's: their extra loss-part time (case (a)) "
    "over grpo's whole model step (case (b)), i.e. their step ratio without the model's timing noise:"
)
INTERVAL = (
    "95 % Student-t interval on the mean log of the per-round ratios method/grpo, mapped back with exp "
    "(an interval for the geometric-mean ratio)"
)


def ratio_summary(ratios: list[float], level: float = LEVEL) -> dict[str, float | int | str]:
    """Median, geometric mean and ``level`` interval of per-round ratios r_i > 0.

    With x_i = log r_i, m their mean, s their sample std (ddof 1) and n ≥ 2 rounds:
    ``[lo, hi] = exp(m ∓ t_{(1+level)/2, n−1}·s/√n)``; one round gives lo = hi = NaN.
    ``within``: "yes" if hi ≤ LIMIT, "no" if lo > LIMIT, else "open".
    """
    from scipy import stats

    if not ratios or any(not (r > 0 and math.isfinite(r)) for r in ratios):
        raise AnalysisError("ratios", f"must be a non-empty list of finite values > 0, got {ratios}")
    n = len(ratios)
    logs = [math.log(r) for r in ratios]
    m = statistics.fmean(logs)
    if n >= 2:
        half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * statistics.stdev(logs) / math.sqrt(n)
        lo, hi = math.exp(m - half), math.exp(m + half)
    else:
        lo = hi = math.nan
    within = "yes" if hi <= LIMIT else "no" if lo > LIMIT else "open"
    return {"median": statistics.median(ratios), "geo_mean": math.exp(m), "lo": lo, "hi": hi, "n": n, "within": within}


def summarize(per_round: dict[str, list[float]]) -> tuple[dict[str, float], dict[str, dict]]:
    """Per-round seconds → (median seconds per method, per-method ratio summary vs grpo)."""
    medians = {n: statistics.median(v) for n, v in per_round.items()}
    base = per_round["grpo"]
    ratios = {}
    for n, v in per_round.items():
        if n == "grpo":
            continue
        r = [a / b for a, b in zip(v, base, strict=True)]
        ratios[n] = {**ratio_summary(r), "per_round": r}
    return medians, ratios


def rollout_fields(n: int, t: int, group: int, gen: torch.Generator) -> dict:
    lengths = torch.randint(t // 4, t + 1, (n,), generator=gen)
    mask = (torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)).float()
    return dict(
        mask=mask,
        rewards=torch.randint(0, 2, (n,), generator=gen).float(),
        group_index=torch.arange(n) // group,
        reward_baselines=torch.rand(n, generator=gen),  # remax: a greedy response's reward
        sum_p2=torch.rand(n, t, generator=gen),  # optimal_token_baseline: the rollout's Σπ²
        expert_mask=torch.arange(n) % group == group - 1,  # chord: one expert row per group
        step=3,
        total_steps=10,
    )


def loss_rows(method: ef.Method, f: dict) -> dict:
    """The per-row fields a method's loss reads (positive_nll: rewards; chord: expert_mask); the
    other methods' loss batches stay as before."""
    return {k: f[k] for k in ("rewards", "expert_mask") if k in method.needs}


# ------------------------------------------------------------------------------------------
# (a) tensors
# ------------------------------------------------------------------------------------------


def case_tensors(n: int, t: int, rounds: int, repeats: int = 1) -> dict[str, list[float]]:
    gen = torch.Generator().manual_seed(0)
    f = rollout_fields(n, t, 8, gen)
    base_logp = -torch.rand(n, t, generator=gen) * 3
    old_logp = base_logp + 0.05 * torch.randn(n, t, generator=gen)
    old_entropy = torch.rand(n, t, generator=gen) * 2
    ref_logp = base_logp + 0.1 * torch.randn(n, t, generator=gen)
    rollout_logp = old_logp + 0.1 * torch.randn(n, t, generator=gen)  # the inference engine's
    steps = {}
    for name in method_names():
        method = build(name)
        k = needs_of(method).topk
        base_topk = None if k is None else -torch.rand(n, t, k, generator=gen).cumsum(-1)

        def step(method: ef.Method = method, base_topk: torch.Tensor | None = base_topk) -> None:
            logp = base_logp.clone().requires_grad_(True)
            entropy = old_entropy.clone().requires_grad_(True)
            topk = None if base_topk is None else base_topk.clone().requires_grad_(True)
            b = ef.TokenBatch(logp, old_logp, None, f["mask"], entropy=entropy, old_entropy=old_entropy,
                              ref_logp=ref_logp, rewards=f["rewards"], group_index=f["group_index"],
                              reward_baselines=f["reward_baselines"], sum_p2=f["sum_p2"],
                              step=f["step"], total_steps=f["total_steps"])  # fmt: skip
            adv = ef.compute_advantages(b, method)
            b = ef.TokenBatch(logp, old_logp, adv, f["mask"], entropy=entropy, old_entropy=old_entropy,
                              ref_logp=ref_logp, rollout_logp=rollout_logp, group_index=f["group_index"],
                              topk_logp=topk, step=f["step"], total_steps=f["total_steps"],
                              **loss_rows(method, f))  # fmt: skip
            ef.policy_loss(b, method).loss.backward()

        steps[name] = step
    return interleave(steps, rounds, repeats=repeats, reference="grpo", reference_every=REFERENCE_EVERY)


# ------------------------------------------------------------------------------------------
# (b) a small transformer
# ------------------------------------------------------------------------------------------


def tiny_llama(vocab: int, hidden: int, layers: int, seed: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=4096,
    )
    return LlamaForCausalLM(cfg).float()


def case_model(
    n: int, t: int, rounds: int, vocab: int, hidden: int, layers: int, repeats: int = 1
) -> tuple[dict[str, list[float]], dict]:
    gen = torch.Generator().manual_seed(1)
    policy = tiny_llama(vocab, hidden, layers, seed=0)
    ref = tiny_llama(vocab, hidden, layers, seed=1).eval()
    ids = torch.randint(0, vocab, (n, t + 1), generator=gen)
    f = rollout_fields(n, t, 8, gen)

    def stats(model: torch.nn.Module, topk: int | None = None) -> tuple[ef.TokenStats, torch.Tensor | None]:
        logits = model(input_ids=ids[:, :-1]).logits
        out = ef.token_stats(logits, ids[:, 1:])
        return out, None if topk is None else topk_logprobs(logits, topk)  # simko: the top-K log-probs

    with torch.no_grad():
        old = stats(policy)[0]
        ref_logp = stats(ref)[0].logp
    old_logp, old_entropy = old.logp.detach(), old.entropy.detach()
    rollout_logp = old_logp + 0.1 * torch.randn(n, t, generator=gen)  # the inference engine's

    def make_step(method: ef.Method, ref_forward: bool = False) -> Callable[[], None]:
        def step() -> None:
            policy.zero_grad(set_to_none=True)
            if ref_forward:
                with torch.no_grad():
                    rl = stats(ref)[0].logp
            else:
                rl = ref_logp
            s, topk = stats(policy, needs_of(method).topk)
            b = ef.TokenBatch(s.logp, old_logp, None, f["mask"], entropy=s.entropy, old_entropy=old_entropy,
                              ref_logp=rl, rewards=f["rewards"], group_index=f["group_index"],
                              reward_baselines=f["reward_baselines"], sum_p2=f["sum_p2"],
                              step=f["step"], total_steps=f["total_steps"])  # fmt: skip
            adv = ef.compute_advantages(b, method)
            b = ef.TokenBatch(s.logp, old_logp, adv, f["mask"], entropy=s.entropy, old_entropy=old_entropy,
                              ref_logp=rl, rollout_logp=rollout_logp, group_index=f["group_index"],
                              topk_logp=topk, step=f["step"], total_steps=f["total_steps"],
                              **loss_rows(method, f))  # fmt: skip
            ef.policy_loss(b, method).loss.backward()

        return step

    steps = {name: make_step(build(name)) for name in method_names()}
    if "kl_ref" in method_names():
        steps["kl_ref+ref_fwd"] = make_step(build("kl_ref"), ref_forward=True)
    n_params = sum(p.numel() for p in policy.parameters())
    per_round = interleave(steps, rounds, warmup=1, repeats=repeats, reference="grpo", reference_every=REFERENCE_EVERY)
    return per_round, {"params": n_params}


# ------------------------------------------------------------------------------------------


def same_model_work(name: str) -> bool:
    """The method's step runs grpo's model forward and backward exactly: no loss term differentiates
    the entropy, no top-K log-probs, no reference forward in the step."""
    if name == "kl_ref+ref_fwd":
        return False
    needs = needs_of(build(name))
    return not needs.entropy_grad and needs.topk is None


def loss_share(
    a_medians: dict[str, float], a_ratios: dict[str, dict], b_medians: dict[str, float]
) -> dict[str, dict[str, float]]:
    """A method's extra loss-part time (case (a), on case (b)'s ``[N, T]``) as a share of grpo's
    whole model step (case (b)), for the methods whose model work equals grpo's
    (:func:`same_model_work`): their step exceeds grpo's by the loss part alone, so
    ``1 + share`` is their step ratio without the model's timing noise.

    ``extra_ms`` = 1e3·(t_a,m − t_a,grpo) (medians), ``share`` = (t_a,m − t_a,grpo)/t_b,grpo and
    ``share_hi`` = (hi_a − 1)·t_a,grpo/t_b,grpo with hi_a the upper end of (a)'s ratio interval.
    """
    out = {}
    for n, q in a_ratios.items():
        if n in b_medians and same_model_work(n):
            extra = a_medians[n] - a_medians["grpo"]
            out[n] = {
                "extra_ms": 1e3 * extra,
                "share": extra / b_medians["grpo"],
                "share_hi": (q["hi"] - 1) * a_medians["grpo"] / b_medians["grpo"],
            }
    return out


def share_table(shares: dict[str, dict[str, float]]) -> str:
    rows = [
        "| method | loss part (a): extra ms | × grpo's model step (b) | upper end (95 %) |",
        "|---|---:|---:|---:|",
    ]
    for n in sorted(shares):
        q = shares[n]
        hi = "—" if q["share_hi"] is None or math.isnan(q["share_hi"]) else f"{1 + q['share_hi']:.4f}"
        rows.append(f"| {n} | {q['extra_ms']:+.2f} | {1 + q['share']:.4f} | {hi} |")
    return "\n".join(rows)


def table(results: dict[str, dict[str, float]]) -> str:
    """Medians only (the files written before the per-round ratios existed)."""
    cols = list(results)
    names = sorted({n for r in results.values() for n in r}, key=lambda n: (n != "grpo", n))
    head = "| method | work | " + " | ".join(f"{c}: ms | {c}: × grpo" for c in cols) + " |"
    sep = "|---|---|" + "---:|---:|" * len(cols)
    rows = [head, sep]
    for n in names:
        cells = []
        for c in cols:
            r = results[c]
            if n in r:
                cells += [f"{1e3 * r[n]:.1f}", f"{r[n] / r['grpo']:.3f}"]
            else:
                cells += ["—", "—"]
        rows.append(f"| {n} | {kind_of(n)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def ratio_table(results: dict[str, dict[str, float]], ratios: dict[str, dict[str, dict]]) -> str:
    """Per case: median ms, the median of the per-round ratios to grpo, its 95 % interval and
    whether the step is within LIMIT× grpo's (see ``ratio_summary``)."""
    cols = list(results)
    names = sorted({n for r in results.values() for n in r}, key=lambda n: (n != "grpo", n))
    head = (
        "| method | work | "
        + " | ".join(f"{c}: ms | {c}: × grpo (median) | {c}: 95 % interval | {c}: ≤ {LIMIT}×" for c in cols)
        + " |"
    )
    sep = "|---|---|" + "---:|---:|---:|:---:|" * len(cols)
    rows = [head, sep]
    for n in names:
        cells = []
        for c in cols:
            if n not in results[c]:
                cells += ["—"] * 4
            elif n == "grpo":
                cells += [f"{1e3 * results[c][n]:.1f}", "1.000", "—", "—"]
            else:
                q = ratios[c][n]
                ci = "—" if q["lo"] is None or math.isnan(q["lo"]) else f"{q['lo']:.3f}–{q['hi']:.3f}"
                cells += [f"{1e3 * results[c][n]:.1f}", f"{q['median']:.3f}", ci, q["within"]]
        rows.append(f"| {n} | {kind_of(n)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=["a", "b", "both"], default="both")
    ap.add_argument("--n", type=int, default=64, help="responses per batch [64]")
    ap.add_argument("--t", type=int, default=1024, help="tokens per response, case (a) [1024]")
    ap.add_argument("--t-model", type=int, default=128, help="tokens per response, case (b) [128]")
    ap.add_argument("--rounds", type=int, default=15, help="timed rounds per case [15]")
    ap.add_argument("--rounds-model", type=int, default=7, help="timed rounds, case (b) [7]")
    ap.add_argument("--repeats", type=int, default=1, help="steps of each method per round, median kept [1]")
    ap.add_argument("--vocab", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads [1: CPU time = work]")
    ap.add_argument("--wall", action="store_true", help="time wall-clock instead of process CPU time")
    ap.add_argument("--methods", default=None, help="only these methods (comma-separated), next to grpo")
    ap.add_argument("--out", default=None, help="also write the result as JSON (date, machine, command, per round)")
    ap.add_argument("--from-json", nargs="+", default=None, help="print the tables of saved results, run nothing")
    args = ap.parse_args()
    if args.from_json:
        for path in args.from_json:
            saved = json.loads(Path(path).read_text())
            print("\n".join(saved["info"]))
            if "ratios" in saved:
                print(f"interval: {saved['interval']}; {saved['repeats']} step(s) of each method per round")
                print(ratio_table(saved["results"], saved["ratios"]))
                if saved.get("loss_share"):
                    print(f"\n{LOSS_SHARE}")
                    print(share_table(saved["loss_share"]))
            else:  # written before the per-round ratios: medians only
                print(table(saved["results"]))
        return
    if args.repeats < 1 or args.rounds < 1 or args.rounds_model < 1:
        ap.error(f"--repeats, --rounds and --rounds-model must be ≥ 1, got {args.repeats}, {args.rounds}, "
                 f"{args.rounds_model}")  # fmt: skip
    global CLOCK, ONLY
    ONLY = args.methods.split(",") if args.methods else None
    CLOCK = time.perf_counter if args.wall else time.process_time
    torch.set_num_threads(args.threads)

    per_round: dict[str, dict[str, list[float]]] = {}
    info = [
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}",
        f"grpo steps first in each pass and after every {REFERENCE_EVERY} other methods",
    ]
    if args.case in ("a", "both"):
        t0 = time.perf_counter()
        per_round[f"(a) [{args.n},{args.t}]"] = case_tensors(args.n, args.t, args.rounds, args.repeats)
        info.append(
            f"(a) tensors [{args.n}, {args.t}] float32, {args.rounds} rounds × {args.repeats} steps, "
            f"{time.perf_counter() - t0:.0f}s"
        )
    if args.case in ("b", "both"):
        t0 = time.perf_counter()
        res, meta = case_model(
            args.n, args.t_model, args.rounds_model, args.vocab, args.hidden, args.layers, args.repeats
        )
        per_round[f"(b) model [{args.n},{args.t_model}]"] = res
        info.append(
            f"(b) Llama {args.layers} layers, hidden {args.hidden}, vocab {args.vocab} ({meta['params'] / 1e6:.2f} M "
            f"params), batch [{args.n}, {args.t_model}], {args.rounds_model} rounds × {args.repeats} steps, "
            f"{time.perf_counter() - t0:.0f}s"
        )
    summaries = {c: summarize(v) for c, v in per_round.items()}
    results = {c: m for c, (m, _) in summaries.items()}
    ratios = {c: r for c, (_, r) in summaries.items()}
    print("\n".join(info))
    print(f"interval: {INTERVAL}; {args.repeats} step(s) of each method per round")
    print(ratio_table(results, ratios))
    shares = {}
    if args.case == "both" and args.t == args.t_model:
        (a,), (b,) = [c for c in results if c.startswith("(a)")], [c for c in results if c.startswith("(b)")]
        shares = loss_share(results[a], ratios[a], results[b])
        print(f"\n{LOSS_SHARE}")
        print(share_table(shares))
    if args.out:
        record = {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, "
            f"1-min load average {os.getloadavg()[0]:.2f} when written",
            "command": "python " + " ".join(sys.argv),
            "clock": "wall" if args.wall else "process CPU time",
            "info": info,
            "repeats": args.repeats,
            "interval": INTERVAL,
            "results": results,
            "rounds": per_round,
            "ratios": ratios,
            "loss_share": shares,
        }
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
