"""The doctor's verl check: entry point, every registered mode, ``entflow.grpo == vanilla``;
and it fails when entflow's registered loss is off by 1e-4 relative or a mode crashes."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from entflow.doctor.verl import TOL, _verl_get_loss_fn, check_verl

NAMES = ["verl[entry point]", "verl[every loss mode runs]", "verl[entflow.grpo == vanilla]"]


def _scaled_entflow_loss(mode):
    fn = _verl_get_loss_fn(mode)
    if not mode.startswith("entflow"):
        return fn

    def wrapped(*args, **kwargs):
        loss, *rest = fn(*args, **kwargs)
        return (loss * (1 + 1e-4), *rest)

    return wrapped


def _crashing_mode(mode):
    if mode == "entflow.clip_cov":
        return lambda *a, **k: (_ for _ in ()).throw(IndexError("boom"))
    return _verl_get_loss_fn(mode)


def test_verl_plugin_passes_and_injected_faults_fail():
    good = check_verl()
    assert [(r.name, r.status) for r in good] == [(n, "PASS") for n in NAMES], [r.detail for r in good]
    assert "refused as documented" in good[1].detail

    scaled = check_verl(get_loss_fn=_scaled_entflow_loss)
    assert [r.status for r in scaled] == ["PASS", "PASS", "FAIL"], [r.detail for r in scaled]
    assert scaled[2].error > 10 * TOL  # the loss is ~0.3, so its 1e-4 relative change is ~3e-5 absolute

    crashing = check_verl(get_loss_fn=_crashing_mode)
    assert crashing[1].status == "FAIL" and "entflow.clip_cov" in crashing[1].detail
