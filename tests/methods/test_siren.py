"""siren (arXiv 2509.25133, ``methods/siren.py``) against float64 references written here with
explicit loops, independently of the method code: the top-p entropy and its gradient, the selective
entropy term's loss and gradient on batches with padding (holding inf values), all-equal entropies,
a single token and an empty response, and the self-anchor through a state_dict round trip.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

import entflow as ef
from entflow.cli.main import main
from entflow.errors import MissingInputError, ParameterError
from entflow.methods.siren import topp_entropy
from support.methods_ref import D, mask_of

TOL = 1e-12


# ------------------------------------------------------------------------------------------
# topp_entropy
# ------------------------------------------------------------------------------------------


def ref_topp(z: list[float], top_p: float) -> tuple[float, list[float]]:
    """Nucleus entropy and its gradient d H / d z by hand: S = most probable tokens while the
    mass before them is < top_p; q = π restricted to S, renormalised; dH/dz_b = −q_b(log q_b + H)
    on S (softmax entropy over S), 0 elsewhere."""
    m = max(z)
    e = [math.exp(v - m) for v in z]
    p = [v / sum(e) for v in e]
    order = sorted(range(len(z)), key=lambda b: -p[b])
    S, mass = [], 0.0
    for b in order:
        if mass < top_p or not S:
            S.append(b)
        mass += p[b]
    tot = sum(p[b] for b in S)
    q = {b: p[b] / tot for b in S}
    H = -sum(v * math.log(v) for v in q.values())
    grad = [(-q[b] * (math.log(q[b]) + H) if b in q else 0.0) for b in range(len(z))]
    return H, grad


def test_topp_entropy_hand_case():
    z = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=D))
    # top_p 0.7: mass before the 2nd token 0.5 < 0.7 (in), before the 3rd 0.8 (out) → q = (5/8, 3/8)
    assert float(topp_entropy(z, 0.7)) == pytest.approx(-(0.625 * math.log(0.625) + 0.375 * math.log(0.375)), abs=TOL)
    assert float(topp_entropy(z, 0.4)) == 0.0  # the top token alone already exceeds 0.4
    assert float(topp_entropy(z, 1.0)) == pytest.approx(-sum(v * math.log(v) for v in (0.5, 0.3, 0.15, 0.05)), abs=TOL)


def test_topp_entropy_and_gradient_match_reference(gen):
    z = torch.randn(3, 4, 9, generator=gen, dtype=D) * 2
    for top_p in (0.3, 0.8, 0.95, 1.0):
        x = z.clone().requires_grad_(True)
        H = topp_entropy(x, top_p)
        Hd = H.detach()
        H.sum().backward()
        for idx in [(i, j) for i in range(3) for j in range(4)]:
            h, g = ref_topp(z[idx].tolist(), top_p)
            assert float(Hd[idx].detach()) == pytest.approx(h, abs=TOL)
            assert torch.allclose(x.grad[idx], torch.tensor(g, dtype=D), atol=TOL, rtol=0)
    full = ef.entropy_from_logits(z)
    assert torch.allclose(topp_entropy(z, 1.0), full, atol=TOL, rtol=0)
    # temperature divides the logits first; half precision is computed in float32
    assert torch.allclose(topp_entropy(z, 0.8, temperature=0.7), topp_entropy(z / 0.7, 0.8), atol=TOL, rtol=0)
    assert topp_entropy(z.to(torch.bfloat16), 0.8).dtype == torch.float32


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, float("nan"), True])
def test_topp_entropy_rejects_bad_top_p(bad):
    with pytest.raises(ParameterError, match="top_p"):
        topp_entropy(torch.zeros(2, 3), bad)


# ------------------------------------------------------------------------------------------
# siren
# ------------------------------------------------------------------------------------------

T = 6
SIREN_LENGTHS = [6, 4, 3, 1, 0]  # row 2: all-equal entropies, row 3: one token, row 4: empty


def siren_entropy(gen: torch.Generator) -> torch.Tensor:
    H = torch.rand(5, T, generator=gen, dtype=D) * 2
    H[2, :3] = 0.7  # ties: nothing exceeds its own quantile
    H[:, 5][1:] = math.inf  # padding garbage (rows 1-4 have no token 5)
    H[4] = math.inf
    return H


def ref_siren(H: torch.Tensor, lengths: list[int], q: float, c: float, a: float, agg: str):
    """(loss, dloss/dH) by hand: per-response linear-interpolation quantile, strict >."""
    grad = torch.zeros_like(H)
    rows = []
    for i, n in enumerate(lengths):
        vals = sorted(H[i, :n].tolist())
        if not vals:
            continue
        pos = q * (n - 1)
        lo, hi = math.floor(pos), math.ceil(pos)
        thr = vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)
        sel = [t for t in range(n) if float(H[i, t]) > thr]
        if sel:
            rows.append((i, sel))
    if not rows:
        return 0.0, grad
    if agg == "seq-mean-token-mean":
        Hbar = sum(sum(float(H[i, t]) for t in s) / len(s) for i, s in rows) / len(rows)
        d = {(i, t): 1 / (len(rows) * len(s)) for i, s in rows for t in s}
    else:
        k = sum(len(s) for _, s in rows)
        Hbar = sum(float(H[i, t]) for i, s in rows for t in s) / k
        d = {(i, t): 1 / k for i, s in rows for t in s}
    for (i, t), v in d.items():
        grad[i, t] = 2 * c * (Hbar - a) * v
    return c * (Hbar - a) ** 2, grad


def siren_batch(gen: torch.Generator, H: torch.Tensor) -> ef.TokenBatch:
    m = mask_of(SIREN_LENGTHS, T)
    logp = (-torch.rand(5, T, generator=gen, dtype=D) * 2).requires_grad_(True)
    return ef.TokenBatch(logp, logp.detach() + 0.1, torch.tensor([1.0, -1.0, 0.5, 0.0, 1.0], dtype=D), m,
                         entropy=H.clone().requires_grad_(True))  # fmt: skip


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
@pytest.mark.parametrize("q", [0.8, 0.5, 0.0])
def test_siren_loss_and_gradient_match_reference(gen, agg, q):
    H = siren_entropy(gen)
    b = siren_batch(gen, H)
    m = ef.get_method("siren", c=0.3, quantile=q, anchor=0.25, agg=agg)
    out = ef.policy_loss(b, m)
    out.loss.backward()
    loss, grad = ref_siren(H, SIREN_LENGTHS, q, 0.3, 0.25, agg)
    assert loss > 0  # the case selects something
    assert out.metrics["siren/loss"] == pytest.approx(loss, abs=TOL)
    assert out.metrics["loss"] == pytest.approx(out.metrics["pg_loss"] + loss, abs=TOL)
    assert torch.allclose(b.entropy.grad, grad, atol=TOL, rtol=0)
    # the policy-gradient part is untouched: same logp gradient as grpo
    logp2 = b.logp.detach().clone().requires_grad_(True)
    ef.policy_loss(ef.TokenBatch(logp2, b.old_logp, b.advantages, b.mask), "grpo").loss.backward()
    assert torch.equal(b.logp.grad, logp2.grad)


def test_siren_nothing_selected_gives_zero_term(gen):
    H = torch.full((2, 3), 0.5, dtype=D)  # every response all-equal: nothing above its quantile
    logp = torch.full((2, 3), -1.0, dtype=D, requires_grad=True)
    b = ef.TokenBatch(logp, logp.detach(), torch.ones(2, dtype=D), torch.ones(2, 3, dtype=D),
                      entropy=H.clone().requires_grad_(True))  # fmt: skip
    out = ef.policy_loss(b, ef.get_method("siren", anchor=0.1))
    out.loss.backward()
    assert out.metrics["siren/loss"] == 0.0 and out.metrics["siren/selected_frac"] == 0.0
    assert float(b.entropy.grad.abs().max()) == 0.0


def test_siren_self_anchor_and_resume(gen):
    H0 = siren_entropy(gen)
    m = ef.get_method("siren", c=0.5)
    assert m.anchor_value is None
    b0 = siren_batch(gen, H0)
    out = ef.policy_loss(b0, m)  # first call: the anchor is this H̄ → term and gradient 0
    out.loss.backward()
    assert float(b0.entropy.grad.abs().max()) == 0.0
    a_ref = ref_siren(H0, SIREN_LENGTHS, 0.8, 1.0, 0.0, "seq-mean-token-mean")[0] ** 0.5  # H̄ (c = 1, a = 0)
    assert float(m.anchor_value) == pytest.approx(a_ref, abs=TOL)
    assert out.metrics["siren/loss"] == 0.0 and out.metrics["siren/anchor"] == pytest.approx(a_ref, abs=TOL)
    saved = copy.deepcopy(m.state_dict())
    H1 = H0.clone()
    H1[0, :6] += 0.2
    H1[1, :4] -= 0.1
    b1 = siren_batch(gen, H1)
    out1 = ef.policy_loss(b1, m)
    out1.loss.backward()
    loss1, grad1 = ref_siren(H1, SIREN_LENGTHS, 0.8, 0.5, a_ref, "seq-mean-token-mean")
    assert loss1 > 0 and out1.metrics["siren/loss"] == pytest.approx(loss1, abs=TOL)
    assert torch.allclose(b1.entropy.grad, grad1, atol=TOL, rtol=0)
    # resume: a new method loaded with the state continues with the same anchor; a fresh one re-anchors
    resumed, fresh = ef.get_method("siren", c=0.5), ef.get_method("siren", c=0.5)
    resumed.load_state_dict(saved)
    assert ef.policy_loss(siren_batch(gen, H1), resumed).metrics["siren/loss"] == pytest.approx(loss1, abs=TOL)
    assert ef.policy_loss(siren_batch(gen, H1), fresh).metrics["siren/loss"] == 0.0
    with pytest.raises(ParameterError, match="anchor_value"):
        fresh.load_state_dict({})


# ------------------------------------------------------------------------------------------
# parameters, missing inputs, CLI
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("c", -0.1),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("quantile", 1.0),
        ("anchor", -1.0),
        ("agg", "sum"),
    ],
)
def test_bad_parameters_raise_parameter_error(param, value):
    with pytest.raises(ParameterError) as e:
        ef.get_method("siren", **{param: value})
    assert e.value.param == param and f"'{param}'" in str(e.value)


def test_missing_entropy_is_named(gen):
    H = siren_entropy(gen)
    b = siren_batch(gen, H)
    bare = ef.TokenBatch(b.logp, b.old_logp, b.advantages, b.mask)
    with pytest.raises(MissingInputError, match="entropy"):
        ef.policy_loss(bare, ef.get_method("siren"))


def test_cli_lists_it_and_shows_its_paper(capsys):
    assert main(["methods"]) == 0
    assert " siren " in capsys.readouterr().out
    assert main(["methods", "siren"]) == 0
    assert "arXiv 2509.25133" in capsys.readouterr().out
