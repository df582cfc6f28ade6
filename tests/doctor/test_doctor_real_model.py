"""The doctor's real-model check: one decoding pass through ``rollout.generate`` and one policy-loss
update of a tiny grouped-head Llama pass against the float64 eager reference and name the versions;
they fail on a generate that crashes as transformers 5.25 made entflow's grouped-head switch crash (a
TypeError), on logits that differ by 1e-3 and on a loss 1 % off; without transformers (the core
install) they are skipped and ``entflow doctor`` still exits 0."""

from __future__ import annotations

import contextlib
import json
import sys

import pytest

pytest.importorskip("transformers")

import entflow.trainer.rollout as rollout
from entflow.cli.main import main
from entflow.doctor.real_model import DECODE_TOL, GRAD_TOL, PROMPTS, check_real_model, tiny_grouped_llama
from entflow.integrations.hooks import library_version
from entflow.methods.objective import policy_loss
from entflow.trainer import grouped_kv
from entflow.trainer.rollout import generate

TRANSFORMERS = library_version("transformers")


def test_decode_and_update_pass_and_name_the_versions():
    decode, update = check_real_model("cpu")
    assert [decode.name, update.name] == ["real_model[cpu,decode]", "real_model[cpu,update]"]
    assert decode.status == "PASS" and decode.error <= DECODE_TOL, decode.detail
    assert update.status == "PASS" and update.error <= GRAD_TOL, update.detail
    for r in (decode, update):
        assert f"transformers {TRANSFORMERS}, trl {library_version('trl')}" in r.detail
    assert decode.measurements["tokens"] >= 8  # greedy tokens of 4 prompts were compared


def test_decoding_runs_under_the_grouped_head_switch_with_padded_prompts(monkeypatch):
    """The check's model has grouped key/value heads and its prompts are left-padded, so decoding
    runs transformers' SDPA attention with entflow's grouped-head switch installed and a mask."""
    from transformers.integrations import sdpa_attention

    model, tok = tiny_grouped_llama("cpu")
    assert grouped_kv.has_grouped_kv_heads(model) and model.config._attn_implementation == "sdpa"
    assert not tok(PROMPTS, padding=True, return_tensors="pt")["attention_mask"].all()
    seen = []
    real = rollout.grouped_kv_attention

    @contextlib.contextmanager
    def recording(m):
        with real(m):
            seen.append(getattr(sdpa_attention.use_gqa_in_sdpa, "_entflow_widened", False))
            yield

    monkeypatch.setattr(rollout, "grouped_kv_attention", recording)
    assert [r.status for r in check_real_model("cpu")] == ["PASS", "PASS"]
    assert seen == [True, True]  # the decode check's generate and the update check's


def test_a_generate_that_crashes_fails_both_checks():
    def crashing(*args, **kwargs):
        raise TypeError("use_gqa() takes 2 positional arguments but 3 were given")

    decode, update = check_real_model("cpu", generate=crashing)
    for r in (decode, update):
        assert r.status == "FAIL" and r.detail.startswith(f"transformers {TRANSFORMERS}, trl "), r.detail
        assert "raised TypeError: use_gqa() takes 2 positional" in r.detail, r.detail


def test_logits_that_differ_fail_the_decode_check():
    def shifted(*args, **kwargs):
        gen = generate(*args, **kwargs)
        gen.logits = gen.logits + 1e-3
        return gen

    decode, update = check_real_model("cpu", generate=shifted)
    assert decode.status == "FAIL" and decode.error == pytest.approx(1e-3, rel=1e-3), decode.detail
    assert update.status == "PASS"  # the update re-scores the responses with its own forward


def test_a_loss_one_percent_off_fails_the_update_check():
    def scaled(*args, **kwargs):
        out = policy_loss(*args, **kwargs)
        out.loss = 1.01 * out.loss
        return out

    decode, update = check_real_model("cpu", loss_fn=scaled)
    assert decode.status == "PASS"
    assert update.status == "FAIL" and update.error == pytest.approx(0.01, rel=0.05), update.detail


def test_without_transformers_the_checks_are_skipped_and_doctor_passes(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers fails, find_spec finds none
    results = check_real_model("cpu")
    assert [r.status for r in results] == ["SKIP", "SKIP"]
    assert all("transformers not installed" in r.skipped_reason for r in results)
    assert main(["doctor", "--quick", "--only", "real_model", "--device", "cpu", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["status"] for c in report["checks"]] == ["SKIP", "SKIP"]
