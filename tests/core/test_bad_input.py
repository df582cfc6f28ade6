"""Bad input (docs/design.md §13): typed errors that name the field, and defined answers for degenerate input."""

from __future__ import annotations

import math

import pytest
import torch

import entflow as ef
from entflow.errors import MissingInputError, NonFiniteError, ParameterError, ShapeError, UnknownMethodError
from support.core_ref import make_batch_tensors

N, T = 6, 7


def _fields(gen):
    logp, old_logp, adv, mask, entropy, old_entropy = make_batch_tensors(gen, n=N, t=T)
    return {
        "logp": logp,
        "old_logp": old_logp,
        "advantages": adv,
        "mask": mask,
        "entropy": entropy,
        "old_entropy": old_entropy,
        "ref_logp": logp - 0.1,
        "sum_p2": torch.full((N, T), 0.3, dtype=torch.float64),
        "sum_p2_logp": torch.full((N, T), -0.4, dtype=torch.float64),
        "rewards": torch.rand(N, generator=gen, dtype=torch.float64),
        "group_index": torch.tensor([0, 0, 0, 1, 1, 1]),
    }


@pytest.mark.parametrize(
    ("field", "bad_shape"),
    [
        ("old_logp", (N, T + 1)),
        ("mask", (N, T - 1)),
        ("advantages", (N + 1,)),
        ("advantages", (N, T, 1)),
        ("entropy", (N - 1, T)),
        ("old_entropy", (T, N)),
        ("ref_logp", (N,)),
        ("sum_p2", (N, T, 2)),
        ("sum_p2_logp", (1, T)),
        ("rewards", (N, 1)),
        ("group_index", (N + 2,)),
    ],
)
def test_mismatched_shapes(gen, field, bad_shape):
    f = _fields(gen)
    f[field] = torch.zeros(bad_shape, dtype=torch.long if field == "group_index" else torch.float64)
    with pytest.raises(ShapeError) as e:
        ef.TokenBatch(**f)
    assert e.value.field == field
    assert str(e.value).startswith(field) and str(tuple(bad_shape)) in str(e.value)


def test_logp_must_be_2d(gen):
    f = _fields(gen)
    f["logp"] = f["logp"].reshape(-1)
    with pytest.raises(ShapeError, match="logp"):
        ef.TokenBatch(**f)


def test_token_stats_shape_errors(gen):
    logits = torch.randn(2, 3, 11, generator=gen)
    with pytest.raises(ShapeError, match="token_ids"):
        ef.token_stats(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ShapeError, match="token_ids"):
        ef.token_stats(logits, torch.full((2, 3), 11))  # id out of the vocabulary
    with pytest.raises(ShapeError, match="token_ids"):
        ef.token_stats(logits, torch.full((2, 3), -1))


# −inf logits are allowed where the softmax is defined: tests/core/test_token_stats.py
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("where", [0, 17, -1])  # first, middle, last element
def test_nonfinite_logits(gen, bad, where):
    logits = torch.randn(2, 3, 11, generator=gen)
    logits.view(-1)[where] = bad
    ids = torch.zeros(2, 3, dtype=torch.long)
    for chunk in (None, 2):
        with pytest.raises(NonFiniteError) as e:
            ef.token_stats(logits, ids, chunk_size=chunk)
        assert e.value.field == "logits" and "logits" in str(e.value)
    with pytest.raises(NonFiniteError, match="logits"):
        ef.entropy_from_logits(logits.bfloat16())


@pytest.mark.parametrize("field", ["logp", "old_logp", "advantages", "old_entropy", "sum_p2"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_token_fields_on_mask(gen, field, bad):
    f = _fields(gen)
    f[field] = f[field].clone()
    f[field].view(-1)[0] = bad  # position (0, 0) is always valid
    with pytest.raises(NonFiniteError) as e:
        ef.TokenBatch(**f)
    assert e.value.field == field and field in str(e.value)


def test_nonfinite_advantages_per_token(gen):
    f = _fields(gen)
    adv = f["advantages"].unsqueeze(-1).expand(N, T).clone()
    adv[1, 0] = float("nan")
    f["advantages"] = adv
    with pytest.raises(NonFiniteError, match="advantages"):
        ef.TokenBatch(**f)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nonfinite_rewards(gen, bad):
    f = _fields(gen)
    f["rewards"] = f["rewards"].clone()
    f["rewards"][2] = bad
    with pytest.raises(NonFiniteError, match="rewards"):
        ef.TokenBatch(**f)
    with pytest.raises(NonFiniteError, match="rewards"):
        ef.group_advantages(f["rewards"], f["group_index"])


def test_group_advantages_shape_errors():
    with pytest.raises(ShapeError, match="rewards"):
        ef.group_advantages(torch.zeros(3, 2), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ShapeError, match="group_index"):
        ef.group_advantages(torch.zeros(4), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ParameterError, match="scale"):
        ef.group_advantages(torch.zeros(4), torch.zeros(4, dtype=torch.long), scale="prompt")
    with pytest.raises(ParameterError, match="eps"):
        ef.group_advantages(torch.zeros(4), torch.zeros(4, dtype=torch.long), eps=-1.0)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("method", [None, "clip_higher"])
def test_empty_mask_gives_zero_loss_with_grad(gen, agg, method):
    f = _fields(gen)
    f["mask"] = torch.zeros(N, T)
    logp = f["logp"].clone()
    logp[0, 0] = -float("inf")  # padding may hold anything; it must not turn the 0 into NaN
    f["logp"] = logp.requires_grad_(True)
    out = ef.policy_loss(ef.TokenBatch(**f), method=method, spec=ef.LossSpec(agg=agg))
    assert out.loss.item() == 0.0 and out.loss.requires_grad
    out.loss.backward()
    assert f["logp"].grad is not None and bool((f["logp"].grad == 0).all())
    assert out.metrics["empty_batch"] == 1.0
    assert bool((out.token_weights == 0).all())
    assert all(math.isfinite(v) for v in out.metrics.values())


def test_empty_mask_estimators_are_zero(gen):
    f = _fields(gen)
    f["mask"] = torch.zeros(N, T)
    batch = ef.TokenBatch(**f)
    for name in ef.ESTIMATORS:
        est = ef.entropy_change(name, batch)
        assert bool((est == 0).all()) and bool(torch.isfinite(est).all()), name


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan")])
def test_bad_temperature(gen, temperature):
    with pytest.raises(ParameterError, match="temperature"):
        ef.token_stats(torch.randn(2, 5, generator=gen), torch.zeros(2, dtype=torch.long), temperature=temperature)


@pytest.mark.parametrize("chunk_size", [0, -3])
def test_bad_chunk_size(gen, chunk_size):
    with pytest.raises(ParameterError, match="chunk_size"):
        ef.token_stats(torch.randn(2, 5, generator=gen), torch.zeros(2, dtype=torch.long), chunk_size=chunk_size)
    with pytest.raises(ParameterError, match="chunk_size"):
        ef.entropy_from_logits(torch.randn(2, 5, generator=gen), chunk_size=chunk_size)


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"clip_low": -0.1}, "clip_low"),
        ({"clip_low": 1.5}, "clip_low"),
        ({"clip_low": float("nan")}, "clip_low"),
        ({"clip_high": -0.01}, "clip_high"),
        ({"clip_high": float("nan")}, "clip_high"),
        ({"dual_clip": 1.0}, "dual_clip"),
        ({"dual_clip": 0.5}, "dual_clip"),
        ({"agg": "mean"}, "agg"),
    ],
)
def test_bad_loss_parameters(gen, kw, name):
    batch = ef.TokenBatch(**{k: v for k, v in _fields(gen).items()})
    with pytest.raises(ParameterError) as e:
        ef.policy_loss(batch, spec=ef.LossSpec(**kw))
    assert e.value.param == name and name in str(e.value) and "LossSpec" in str(e.value)


@pytest.mark.parametrize(
    "kw, name",
    [({"clip_low": "0.2"}, "clip_low"), ({"clip_high": True}, "clip_high"), ({"max_len": 0}, "max_len")],
)
def test_loss_spec_names_the_field_and_the_value(kw, name):
    with pytest.raises(ParameterError) as e:
        ef.LossSpec(**kw)
    assert e.value.param == name and repr(next(iter(kw.values()))) in str(e.value)


def test_loose_clip_arguments_are_refused(gen):
    batch = ef.TokenBatch(**_fields(gen))
    with pytest.raises(ParameterError, match=r"spec.*LossSpec, got float 0\.2"):
        ef.policy_loss(batch, "grpo", 0.2)
    with pytest.raises(TypeError):
        ef.policy_loss(batch, clip_low=0.2)  # the loose keywords are gone


def test_token_weights_of_a_wrong_shape(gen):
    batch = ef.TokenBatch(**_fields(gen))
    with pytest.raises(ef.ShapeError, match="token_weights"):
        ef.policy_loss(batch, token_weights=torch.ones(N + 1, T))


def test_bad_agg_on_empty_batch(gen):
    f = _fields(gen)
    f["mask"] = torch.zeros(N, T)
    with pytest.raises(ParameterError, match="agg"):
        ef.policy_loss(ef.TokenBatch(**f), spec=ef.LossSpec(agg="sum"))


def test_tabular_without_sum_p2(gen):
    f = _fields(gen)
    f["sum_p2"] = None
    batch = ef.TokenBatch(**f)
    with pytest.raises(MissingInputError) as e:
        ef.entropy_change("tabular", batch)
    assert e.value.field == "sum_p2" and "sum_p2" in str(e.value)
    f = _fields(gen)
    f["sum_p2_logp"] = None
    with pytest.raises(MissingInputError, match="sum_p2_logp"):
        ef.entropy_change("tabular", ef.TokenBatch(**f))


def test_estimator_without_entropy(gen):
    f = _fields(gen)
    f["entropy"] = f["old_entropy"] = None
    batch = ef.TokenBatch(**f)
    with pytest.raises(MissingInputError, match="entropy"):
        ef.entropy_change("steer", batch)
    ef.entropy_change("cov", batch)  # cov needs no entropy


def test_unknown_estimator(gen):
    with pytest.raises(UnknownMethodError, match="stear"):
        ef.entropy_change("stear", ef.TokenBatch(**_fields(gen)))


def test_missing_advantages(gen):
    f = _fields(gen)
    f["advantages"] = None
    with pytest.raises(MissingInputError, match="advantages"):
        ef.policy_loss(ef.TokenBatch(**f))


def test_all_equal_rewards_give_zero_advantages_and_zero_gradient(gen):
    f = _fields(gen)
    f["rewards"] = torch.ones(N, dtype=torch.float64)
    f["logp"] = f["logp"].clone().requires_grad_(True)
    batch = ef.TokenBatch(**f)
    adv = ef.compute_advantages(batch)
    assert bool((adv == 0).all())
    f["advantages"] = adv
    out = ef.policy_loss(ef.TokenBatch(**f))
    (g,) = torch.autograd.grad(out.loss, f["logp"])
    assert out.loss.item() == 0.0 and bool((g == 0).all())
