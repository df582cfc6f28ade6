"""The doctor's TRL check passes on EntflowGRPOTrainer and fails on a trainer whose loss is
changed by 1 % (a TRL step with a changed loss)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from entflow.doctor.trl import TOL, check_trl
from entflow.integrations.trl import EntflowGRPOTrainer


class _LossTimesOnePointZeroOne(EntflowGRPOTrainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        return 1.01 * super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def test_trl_step_equals_grpotrainer_and_a_changed_loss_fails():
    (good,) = check_trl("cpu")
    assert good.status == "PASS" and good.error <= TOL, good.detail
    assert good.measurements["update_norm"] > 1e-3  # the step moved the weights

    (bad,) = check_trl("cpu", trainer_cls=_LossTimesOnePointZeroOne)
    assert bad.status == "FAIL" and not bad.ok, bad.detail
    assert bad.error == pytest.approx(0.01, rel=0.05)  # SGD: the update is 1.01 × TRL's
