"""Calibration (paper 002 §5.3): AUROC against pair counting, edge cases."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from entflow.analysis.calibration import calibration, sequence_mean_logp


def _brute_auroc(scores, labels):
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_calibration_auroc_matches_pair_counting_with_ties():
    rng = np.random.default_rng(1)
    scores = np.round(rng.normal(-1.0, 0.5, 60), 1)  # rounding makes ties
    labels = rng.random(60) < 0.4
    scores[labels] += 0.3
    cal = calibration(scores, labels)
    assert cal.auroc == pytest.approx(_brute_auroc(scores, labels), abs=1e-12)
    assert cal.mean_correct == pytest.approx(scores[labels].mean())
    assert cal.mean_incorrect == pytest.approx(scores[~labels].mean())
    assert cal.gap == pytest.approx(scores[labels].mean() - scores[~labels].mean())
    assert (cal.n_correct, cal.n_incorrect) == (int(labels.sum()), int((~labels).sum()))


def test_calibration_edge_cases_and_sequence_mean_logp():
    assert calibration([0.0, -1.0], [1, 0]).auroc == 1.0
    assert calibration([-1.0, 0.0], [1.0, 0.0]).auroc == 0.0
    cal = calibration([-1.0, -2.0], [1, 1])
    assert math.isnan(cal.auroc) and math.isnan(cal.mean_incorrect)
    logp = torch.tensor([[-1.0, -3.0, -9.0], [-0.5, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(sequence_mean_logp(logp, mask), torch.tensor([-2.0, -0.5]))
