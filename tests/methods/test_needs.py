"""``MethodNeeds``: what each method needs from a trainer, from its declarations only.

The expectation table below is written by hand from docs/design.md §6 and each method's formula
(what its hooks read); every registered method must be in it. The declarations themselves are
checked against the code: perturbing a batch field a method does not declare leaves its batch
statistics and its advantage shaping bit-identical, while perturbing the declared ones changes
them (so the check can fail).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import entflow as ef
from entflow.core.estimators import ESTIMATORS
from entflow.errors import MissingInputError, UnknownMethodError
from entflow.methods.base import method_class
from entflow.methods.needs import MethodNeeds, needs_of, required_token_stats
from support.method_defaults import REQUIRED_PARAMS
from support.methods_ref import D, make_batch
from support.throwaway_methods import RolloutEntropyShaper, StrictOnPolicyMethod, registered

REQUIRED = REQUIRED_PARAMS  # no default
VALUES_HS = ("logp", "old_logp", "old_entropy")  # the estimators read p, r and H

# name → the MethodNeeds fields that differ from the defaults (nothing needed = plain GRPO)
EXPECTED: dict[str, dict] = {
    "grpo": {},
    "clip_higher": {},
    "clip_lower": {},
    "clip_tighter": {},
    "clip_free": {},
    "clip_extreme": {},
    "positive_only": {},
    "negative_only": {},
    "entropy_bonus": dict(entropy_grad=True, loss_fields=("entropy",)),  # −c·H with grad
    "adaptive_entropy": dict(
        entropy_grad=True,
        loss_fields=("entropy",),
        controllers=("adaptive_entropy",),
        stateful=("adaptive_entropy",),
    ),
    "kl_ref": dict(loss_fields=("ref_logp",)),
    "clip_cov": dict(
        statistics_fields=("logp", "old_logp"),  # Cov_t of log p and A among clipped-in tokens
        stateful=("clip_cov",),
        stochastic=("clip_cov",),
    ),
    "kl_cov": dict(statistics_fields=("logp",)),  # top-k Cov_t, no clip
    "steer": dict(reads_entropy=True, statistics_fields=VALUES_HS),
    "opefo": dict(reads_entropy=True, statistics_fields=VALUES_HS),
    "opefo_target": dict(reads_entropy=True, statistics_fields=VALUES_HS),
    "forking_tokens": dict(reads_entropy=True, statistics_fields=("old_entropy",)),
    "pos_adv_reweight": dict(controllers=("pos_adv_reweight",), stateful=("pos_adv_reweight",)),
    "rand_pos_clip": dict(stateful=("rand_pos_clip",), stochastic=("rand_pos_clip",)),
    "quadrant": dict(stateful=("quadrant",), stochastic=("quadrant",)),
    "w_reinforce": dict(advantage_fields=("rewards",), shapers=("w_reinforce",), replaces_advantages=True),
    "unlikeliness": dict(
        advantage_fields=("rewards", "group_index", "old_logp"),  # ranks by mean old log-prob
        rollout_stats=("old_logp",),
        shapers=("unlikeliness",),
        replaces_advantages=True,
    ),
    "gtpo": dict(
        reads_entropy=True,
        advantage_fields=("rewards", "group_index", "old_entropy"),
        rollout_stats=("old_entropy",),
        shapers=("gtpo",),
        replaces_advantages=True,
    ),
    "entropy_advantage": dict(
        reads_entropy=True,
        advantage_fields=("old_entropy",),
        rollout_stats=("old_entropy",),
        shapers=("entropy_advantage",),
    ),
    "edge_grpo": dict(
        reads_entropy=True,
        advantage_fields=("group_index", "old_entropy"),
        rollout_stats=("old_entropy",),
        shapers=("edge_grpo",),
    ),
    "ppl_shaping": dict(
        advantage_fields=("group_index", "old_logp"), rollout_stats=("old_logp",), shapers=("ppl_shaping",)
    ),
    "position_shaping": dict(shapers=("position_shaping",)),
    # the field's methods since the five papers (docs/methods.md)
    "cispo": {},  # −sg(clip(r))·A·log π: logp, old_logp, A only
    "gspo": {},  # sequence ratio from logp − old_logp
    "sapo": {},  # soft gate of r
    "ce_gppo": {},  # bounded gradient outside the clip, from r and A
    "archer": dict(reads_entropy=True, loss_fields=("ref_logp",)),  # entropy quantile split, KL to the reference
    "siren": dict(  # anchored bonus on the top-p entropy (its nucleus mass), anchor kept
        entropy_grad=True, loss_fields=("entropy",), entropy_top_p=0.8, stateful=("siren",)
    ),
    "entropic": dict(  # PI control on the batch mean entropy
        reads_entropy=True, statistics_fields=("old_entropy",), controllers=("entropic",), stateful=("entropic",)
    ),
    "aepo": dict(  # temperature controller; the trainer draws its REINFORCE samples
        temperature_samples=("aepo",), controllers=("aepo",), stateful=("aepo",)
    ),
    # verl 0.9.1's advantage estimators (methods/verl_advantages.py): each builds A from the rewards
    **{
        n: dict(advantage_fields=("rewards", "group_index"), shapers=(n,), replaces_advantages=True)
        for n in ("rloo", "reinforce_plus_plus_baseline", "opo", "gpg_advantage", "grpo_passk", "gdpo")
    },
    "reinforce_plus_plus": dict(  # no group baseline: the batch's whitening only
        advantage_fields=("rewards",), shapers=("reinforce_plus_plus",), replaces_advantages=True
    ),
    "remax": dict(  # the greedy response's reward as baseline, drawn by the host
        advantage_fields=("rewards", "reward_baselines"),
        shapers=("remax",),
        replaces_advantages=True,
        greedy_baseline=("remax",),
    ),
    # the objectives aimed at pass@k (methods/passk.py, methods/exploration.py)
    **{
        n: dict(advantage_fields=("rewards", "group_index"), shapers=(n,), replaces_advantages=True)
        for n in ("passk_training", "pkpo")
    },
    "simko": dict(  # top-K log-probs with grad (a token statistic), H read detached for the quantile
        reads_entropy=True, loss_fields=("topk_logp",), topk=3
    ),
    "erc": dict(  # H_θ/H_old per token: the current entropy (read detached) and the rollout's
        entropy_grad=True, reads_entropy=True, loss_fields=("entropy", "old_entropy")
    ),
    "aer": dict(  # −α(1 − acc_g)·H with grad; group accuracies from compute_advantages, looked up by id
        entropy_grad=True,
        loss_fields=("entropy", "group_index"),
        advantage_fields=("rewards", "group_index"),
        shapers=("aer",),
        controllers=("aer",),
        stateful=("aer",),
    ),
    "optimal_token_baseline": dict(  # w_t = 1 − 2π_t + Σπ² of the rollout policy
        advantage_fields=("rewards", "group_index", "old_logp", "sum_p2"),
        rollout_stats=("old_logp", "sum_p2"),
        shapers=("optimal_token_baseline",),
        replaces_advantages=True,
    ),
    # the policy losses verl 0.9.1 and TRL 1.16 ship (methods/loss_modes.py): logp, old_logp, A only
    "geo_mean": dict(aggregation="seq-mean-token-mean"),  # a sequence loss: the response mean
    "dppo_tv": {},  # trust region on π − π_old, truncated r
    "dppo_kl": {},  # trust region on the binary KL of π_old, π
    "gpg": {},  # −A·log π
    "dro": {},  # −A·log π + ½β(log r)²
    "vespo": {},  # gamma weight of the response's Σ log r
    "luspo": dict(aggregation="seq-mean-token-mean"),  # |y_i|·GSPO, the response mean
    "off_policy_mask": {},  # the response's mean old_logp − logp, per call
    # the field's exploration and entropy methods (methods/group_baselines.py, topr.py, imitation.py, clipb.py)
    **{
        n: dict(advantage_fields=("rewards", "group_index"), shapers=(n,), replaces_advantages=True)
        for n in ("maxrl", "asymre")
    },
    "topr": {},  # −sg(α)·A·log π, α from r (logp, old_logp) and the sign of A
    "positive_nll": dict(loss_fields=("rewards",)),  # NLL on the responses with R > 0
    "chord": dict(loss_fields=("expert_mask",), reads_step=True, drops_tokens=("chord",)),  # μ(step), expert rows
    "stare": dict(reads_entropy=True, statistics_fields=("logp", "old_entropy")),  # L± by −log π, gate on H̄
    # the rollout–training mismatch corrections (methods/corrections.py): the engine's log-probs
    **{
        n: dict(loss_fields=("rollout_logp",), statistics_fields=("old_logp", "rollout_logp"))  # batch_normalize
        for n in ("tis", "icepop")
    },
    **{n: dict(loss_fields=("rollout_logp",), drops_tokens=(n,)) for n in ("rs_token", "rs_seq_sum", "rs_seq_mean")},
    "rs_seq_max": dict(loss_fields=("rollout_logp",), drops_tokens=("rs_seq_max",)),
    "kpop": dict(loss_fields=("rollout_logp",)),  # Bernoulli KL of π_old and π_rollout, weight ρ
    "m2po": dict(loss_fields=("rollout_logp",), statistics_fields=("logp", "rollout_logp")),  # (log r)² selection
    "ipo": dict(loss_fields=("rollout_logp",)),  # |Δp| mask and r against π_rollout
    "clipb": dict(  # GRPO advantages; drops negative tokens by the rollout's p(H + log p)
        reads_entropy=True,
        advantage_fields=("rewards", "group_index"),  # H is read by its statistics, not its shaping
        statistics_fields=("old_logp", "old_entropy"),
        shapers=("clipb",),
        replaces_advantages=True,
        drops_tokens=("clipb",),
    ),
}


def build(name: str, **params) -> ef.Method:
    return ef.get_method(name, **{**REQUIRED.get(name, {}), **params})


def test_the_table_covers_every_registered_method():
    assert sorted(EXPECTED) == ef.list_methods()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_needs_of_every_registered_method(name):
    assert needs_of(build(name)) == MethodNeeds(method=name, **EXPECTED[name])


@pytest.mark.parametrize(
    ("name", "params", "changed"),
    [
        ("steer", {"estimator": "tabular"}, dict(tabular=True)),
        ("opefo", {"estimator": "tabular"}, dict(tabular=True)),
        ("pos_adv_reweight", {"schedule": "constant"}, dict(controllers=())),  # λ fixed: update does nothing
        ("pos_adv_reweight", {"schedule": "stage"}, dict(controllers=(), reads_step=True)),
        ("position_shaping", {"start": 3}, dict(reads_step=True)),
        ("siren", {"top_p": 1.0}, dict(entropy_top_p=None)),  # the nucleus is the vocabulary: the full entropy
        ("siren", {"top_p": 0.3}, dict(entropy_top_p=0.3)),
        ("pkpo", {"k_end": 1}, dict(reads_step=True)),  # k annealed over training
        ("entropy_bonus", {"schedule": "cosine", "c_end": 0.0, "steps": 5}, dict(reads_step=True)),  # c(t)
        ("simko", {"top_k": 5}, dict(topk=5)),
    ],
)
def test_parameters_that_change_the_needs(name, params, changed):
    expected = dataclasses.replace(MethodNeeds(method=name, **EXPECTED[name]), **changed)
    assert needs_of(build(name, **params)) == expected


def test_a_composition_needs_the_union_of_its_parts():
    m = ef.get_method("unlikeliness+entropy_advantage+steer+adaptive_entropy+clip_cov+kl_ref")
    assert needs_of(m) == MethodNeeds(
        method=m.name,
        entropy_grad=True,
        reads_entropy=True,
        loss_fields=("entropy", "ref_logp"),
        advantage_fields=("rewards", "group_index", "old_logp", "old_entropy"),
        statistics_fields=("logp", "old_logp", "old_entropy"),
        rollout_stats=("old_logp", "old_entropy"),
        shapers=("unlikeliness", "entropy_advantage"),
        replaces_advantages=True,
        controllers=("adaptive_entropy",),
        stateful=("adaptive_entropy", "clip_cov"),
        stochastic=("clip_cov",),
    )


@pytest.mark.parametrize(
    ("method", "estimators", "entropy", "stats"),
    [
        (None, (), True, ("logp", "entropy")),
        ("grpo", (), False, ("logp",)),
        ("steer", (), False, ("logp",)),  # reads H detached: the rollout's old_entropy serves
        ("entropy_bonus", (), False, ("logp", "entropy")),  # differentiates H
        ("grpo", ("steer", "opefo"), True, ("logp", "entropy")),
        ("grpo", ESTIMATORS, False, ("logp", "entropy", "sum_p2", "sum_p2_logp")),  # the audit
        (ef.get_method("steer", estimator="tabular"), (), False, ("logp", "entropy", "sum_p2", "sum_p2_logp")),
        ("optimal_token_baseline", (), False, ("logp", "sum_p2")),  # Σπ² of the rollout, not Σπ² log π
    ],
)
def test_token_stats(method, estimators, entropy, stats):
    assert needs_of(method, estimators).token_stats(entropy=entropy) == stats
    assert required_token_stats(method, estimators, entropy=entropy) == stats  # the trainer's call


def test_unknown_names_raise():
    with pytest.raises(UnknownMethodError, match="tabularr"):
        needs_of("grpo", ["tabularr"])
    with pytest.raises(UnknownMethodError, match="no_such"):
        needs_of("no_such")


# --------------------------------------------------------------------------------------------
# The declarations are true: undeclared fields do not reach the statistics / the shaping
# --------------------------------------------------------------------------------------------

PER_TOKEN = ("logp", "old_logp", "entropy", "old_entropy", "rollout_logp")
# parameters under which each statistic depends on its inputs on a small batch (defaults select
# max(⌊2e-4·N⌋, 1) = 1 token, which a perturbation rarely moves)
SENSITIVE = {
    "clip_cov": {"ratio": 0.3, "cov_low": 0.0},
    "kl_cov": {"ratio": 0.3},
    "forking_tokens": {"rho": 0.5},
    "steer": {"mapping": "binary"},
    "quadrant": {"preset": "uplift"},
    "rand_pos_clip": {"ratio": 0.3},
    "tis": {"batch_normalize": True},  # its only statistic: the batch mean of the weights
    "icepop": {"batch_normalize": True, "upper": 1.5},
}


def _perturbed(batch: ef.TokenBatch, fields, gen) -> ef.TokenBatch:
    new = {}
    for f in fields:
        x = getattr(batch, f)
        if f == "rewards":
            new[f] = 1.0 - x
        elif f == "group_index":
            new[f] = torch.arange(x.numel()) // 2  # pairs (grpo_passk needs ≥ 2 per group)
        else:
            new[f] = (x.detach() - 0.5 * torch.rand(x.shape, generator=gen, dtype=x.dtype)).clamp(max=-1e-3)
            if "entropy" in f:
                new[f] = -new[f]
    return dataclasses.replace(batch, **new)


def _statistics(name: str, batch: ef.TokenBatch) -> dict[str, torch.Tensor]:
    method = build(name, **SENSITIVE.get(name, {}))  # fresh: the same random draws every call
    return ef.prepare_statistics([batch], method, ef.LossSpec(0.2, 0.28))[0].methods.get(name, {})


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


STAT_METHODS = [n for n in sorted(EXPECTED) if method_class(n).batch_statistics is not ef.Method.batch_statistics]


@pytest.mark.parametrize("name", STAT_METHODS)
def test_batch_statistics_read_only_the_declared_fields(name, gen):
    batch = make_batch(gen, n=8, t=12, expert_mask=torch.arange(8) % 4 == 0)  # chord's expert rows
    batch = dataclasses.replace(batch, rollout_logp=(batch.old_logp + 0.3 * torch.randn(8, 12, generator=gen, dtype=D)))
    declared = needs_of(build(name)).statistics_fields
    base = _statistics(name, batch)
    assert base, "the method computes statistics"
    for f in PER_TOKEN:
        if f not in declared:
            assert _same(_statistics(name, _perturbed(batch, [f], gen)), base), f"{name} reads {f}"
    if declared:  # the check can fail: changing the declared fields changes the statistics
        assert not _same(_statistics(name, _perturbed(batch, declared, gen)), base)


# aer's shaping leaves A unchanged and records each group's accuracy for its loss term:
# tests/methods/test_exploration.py checks what it reads
SHAPERS = [n for n in sorted(EXPECTED) if EXPECTED[n].get("shapers") and n != "aer"]
SHAPER_PARAMS = {"passk_training": {"k": 2}, "pkpo": {"k": 2}}  # the perturbed groups are pairs


@pytest.mark.parametrize("name", SHAPERS)
def test_advantage_shapers_read_only_the_declared_fields(name, gen):
    batch = make_batch(gen, n=8, t=12, group=4)
    extra = {"sum_p2": batch.old_logp.exp() ** 2 + 0.1, "reward_baselines": torch.rand(8, generator=gen, dtype=D)}
    extra["rollout_logp"] = batch.old_logp - 0.1  # no shaper reads the engine's log-probs
    batch = dataclasses.replace(batch, **extra)
    params = SHAPER_PARAMS.get(name, {})
    declared = needs_of(build(name, **params)).advantage_fields
    adv = batch.token_advantages().detach()
    base = build(name, **params).shape_advantages(adv, batch)
    for f in (*PER_TOKEN, "sum_p2", "rewards", "group_index", "reward_baselines"):
        if f not in declared:
            assert torch.equal(build(name, **params).shape_advantages(adv, _perturbed(batch, [f], gen)), base), f
    if declared:
        assert not torch.equal(build(name, **params).shape_advantages(adv, _perturbed(batch, declared, gen)), base)


# --------------------------------------------------------------------------------------------
# A new method: its declarations are in its needs (the adapters: tests/integrations)
# --------------------------------------------------------------------------------------------


def test_a_new_shaper_declaring_old_entropy_needs_rollout_stats(gen):
    with registered(RolloutEntropyShaper):
        needs = needs_of("test_rollout_entropy_shaper")
        assert needs.rollout_stats == ("old_entropy",) and needs.rollout_entropy
        assert needs_of("clip_higher+test_rollout_entropy_shaper").rollout_stats == ("old_entropy",)
        method = ef.get_method("test_rollout_entropy_shaper")
        # the lab path: compute_advantages with the rollout entropy, and without it a typed error
        batch = make_batch(gen)
        adv = ef.compute_advantages(batch, method)
        grpo = ef.compute_advantages(batch, "grpo")
        assert torch.allclose(adv, grpo + 0.1 * batch.old_entropy * batch.mask, atol=1e-12)
        with pytest.raises(MissingInputError, match="old_entropy"):
            ef.compute_advantages(dataclasses.replace(batch, old_entropy=None), method)
    assert "test_rollout_entropy_shaper" not in ef.list_methods()  # unregistered after


def test_a_strict_on_policy_method_says_so():
    with registered(StrictOnPolicyMethod):
        assert needs_of("test_strict_on_policy").strict_on_policy
        assert needs_of("steer+test_strict_on_policy").strict_on_policy
    assert not any(needs_of(build(n)).strict_on_policy for n in EXPECTED)
