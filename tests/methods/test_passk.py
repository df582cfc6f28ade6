"""Pass@k Training (arXiv 2508.10751) and PKPO (arXiv 2505.15201) against independent references.

The reference enumerates every k-subset of each group with itertools in float64 (the definitions:
a subset's reward is its maximum; Pass@k Training's advantage of a response is the mean over the
subsets containing it of (max − mean over subsets)/std over subsets, Bessel-corrected over the
C(n, k) subsets; PKPO's transformed reward is that mean maximum, normalised like GRPO). Numbers
worked by hand are checked too, and k = 1 against GRPO's own ``group_advantages``. Tolerance
1e-12 (float64, sums in different orders).

SimKO (arXiv 2510.14807 §4) against a float64 hand reference, and its token statistic.

The policy is a table of logits ``z`` ``[N, T, V]`` (a leaf); the loss is differentiated w.r.t.
``z`` and compared with the gradient written out by hand from ∇_z log π(b) = e_b − π:

- a positive-advantage response at a high-entropy token (w = 1), inside the clip:
  −A/Σm · r · [(1 − α)(e_y − π) + (α/K) Σ_{b∈top-K} (e_b − π)];
- a negative-advantage response at a high-entropy token whose sampled token is the top-1:
  −λA/Σm · r (e_y − π); elsewhere PPO-clip's −A/Σm · r (e_y − π) (0 where the clip cuts it).

High entropy means above the τ quantile of the response's valid-token entropies (checked against
``torch.quantile``). ``topk_logprobs`` is checked against an explicit sort of ``log_softmax``.
Tolerance 1e-12 (float64).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import entflow as ef
from entflow.core.topk import topk_logprobs
from entflow.errors import MissingInputError, ParameterError, ShapeError
from entflow.methods.needs import needs_of
from entflow.methods.passk import _response_quantile, subset_max

D = torch.float64
EPS = 1e-6


def batch(rewards, groups, t: int = 3) -> ef.TokenBatch:
    R = torch.as_tensor(rewards, dtype=D)
    n = R.numel()
    mask = torch.ones(n, t, dtype=D)
    mask[0, -1] = 0
    z = torch.zeros(n, t, dtype=D)
    return ef.TokenBatch(z.clone(), z, None, mask, rewards=R, group_index=torch.as_tensor(groups))


def adv(b: ef.TokenBatch, name: str, **params) -> torch.Tensor:
    """The sequence advantage of each response (its first token, valid in every test batch)."""
    return ef.compute_advantages(b, ef.get_method(name, **params))[:, 0]


def ref_group(g: list[float], k: int) -> tuple[list[float], float, float]:
    """(s_i = mean max over the k-subsets containing i, mean of max, sample std of max over subsets)."""
    subsets = list(itertools.combinations(range(len(g)), k))
    maxes = [max(g[j] for j in S) for S in subsets]
    mean = sum(maxes) / len(maxes)
    var = sum((x - mean) ** 2 for x in maxes) / (len(maxes) - 1) if len(maxes) > 1 else 0.0
    s = [
        sum(m for S, m in zip(subsets, maxes, strict=True) if i in S) / sum(i in S for S in subsets)
        for i in range(len(g))
    ]
    return s, mean, math.sqrt(var)


def ref_passk(R: list[float], groups: list[int], k: int) -> list[float]:
    out = [0.0] * len(R)
    for gid in set(groups):
        idx = [i for i, x in enumerate(groups) if x == gid]
        s, mean, std = ref_group([R[i] for i in idx], k)
        for j, i in enumerate(idx):
            out[i] = (s[j] - mean) / (std + EPS) if std > 0 else 0.0
    return out


def ref_pkpo(R: list[float], groups: list[int], k: int) -> list[float]:
    out = [0.0] * len(R)
    for gid in set(groups):
        idx = [i for i, x in enumerate(groups) if x == gid]
        s, _, _ = ref_group([R[i] for i in idx], k)
        m = sum(s) / len(s)
        sd = math.sqrt(sum((x - m) ** 2 for x in s) / (len(s) - 1)) if len(s) > 1 else 0.0
        for j, i in enumerate(idx):
            out[i] = (s[j] - m) / (sd + EPS) if sd > 0 else 0.0
    return out


def close(a: torch.Tensor, b, tol: float = 1e-12) -> None:
    b = torch.as_tensor(b, dtype=D)
    assert float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max())), (a, b)


# --------------------------------------------------------------------------------------------
# hand-worked cases
# --------------------------------------------------------------------------------------------


def test_hand_worked_two_of_four_correct_k2():
    # C(4,2) = 6 pairs, 5 contain a correct one: E[max] = 5/6, sample var (5/6)(1/6)·6/5 = 1/6;
    # s = 1 (correct), 2/3 (wrong: 2 of its 3 pairs hold a correct one)
    b = batch([1, 0, 1, 0], [0, 0, 0, 0])
    sd = math.sqrt(1 / 6)
    close(adv(b, "passk_training", k=2), [(1 / 6) / (sd + EPS), -(1 / 6) / (sd + EPS)] * 2)
    # PKPO: s = (1, 2/3, 1, 2/3), mean 5/6, sample std √(1/27)
    sd = math.sqrt(1 / 27)
    close(adv(b, "pkpo", k=2), [(1 / 6) / (sd + EPS), -(1 / 6) / (sd + EPS)] * 2)


def test_hand_worked_one_of_four_correct_k2():
    # E[max] = 1 − C(3,2)/C(4,2) = 1/2; σ² = (1/4)·6/5; s_neg = 1 − C(2,1)/C(3,1) = 1/3
    b = batch([1, 0, 0, 0], [5, 5, 5, 5])
    sd = math.sqrt(0.3)
    close(adv(b, "passk_training", k=2), [0.5 / (sd + EPS)] + [(1 / 3 - 0.5) / (sd + EPS)] * 3)
    # PKPO: s = (1, 1/3, 1/3, 1/3), mean 1/2, sample std 1/3
    close(adv(b, "pkpo", k=2), [0.5 / (1 / 3 + EPS)] + [(-1 / 6) / (1 / 3 + EPS)] * 3)


def test_paper_closed_form_for_binary_rewards():
    """Chen et al. Eq. 12–13: A_pos = (1 − R̄)/σ, A_neg = (1 − R̄ − C(n_neg−1, k−1)/C(n−1, k−1))/σ,
    R̄ = 1 − C(n_neg, k)/C(n, k); σ here Bessel-corrected over the C(n, k) subsets."""
    n, c, k = 8, 3, 3
    R = [1.0] * c + [0.0] * (n - c)
    nneg = n - c
    mean = 1 - math.comb(nneg, k) / math.comb(n, k)
    M = math.comb(n, k)
    sd = math.sqrt(mean * (1 - mean) * M / (M - 1))
    a_pos = (1 - mean) / (sd + EPS)
    a_neg = (1 - mean - math.comb(nneg - 1, k - 1) / math.comb(n - 1, k - 1)) / (sd + EPS)
    close(adv(batch(R, [0] * n), "passk_training", k=k), [a_pos] * c + [a_neg] * nneg)


# --------------------------------------------------------------------------------------------
# against the subset enumeration, continuous rewards, unequal groups
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_against_subset_enumeration(seed, k):
    g = torch.Generator().manual_seed(seed)
    groups = [0] * 5 + [1] * 6 + [2] * 7
    R = torch.randn(len(groups), generator=g, dtype=D)
    R[5:8] = R[5]  # a tie inside a group
    R_list = R.tolist()
    b = batch(R_list, groups)
    close(adv(b, "passk_training", k=k), ref_passk(R_list, groups, k))
    close(adv(b, "pkpo", k=k), ref_pkpo(R_list, groups, k))
    st = subset_max(R, torch.tensor(groups), k)
    for gid in set(groups):
        idx = [i for i, x in enumerate(groups) if x == gid]
        s, mean, _ = ref_group([R_list[i] for i in idx], k)
        close(st.s[idx], s)
        close(st.mean[idx], [mean] * len(idx))


@pytest.mark.parametrize("name", ["passk_training", "pkpo"])
@pytest.mark.parametrize("seed", [0, 1])
def test_k_one_is_grpo(name, seed):
    g = torch.Generator().manual_seed(seed)
    groups = torch.arange(16) // 4
    R = torch.randint(0, 2, (16,), generator=g).to(D)
    R[12:] = torch.randn(4, generator=g, dtype=D)  # one group with continuous rewards
    b = batch(R.tolist(), groups.tolist())
    close(adv(b, name, k=1), ef.group_advantages(R, groups))


@pytest.mark.parametrize("name", ["passk_training", "pkpo"])
def test_k_equal_n_all_correct_all_wrong_give_zero(name):
    b = batch([1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0], [0] * 4 + [1] * 4 + [2] * 4)
    assert torch.equal(adv(b, name, k=4), torch.zeros(12, dtype=D))  # k = n: one subset
    a = adv(b, name, k=2)
    assert torch.equal(a[4:], torch.zeros(8, dtype=D))  # all-correct, all-wrong groups: exactly 0
    assert bool((a[:4].abs() > 0.1).all())


def test_gradient_is_the_policy_gradient_of_the_advantages():
    """On-policy (r = 1, nothing clipped), token-mean: ∂loss/∂logp_{i,t} = −A_i·m_{i,t}/Σm."""
    b = batch([1, 0, 0, 1, 0, 1, 1, 1], [0] * 4 + [1] * 4, t=4)
    m = ef.get_method("passk_training", k=2)
    a = ef.compute_advantages(b, m)
    logp = torch.full((8, 4), -1.3, dtype=D, requires_grad=True)
    out = ef.policy_loss(ef.TokenBatch(logp, logp.detach(), a, b.mask), m)
    out.loss.backward()
    A = a[:, 0]
    want = -A.unsqueeze(-1) * b.mask / b.mask.sum()
    close(logp.grad, want, 1e-14)
    close(out.loss.detach(), float(-(A.unsqueeze(-1) * b.mask).sum() / b.mask.sum()), 1e-14)


def test_pkpo_anneals_k():
    m = ef.get_method("pkpo", k=8, k_end=1)
    assert [m.k_at(s, 8) for s in range(8)] == [8, 7, 6, 5, 4, 3, 2, 1]
    assert m.reads_step and not ef.get_method("pkpo").reads_step
    R = [1, 0, 0, 0, 0, 0, 0, 0]
    b = batch(R, [0] * 8)
    b.step, b.total_steps = 7, 8  # the last step: k = 1, GRPO
    close(adv(b, "pkpo", k=8, k_end=1), ef.group_advantages(torch.tensor(R, dtype=D), torch.zeros(8)))


@pytest.mark.parametrize("name", ["passk_training", "pkpo"])
def test_bad_k_is_a_typed_error(name):
    with pytest.raises(ParameterError, match=r"k.*integer >= 1"):
        ef.get_method(name, k=0)
    with pytest.raises(ParameterError, match=r"k.*<= the group size.*k = 5.*group of 4"):
        adv(batch([1, 0, 0, 1], [0] * 4), name, k=5)


# --- SimKO ---


def setup(seed=0, n=6, t=7, v=6, off=0.0):
    g = torch.Generator().manual_seed(seed)
    z = (torch.randn(n, t, v, generator=g, dtype=D) * 1.5).requires_grad_(True)
    logpi = torch.log_softmax(z, -1)
    ids = torch.randint(0, v, (n, t), generator=g)
    ids[1, :] = logpi.detach().argmax(-1)[1]  # a response that always samples the top-1 token
    ids[4, :] = logpi.detach().argmax(-1)[4]
    logp = logpi.gather(-1, ids[..., None])[..., 0]
    old = logp.detach() + off * torch.randn(n, t, generator=g, dtype=D)
    H = -(logpi.exp() * logpi).sum(-1).detach()
    mask = torch.ones(n, t, dtype=D)
    mask[2, 4:] = 0
    A = torch.tensor([1.0, -0.8, 0.5, 0.9, -1.3, -0.2], dtype=D)[:n]
    return z, ids, logp, old, H, mask, A


def test_topk_logprobs_is_the_sorted_log_softmax():
    z, *_ = setup()
    for k in (1, 3, 6):
        got = topk_logprobs(z, k, temperature=0.7)
        want = torch.log_softmax(z / 0.7, -1).sort(-1, descending=True).values[..., :k]
        assert torch.allclose(got, want, atol=1e-12, rtol=0)
    with pytest.raises(ParameterError, match="k"):
        topk_logprobs(z, 7)
    with pytest.raises(ParameterError, match="temperature"):
        topk_logprobs(z, 2, temperature=0.0)


def test_the_quantile_is_torch_quantile_per_response():
    _, _, _, _, H, mask, _ = setup()
    q = _response_quantile(H, mask.bool(), 0.8)
    for i in range(H.shape[0]):
        want = torch.quantile(H[i][mask[i].bool()], 0.8)
        assert abs(float(q[i, 0]) - float(want)) <= 1e-12


@pytest.mark.parametrize(("K", "alpha", "lam", "tau"), [(3, 0.01, 1.1, 0.8), (2, 0.3, 2.0, 0.5)])
def test_loss_and_gradient_on_policy_by_hand(K, alpha, lam, tau):
    z, ids, logp, old, H, mask, A = setup()
    top = topk_logprobs(z, K)
    b = ef.TokenBatch(logp, old, A, mask, old_entropy=H, topk_logp=top)
    out = ef.policy_loss(b, ef.get_method("simko", top_k=K, alpha=alpha, lam=lam, tau=tau))
    out.loss.backward()
    n, t, v = z.shape
    pi = torch.softmax(z.detach(), -1)
    den = float(mask.sum())
    want = torch.zeros(n, t, v, dtype=D)
    loss = 0.0
    pushed = 0
    for i in range(n):
        Hv = H[i][mask[i].bool()]
        thr = float(torch.quantile(Hv, tau))
        for j in range(t):
            if not mask[i, j]:
                continue
            e = lambda c: torch.nn.functional.one_hot(torch.tensor(c), v).to(D)  # noqa: E731
            gy = e(int(ids[i, j])) - pi[i, j]
            high = float(H[i, j]) > thr
            a = float(A[i])
            if a > 0 and high:
                tops = pi[i, j].sort(descending=True).indices[:K]
                spread = sum(e(int(c)) - pi[i, j] for c in tops) / K
                want[i, j] = -a / den * ((1 - alpha) * gy + alpha * spread)
            elif a < 0 and high and int(ids[i, j]) == int(pi[i, j].argmax()):
                pushed += 1
                a = lam * a
                want[i, j] = -a / den * gy
            else:
                want[i, j] = -a / den * gy
            loss += -a / den  # r = 1
    assert pushed > 0
    assert abs(float(out.loss.detach()) - loss) <= 1e-12
    assert torch.allclose(z.grad, want, atol=1e-12, rtol=0)
    assert abs(out.metrics["simko/pushed_frac"] - pushed / den) <= 1e-12


def test_off_policy_clip_uses_the_mixed_ratio():
    """Off policy: r̃ has r's value, so the clip decisions are PPO's; the loss value equals PPO-clip's
    with λ on the pushed tokens (the spread changes only the gradient)."""
    z, ids, logp, old, H, mask, A = setup(seed=1, off=0.4)
    m = ef.get_method("simko", lam=1.5)
    out = ef.policy_loss(ef.TokenBatch(logp, old, A, mask, old_entropy=H, topk_logp=topk_logprobs(z, 3)), m)
    pi = torch.softmax(z.detach(), -1)
    den = float(mask.sum())
    loss = 0.0
    for i in range(z.shape[0]):
        thr = float(torch.quantile(H[i][mask[i].bool()], 0.8))
        for j in range(z.shape[1]):
            if not mask[i, j]:
                continue
            r = float(torch.exp(logp.detach()[i, j] - old[i, j]))
            a = float(A[i])
            if a < 0 and float(H[i, j]) > thr and int(ids[i, j]) == int(pi[i, j].argmax()):
                a *= 1.5
            loss += max(-a * r, -a * min(max(r, 0.8), 1.2)) / den
    assert abs(float(out.loss.detach()) - loss) <= 1e-12


def test_needs_and_errors():
    z, _ids, logp, old, H, mask, A = setup()
    assert needs_of("simko").topk == 3
    assert needs_of(ef.get_method("simko", top_k=5)).topk == 5
    with pytest.raises(MissingInputError, match="topk_logp"):
        ef.policy_loss(ef.TokenBatch(logp, old, A, mask, old_entropy=H), "simko")
    with pytest.raises(ParameterError, match="top_k"):
        ef.policy_loss(ef.TokenBatch(logp, old, A, mask, old_entropy=H, topk_logp=topk_logprobs(z, 2)), "simko")
    with pytest.raises(ShapeError, match="topk_logp"):
        ef.TokenBatch(logp, old, A, mask, topk_logp=torch.zeros(6, 7, dtype=D))
    for bad in ({"top_k": 0}, {"tau": 0.0}, {"tau": 1.0}, {"alpha": 1.5}, {"lam": -1.0}):
        with pytest.raises(ParameterError, match=next(iter(bad))):
            ef.get_method("simko", **bad)
