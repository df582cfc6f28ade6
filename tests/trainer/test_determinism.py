"""A real-model run with 2 threads repeats bit for bit (entflow.trainer.determinism):
three steps of the real path (hf.setup.train_real: shared prompts, the packed update forward) on a
small grouped-head Llama, twice in one process, the second while other processes keep every core
busy: every gradient the optimizer saw, every final weight and every metric are bit-identical.

Without :func:`~entflow.trainer.determinism.deterministic_kernels` they are not: the packed
forward reads each group's last prompt token once per response, and the backward of that read
(``index_put_`` with ``accumulate=True``) sums the rows' gradients with atomic float adds from both
threads, in the order the threads reach them. The model is sized so that this kernel takes its
parallel path (the gradient it scatters, rows × T × hidden = 16 × 12 × 256, is over torch's
``GRAIN_SIZE`` of 32768 elements) and each prompt is read by 8 rows; the fault-injection test below
checks that the comparison fails then."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import entflow.trainer.loop as loop
from entflow.hf.setup import RealTrainConfig, train_real
from entflow.trainer.config import build_config
from support.real_tiny import save_grouped_llama, tiny_run_overrides

CLIP = torch.nn.utils.clip_grad_norm_  # torch's own, which the recording wrapper calls


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A 2-layer Llama, hidden size 256, 4 query and 2 key/value heads, tied embeddings."""
    return save_grouped_llama(tmp_path_factory.mktemp("determinism") / "model", hidden_size=256)


@contextlib.contextmanager
def busy_cores():
    """One busy-looping process per core for as long as the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def train_and_record(model_dir: Path, out: Path, name: str, monkeypatch) -> dict:
    """Three steps with 2 threads: each update's gradients (as the optimizer gets them, before
    clipping), the final weights and metrics.jsonl."""
    grads: list[list[torch.Tensor]] = []

    def recording(parameters, *args, **kwargs):
        params = list(parameters)
        grads.append([p.grad.detach().clone() for p in params if p.grad is not None])
        return CLIP(params, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", recording)
    keys = dict(steps=3, threads=2, prompts_per_step=2, group_size=8, mini_batches=1, max_new_tokens=12, lr=1e-3)
    keys |= dict(eval_every=0, val_size=2, eval_k=1, audit=False)  # validation at steps 0 and 3 only
    cfg = build_config({"model": str(model_dir), "name": name}, tiny_run_overrides(out, **keys), cls=RealTrainConfig)
    threads = torch.get_num_threads()
    try:
        run = train_real(cfg)
    finally:
        torch.set_num_threads(threads)
    from safetensors.torch import load_file

    weights = load_file(run / "checkpoints" / "final" / "model.safetensors")
    metrics = (run / "metrics.jsonl").read_text()
    return {"grads": grads, "weights": weights, "metrics": metrics}


def assert_bit_identical(a: dict, b: dict) -> None:
    assert len(a["grads"]) == len(b["grads"]) == 3  # one update a step
    for step, (ga, gb) in enumerate(zip(a["grads"], b["grads"], strict=True), 1):
        assert len(ga) == len(gb)
        for i, (x, y) in enumerate(zip(ga, gb, strict=True)):
            assert torch.equal(x, y), f"step {step}: gradient {i} differs by up to {float((x - y).abs().max())}"
    assert a["weights"].keys() == b["weights"].keys()
    for k in a["weights"]:
        assert torch.equal(a["weights"][k], b["weights"][k]), f"final weight {k} differs"
    assert a["metrics"] == b["metrics"]
    assert [json.loads(x)["step"] for x in a["metrics"].splitlines()] == [0, 1, 2, 3]


def test_a_run_with_two_threads_repeats_bit_for_bit_also_with_busy_cores(model_dir, tmp_path, parity, monkeypatch):
    first = train_and_record(model_dir, tmp_path, "alone", monkeypatch)
    with busy_cores():
        second = train_and_record(model_dir, tmp_path, "busy", monkeypatch)
    assert_bit_identical(first, second)


def test_without_deterministic_kernels_the_runs_part(model_dir, tmp_path, parity, monkeypatch):
    """Fault injection: the trainer without the fix. The gradients part in at least one of a few
    repeats (in practice in every one) — so the test above would see the nondeterminism."""
    monkeypatch.setattr(loop, "deterministic_kernels", lambda enabled=True: contextlib.nullcontext())
    first = train_and_record(model_dir, tmp_path, "a", monkeypatch)
    for rep in range(3):
        with busy_cores():
            other = train_and_record(model_dir, tmp_path, f"b{rep}", monkeypatch)
        try:
            assert_bit_identical(first, other)
        except AssertionError:
            return  # the runs parted
    pytest.fail("three repeats without deterministic_kernels were bit-identical: the model no longer shows the race")
