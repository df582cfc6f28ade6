"""The fast path makes no device-to-host synchronisation.

A ``TorchFunctionMode`` sees every torch call. It counts the calls that force a GPU to wait for
the host: reading a value (``item``, ``__bool__``, ``__float__``, ``__int__``, ``__index__``,
``tolist``, ``numpy``, ``cpu``) and ops whose output shape depends on the data (``nonzero``,
``unique``, ``masked_select``, boolean-mask indexing, ``repeat_interleave`` without
``output_size``) — and indexing with a 0-d tensor, which ATen turns into ``item()`` in C++ where
the mode cannot see it. With ``TokenBatch(validate=False)`` and ``metrics="tensor"`` or ``"none"``,
``compute_advantages`` and ``policy_loss`` — per call and with ``prepare_statistics`` — make none
of them, for every registered method. There are no exceptions: every data-dependent count
(Clip-Cov's n, KL-Cov's k, quantile positions, groups) is computed with sorting and fixed-size
buffers on the device.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.overrides import TorchFunctionMode

import entflow as ef
from support.method_defaults import BUILD
from support.methods_ref import make_batch, rows

SYNCS = {"item", "__bool__", "__float__", "__int__", "__index__", "tolist", "numpy", "cpu"}
DATA_DEPENDENT = {"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select", "nonzero_static"}

VARIANTS = [(name, BUILD.get(name, {})) for name in ef.list_methods()] + [
    ("steer", {"scope": "group", "mapping": "binary"}),
    ("steer", {"scope": "sequence", "mapping": "linear", "estimator": "tabular"}),
    ("steer", {"scope": "group"}),
    ("opefo", {"variant": "static"}),
    ("pos_adv_reweight", {"schedule": "stage"}),
    ("pos_adv_reweight", {"schedule": "epoch", "epochs": 3}),
    ("position_shaping", {"start": 1, "duration": 5}),
    ("clip_higher+steer+clip_cov", {"clip_cov.ratio": 0.05, "cov_low": -1.0, "cov_high": 1.0}),
    ("clip_cov", {"ratio": 0.05, "cov_low": -1.0, "cov_high": 1.0}),
    ("kl_cov", {"ratio": 0.05}),
    ("maxrl", {"epsilon": 0.0}),
    ("topr", {"importance_sampling_level": "sequence"}),
    ("chord", {"enable_phi_function": False, "mu_warmup_steps": 5, "mu_decay_steps": 10}),
    ("clipb+chord+positive_nll", {"mu": 0.5}),
    ("stare", {"variant": "C2", "target_entropy": 10.0}),
    ("stare", {"adaptive": True, "target_entropy": 10.0}),  # two token masks, a loss term counted over the kept tokens
    ("tis", {"level": "sequence", "batch_normalize": True}),
    ("icepop", {"batch_normalize": True}),
    ("rs_token+rs_seq_mean+tis", {"rs_token.statistic": "k3", "rs_token.threshold": 0.1}),
    ("rs_seq_sum", {"statistic": "k2", "threshold": 0.5}),
    ("m2po", {"threshold": 0.0}),  # drops every PPO-active token
]


class SyncCounter(TorchFunctionMode):
    """Counts host syncs and data-dependent shapes among the torch calls made inside it."""

    def __init__(self):
        super().__init__()
        self.hits: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in SYNCS or name in DATA_DEPENDENT:
            self.hits.append(name)
        elif name == "repeat_interleave" and "output_size" not in kwargs:
            self.hits.append(name)
        elif name in ("__getitem__", "__setitem__", "index_put_", "index_put"):
            idx = args[1] if len(args) > 1 else None
            parts = idx if isinstance(idx, tuple | list) else (idx,)
            if any(isinstance(p, torch.Tensor) and p.dtype == torch.bool for p in parts):
                self.hits.append(f"{name}[bool mask]")
            elif any(isinstance(p, torch.Tensor) and p.dim() == 0 for p in parts):
                self.hits.append(f"{name}[0-d tensor]")  # ATen reads a 0-d index with item()
        return func(*args, **kwargs)


def test_the_counter_sees_each_kind_of_sync():
    x = torch.randn(6)
    with SyncCounter() as c:
        float(x.sum())
        bool(x.sum() > 0)
        x.sum().item()
        x.tolist()
        x[x > 0]
        x.nonzero()
        torch.unique(x)
        x.repeat_interleave(torch.tensor([1] * 6))
        x[torch.tensor(2)]
    assert c.hits == [
        "__float__",
        "__bool__",
        "item",
        "tolist",
        "__getitem__[bool mask]",
        "nonzero",
        "unique",
        "repeat_interleave",
        "__getitem__[0-d tensor]",
    ]


def fast_batch(gen: torch.Generator) -> ef.TokenBatch:
    b = make_batch(gen, n=8, t=7, group=4, off_policy=0.4)
    f = {k: getattr(b, k) for k in ("logp", "old_logp", "advantages", "mask", "entropy", "old_entropy", "ref_logp")}
    f["mask"][3, 2:] = 0
    f["mask"][5] = 0  # an empty response
    f["rollout_logp"] = f["old_logp"] + 0.5 * torch.randn(8, 7, generator=gen, dtype=torch.float64)  # the engine's
    p = f["old_logp"].exp()
    return ef.TokenBatch(
        **f,
        sum_p2=p**2 + 0.05,
        sum_p2_logp=-(p**2) * 0.5,
        rewards=b.rewards,
        group_index=b.group_index * 7 + 3,
        reward_baselines=b.rewards.flip(0),  # remax's greedy rewards
        topk_logp=-torch.rand(8, 7, 3, generator=gen, dtype=torch.float64).cumsum(-1),  # simko's candidates
        expert_mask=torch.arange(8) % 4 == 3,  # chord's expert rows
        step=2,
        total_steps=10,
        validate=False,
    )


def test_validation_is_what_syncs_and_validate_false_skips_it(gen):
    b = fast_batch(gen)
    fields = {k: getattr(b, k) for k in ("logp", "old_logp", "advantages", "mask", "entropy", "old_entropy")}
    with SyncCounter() as c:
        ef.TokenBatch(**fields)
    assert len(c.hits) >= 6  # finiteness per field, the mask's values
    with SyncCounter() as c:
        ef.TokenBatch(**fields, validate=False)
    assert c.hits == []
    with SyncCounter() as c:  # the default metrics: one read at the end, not one per metric
        ef.policy_loss(ef.TokenBatch(**fields, validate=False), ef.get_method("steer"))
    assert c.hits == ["cpu", "tolist"]


IDS = [n + "".join(f"-{v}" for v in p.values()) for n, p in VARIANTS]


@pytest.mark.parametrize(("name", "params"), VARIANTS, ids=IDS)
def test_fast_path_makes_no_host_sync(gen, name, params):
    b = fast_batch(gen)
    method = ef.get_method(name, **params)
    with SyncCounter() as c:
        adv = ef.compute_advantages(b, method)
        batch = dataclasses.replace(b, advantages=adv, reward_baselines=None)  # the update's batch
        out = ef.policy_loss(batch, method, metrics="tensor")
        out.loss.backward()
        ef.policy_loss(batch, method, metrics="none")
        halves = [
            rows(batch, s, logp=batch.logp.detach()[s], entropy=batch.entropy.detach()[s])
            for s in (slice(0, 3), slice(3, 8))
        ]
        stats = ef.prepare_statistics(halves, method)
        for h, s in zip(halves, stats, strict=True):
            ef.policy_loss(h, method, metrics="tensor", stats=s)
    assert c.hits == [], f"{name}: host syncs {c.hits}"
    assert all(isinstance(v, torch.Tensor | float) for v in out.metrics.values())
    # and the tensors read once give the same numbers as the float path
    floats = ef.read_metrics(out.metrics)
    assert set(floats) == set(out.metrics) and all(isinstance(v, float) for v in floats.values())


def test_read_metrics_averages_micro_batches_with_one_host_copy():
    a = {"x": torch.tensor(1.0), "n": torch.tensor(4, dtype=torch.float64), "c": 0.5}
    b = {"x": torch.tensor(3.0), "n": torch.tensor(2, dtype=torch.float64), "only_b": torch.tensor(7.0)}
    with SyncCounter() as c:
        out = ef.read_metrics([a, b])
    assert c.hits == ["cpu", "tolist"]
    assert out == {"x": 2.0, "n": 3.0, "c": 0.5, "only_b": 7.0}
    assert ef.average_metrics(a) == {"x": 1.0, "n": 4.0, "c": 0.5}  # no process group: this process's values
