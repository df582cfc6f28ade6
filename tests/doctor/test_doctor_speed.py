"""The doctor's speed check: passes on entflow, reports the ratios, and fails on a subject whose
outputs are wrong or that is grossly slower than the naive path."""

from __future__ import annotations

import time

import torch

import entflow as ef
from entflow.doctor.speed import SLOWDOWN_LIMIT, check_speed, shape_for

SMALL = (1, 32, 16384)  # outputs only: too small to judge speed
JUDGED = shape_for(torch.device("cpu"), quick=True)
# the tests always judge the speed, however fast this machine runs the naive path (no timing floor)
ALWAYS = {"min_judged_seconds": 0.0}


def test_speed_passes_and_reports_ratios():
    (r,) = check_speed("cpu", quick=True, shape=JUDGED, **ALWAYS)
    assert r.status == "PASS", r.detail
    m = r.measurements
    assert m["entflow_seconds"] > 0 and m["naive_seconds"] > 0 and m["agreement_error"] < 1e-5
    assert "naive takes" in r.detail and "× its time" in r.detail
    assert "too small to judge" not in r.detail  # the speed was judged


def test_speed_fails_on_wrong_outputs():
    def wrong(*args, **kwargs):
        st = ef.token_stats(*args, **kwargs)
        return st._replace(entropy=st.entropy * 1.001)

    (r,) = check_speed("cpu", quick=True, fn=wrong, shape=SMALL)
    assert r.status == "FAIL" and "outputs differ from naive" in r.detail


def test_speed_fails_when_grossly_slower_than_naive():
    def slow(*args, **kwargs):
        # the forward, then an idle wait of 60 forwards: naive's forward + backward costs about 7 of
        # entflow's forwards on a CPU, so the subject is ~9× naive, 3× past the limit. A wait scales
        # with the forward's own time, so a loaded machine (which slows naive as much) keeps the ratio.
        t0 = time.perf_counter()
        out = ef.token_stats(*args, **kwargs)
        time.sleep(60 * (time.perf_counter() - t0))
        return out

    (r,) = check_speed("cpu", quick=True, fn=slow, shape=JUDGED, **ALWAYS)
    assert r.status == "FAIL" and f"limit {SLOWDOWN_LIMIT:g}×" in r.detail, r.detail
