"""Masked attention over SmolLM2-135M's grouped key/value heads (9 query heads, 3 key/value heads):
K and V copied to every query head (transformers' ``repeat_kv``, what it does under a mask) against
read in place (``scaled_dot_product_attention(enable_gqa=True)``, what
:func:`entflow.trainer.grouped_kv.grouped_kv_attention` switches on), on this CPU.

    PYTHONPATH=src .venv/bin/python benchmarks/grouped_kv.py [--threads 2] [--reps 8] [--no-generate]

1. One attention call, milliseconds (median of interleaved repeats): a decoding step's query of one
   token over L = 112 cached positions at N = 32, 64 and 128 rows, and a packed update's
   query of L = 400 tokens; whether the two outputs are bit-identical.
2. ``entflow.trainer.rollout.generate`` on SmolLM2-135M in the real-v2 setting
   (``src/entflow/hf/configs/real_v2_design.yaml``: its prompts with the two worked examples,
   16 new tokens, shared prompts): a step's rollout (4 prompts × 8 responses at T = 1, raw logits and
   entropy kept, as the trainer asks) and a validation batch (64 prompts, greedy), with and without
   :func:`grouped_kv_attention`, interleaved, seconds per call; whether the tokens and logits of the
   two arms are bit-identical.

3. ``--step0``: only the numbers a run reports at step 0 (the real-v2 design setting, seed 8: the
   validation's sampled accuracy, length and entropy and the fixed-text probe's entropy) with
   transformers' own decoding and with :func:`grouped_kv_attention`, each twice: whether they agree
   bit for bit (run once per transformers release, ``--out`` one file each).

``--out r.json`` writes every call's seconds (``benchmarks/_result.py``);
``python benchmarks/grouped_kv.py --from-json r.json`` prints the tables from it and runs nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
from pathlib import Path

import _result  # benchmarks/_result.py

PRESET = Path(__file__).resolve().parents[1] / "src/entflow/hf/configs/real_v2_design.yaml"
HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64  # SmolLM2-135M
# (what, rows N, query length, key length)
SHAPES = [
    ("decoding step", 32, 1, 112),
    ("decoding step", 64, 1, 112),
    ("decoding step", 128, 1, 112),
    ("packed update", 1, 400, 400),
]


def one_call(reps: int = 30) -> list[dict]:
    """Per shape: every interleaved call's seconds of ``copy`` and ``in place``, and whether they agree bit for bit."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention as sdpa
    from transformers.integrations.sdpa_attention import repeat_kv

    from _schedule import interleaved_times  # benchmarks/_schedule.py

    out = []
    g = torch.Generator().manual_seed(0)
    for what, n, lq, lk in SHAPES:
        q = torch.randn(n, HEADS, lq, HEAD_DIM, generator=g)
        k, v = (torch.randn(n, KV_HEADS, lk, HEAD_DIM, generator=g) for _ in range(2))
        mask = torch.zeros(n, 1, lq, lk)
        mask[: n // 2, :, :, :7] = torch.finfo(torch.float32).min  # left padding on half the rows
        mask = mask + torch.full((lq, lk), torch.finfo(torch.float32).min).triu(1 + lk - lq)  # causal

        def copy(q=q, k=k, v=v, mask=mask):
            rep = HEADS // KV_HEADS
            return sdpa(q, repeat_kv(k, rep), repeat_kv(v, rep), attn_mask=mask)

        def in_place(q=q, k=k, v=v, mask=mask):
            return sdpa(q, k, v, attn_mask=mask, enable_gqa=True)

        times = interleaved_times({"copy": copy, "in place": in_place}, reps)
        shape = {"what": what, "rows": n, "query": lq, "keys": lk}
        out.append({**shape, "identical": bool(torch.equal(copy(), in_place())), **times})
    return out


def smollm2_generate(reps: int) -> dict:
    """SmolLM2-135M's ``generate`` with and without :func:`grouped_kv_attention`, for a rollout and a
    validation batch: every interleaved call's seconds, and whether the arms' outputs agree bit for bit."""
    import torch
    import yaml

    import entflow.trainer.rollout as rollout
    from _schedule import interleaved_times  # benchmarks/_schedule.py
    from entflow.hf.setup import RealTrainConfig, real_setup
    from entflow.trainer.grouped_kv import grouped_kv_attention

    raw = yaml.safe_load(PRESET.read_text())
    cfg = RealTrainConfig(**{k: v for k, v in raw.items() if k in RealTrainConfig.__dataclass_fields__})
    cfg.validate()
    parts = real_setup(cfg)
    parts.model.eval()
    tok = parts.tokenizer
    prompts = [p.prompt for p in parts.task.sample_problems(64, random.Random(1))]
    cases = {
        "rollout": dict(prompts=prompts[:4], n=cfg.group_size, output_logits=True, record_entropy=True),
        "validation": dict(prompts=prompts, n=1, greedy=True, output_logits=True),
    }
    arms = {"copy K, V": lambda m: contextlib.nullcontext(), "in place": grouped_kv_attention}

    def call(arm, case):
        rollout.grouped_kv_attention = arms[arm]
        torch.manual_seed(0)
        kw = dict(cases[case])
        return rollout.generate(parts.model, tok, kw.pop("prompts"), cfg.max_new_tokens, share_prompts=True, **kw)

    out: dict = {}
    for case in cases:
        a, b = (call(arm, case) for arm in arms)
        same = torch.equal(a.response_ids, b.response_ids) and torch.equal(a.logits, b.logits)
        fns = {arm: (lambda arm=arm, case=case: call(arm, case)) for arm in arms}
        out[case] = {"identical": bool(same), "rows": int(a.response_ids.shape[0]), **interleaved_times(fns, reps)}
    rollout.grouped_kv_attention = grouped_kv_attention
    return out


def step0_validation(preset: Path = PRESET, repeats: int = 2) -> list[dict]:
    """The step-0 validation metrics (``hf.setup._validate``, probe included) of ``preset`` (default
    the real-v2 design setting) at seed 8, with transformers' own decoding and with :func:`grouped_kv_attention`,
    alternating, ``repeats`` times each."""
    import yaml

    import entflow.trainer.rollout as rollout
    from entflow.hf.setup import RealTrainConfig, real_setup
    from entflow.trainer.config import build_config
    from entflow.trainer.grouped_kv import grouped_kv_attention

    raw = {k: v for k, v in yaml.safe_load(Path(preset).read_text()).items() if k != "methods"}
    cfg = build_config(raw, ["seed=8"], cls=RealTrainConfig)
    parts = real_setup(cfg)
    arms = {"transformers' own": lambda m: contextlib.nullcontext(), "grouped_kv": grouped_kv_attention}
    out = []
    for rep in range(repeats):
        for arm, ctx in arms.items():
            rollout.grouped_kv_attention = ctx
            out.append({"arm": arm, "repeat": rep, **parts.validate(parts.model, parts.tokenizer, parts.task, cfg, 0)})
    rollout.grouped_kv_attention = grouped_kv_attention
    return out


def report(results: dict) -> str:
    """The two parts' tables: ms per attention call and ratio per shape; seconds per generate call."""
    med = statistics.median
    parts = [f"torch {results['torch']}, transformers {results['transformers']}, {results['threads']} threads"]
    if results.get("one_call"):
        rows = [
            [r["what"], str(r["rows"]), str(r["query"]), str(r["keys"]), f"{med(r['copy']) * 1e3:.2f}",
             f"{med(r['in place']) * 1e3:.2f}", f"{med(r['in place']) / med(r['copy']):.2f}",
             "yes" if r["identical"] else "no"]
            for r in results["one_call"]
        ]  # fmt: skip
        header = ["call", "rows", "query", "keys", "copy K, V ms", "in place ms", "ratio", "bit-identical"]
        parts.append(_result.markdown_table(header, rows))
    if results.get("generate"):
        gen = results["generate"]
        reps = len(next(iter(gen.values()))["copy K, V"])
        parts.append(f"SmolLM2-135M generate (real-v2 setting, 16 new tokens), median of {reps} interleaved calls:")
        rows = []
        for case, r in gen.items():
            base, new = med(r["copy K, V"]), med(r["in place"])
            ident = "yes" if r["identical"] else "no"
            rows.append([case, str(r["rows"]), f"{base:.2f}", f"{new:.2f}", f"{new / base:.2f}", ident])
        header = ["generate", "rows", "copy K, V s", "in place s", "ratio", "tokens and logits bit-identical"]
        parts.append(_result.markdown_table(header, rows))
    if results.get("step0"):
        rows = results["step0"]
        keys = ["val/acc", "val/response_len", "val/entropy", "val/probe_entropy"]
        same = all(r[k] == rows[0][k] for r in rows for k in keys)
        table = [[r["arm"], str(r["repeat"] + 1), *(repr(r[k]) for k in keys)] for r in rows]
        parts.append(
            f"Step-0 validation of {results.get('preset', 'real_v2_design.yaml')} (seed 8): "
            + ("every number bit-identical" if same else "NOT bit-identical")
        )
        parts.append(_result.markdown_table(["decoding", "repeat", *keys], table))
    return "\n\n".join(parts)


def options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=8, help="generate calls per arm and case")
    ap.add_argument("--no-generate", action="store_true")
    ap.add_argument("--step0", action="store_true", help="only the step-0 validation numbers, both decodings")
    ap.add_argument("--preset", default=str(PRESET), help="--step0's setting (default: the real-v2 design preset)")


def measure(a: argparse.Namespace) -> dict:
    """One call's arms and the generate calls, or (``--step0``) only the preset's step-0 validation;
    with the torch and transformers versions and the threads."""
    import torch
    import transformers

    torch.set_num_threads(a.threads)
    results: dict = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": a.threads}
    if a.step0:
        results["preset"] = Path(a.preset).name
        results["step0"] = step0_validation(Path(a.preset))
        return results
    results["one_call"] = one_call()
    if not a.no_generate:
        results["generate"] = smollm2_generate(a.reps)
    return results


def main() -> None:
    _result.main(__doc__, options, measure, report)


if __name__ == "__main__":
    main()
