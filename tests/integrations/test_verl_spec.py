"""The verl plugin's view of a method (``integrations/verl/spec.py``, no verl import) is its
``MethodNeeds``: a new method's declarations reach it without touching the plugin."""

from __future__ import annotations

import torch

import entflow as ef
from entflow.integrations.verl.spec import (
    controller_state,
    needs_model_entropy,
    needs_ref_logp,
    registry_blockers,
    reseed,
    shapes_advantages,
    stream_seed,
    verl_blockers,
)
from support.throwaway_methods import RolloutEntropyShaper, registered


def test_a_new_shaper_is_kept_out_of_the_registered_loss():
    with registered(RolloutEntropyShaper):
        method = ef.get_method("clip_higher+test_rollout_entropy_shaper")
        assert shapes_advantages(method)
        assert registry_blockers(method) == [
            "test_rollout_entropy_shaper shapes advantages (run by the entflow trainer where verl computes them)"
        ]


def test_blockers_and_fields_per_part():
    m = ef.get_method("entropy_bonus+kl_ref+pos_adv_reweight+steer", estimator="tabular")
    assert needs_model_entropy(m) and needs_ref_logp(m)
    assert [r.split(" ")[0] for r in registry_blockers(m)] == [
        "entropy_bonus",
        "kl_ref",
        "pos_adv_reweight",
        "steer",
        "steer(estimator='tabular')",  # what verl cannot run at all cannot run as a registered loss either
    ]
    assert verl_blockers(m) == [
        "steer(estimator='tabular') needs sum_p2_logp = Σπ²·log π per token, which verl's forward pass does not "
        "compute; use estimator='steer' or 'opefo'"
    ]
    # a constant λ is not a controller, and reads no training step: a registered loss can run it
    assert registry_blockers(ef.get_method("pos_adv_reweight", schedule="constant")) == []
    assert "reads the training step" in registry_blockers(ef.get_method("pos_adv_reweight", schedule="stage"))[0]
    assert not needs_model_entropy(ef.get_method("steer")) and not needs_ref_logp(ef.get_method("steer"))


def test_methods_needing_what_verl_batches_lack_are_refused_on_both_paths():
    for name, what in (("chord", "expert rows"), ("positive_nll", "rewards")):
        m = ef.get_method(name)
        assert any(what in r for r in verl_blockers(m)), name
        assert any(what in r for r in registry_blockers(m)), name


def test_controller_state_and_reseed_follow_the_needs():
    m = ef.get_method("adaptive_entropy+clip_cov+pos_adv_reweight", schedule="constant")
    assert set(controller_state(m)) == {"adaptive_entropy"}  # λ constant: not a controller
    assert m.parts[1].state_dict() == {"generator": {}}  # no draw yet
    reseed(m, step=3, rank=1, device="cpu")  # reseeds the stochastic part only
    streams = m.parts[1].state_dict()["generator"]
    for name, rank in (("per_call", 1), ("shared", 0)):
        expected = torch.Generator().manual_seed(stream_seed(0, 3, rank)).get_state()  # clip_cov's seed is 0
        assert torch.equal(streams[name]["state"], expected)
    assert m.parts[0].state_dict() == {"coef": 0.0, "active": True} and m.parts[2].lam == 1.0  # untouched
