"""Check the gradient of the policy loss w.r.t. the logits for a few methods on a device.

Subject: logits ``[N, T, V]`` (float32, on the device) → ``token_stats`` (its closed-form
backward) → :class:`TokenBatch` → ``policy_loss(method)``. Reference: the same logits in
float64 on the CPU → ``log_softmax`` → the loss, differentiated by autograd. For ``grpo`` the
reference loss is written out here (PPO-clip, token mean: docs/design.md §4); for the other
methods it is ``policy_loss`` in float64 (their formulas are tested against the papers by the
test suite; here the question is whether this device and dtype reproduce them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from entflow.core.advantages import group_advantages
from entflow.core.batch import TokenBatch
from entflow.core.clip_settings import CLIP_EPS
from entflow.core.ppo import LossSpec
from entflow.core.token_stats import token_stats
from entflow.doctor.result import CheckResult, compared, max_relative_to_peak, max_scaled_error, timed
from entflow.doctor.token_stats import TEMPERATURE, reference_token_stats
from entflow.methods.base import Method, get_method
from entflow.methods.needs import required_token_stats
from entflow.methods.objective import policy_loss

# (name, parameters): Clip-Cov with ratio 1 removes every candidate (no random draw, so the CPU
# reference and a CUDA generator agree); bounds that make about half the tokens candidates
METHODS: list[tuple[str, dict]] = [
    ("grpo", {}),
    ("clip_cov", {"ratio": 1.0, "cov_low": 0.0, "cov_high": 1e6}),
    ("kl_cov", {"ratio": 0.2, "beta": 1.0}),
    ("steer", {}),
    ("opefo", {}),
]
# float32 loss and gradient against float64: max |Δ| / max |ref| (gradient), / max(1, |ref|) (loss)
GRAD_TOL = 1e-4
CLIP = CLIP_EPS  # the loss's default ε (core/clip_settings.py)


class LossInputs(NamedTuple):
    """Everything of a batch but the logits: ``[N, T]`` old log-probs, old entropies and mask,
    ``[N]`` advantages, ``[N, T]`` sampled ids."""

    ids: torch.Tensor
    old_logp: torch.Tensor
    old_entropy: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor

    def to(self, device: torch.device, dtype: torch.dtype) -> LossInputs:
        return LossInputs(
            self.ids.to(device),
            *(t.to(device=device, dtype=dtype) for t in (self.old_logp, self.old_entropy, self.advantages, self.mask)),
        )


LossFn = Callable[[torch.Tensor, LossInputs, Method], torch.Tensor]


def entflow_loss(logits: torch.Tensor, inputs: LossInputs, method: Method) -> torch.Tensor:
    """The loss a trainer computes: ``token_stats`` of ``logits`` ``[N, T, V]`` then ``policy_loss``."""
    st = token_stats(logits, inputs.ids, TEMPERATURE, stats=required_token_stats(method))
    batch = TokenBatch(
        st.logp, inputs.old_logp, inputs.advantages, inputs.mask, entropy=st.entropy,
        old_entropy=inputs.old_entropy, sum_p2=st.sum_p2, sum_p2_logp=st.sum_p2_logp,
    )  # fmt: skip
    return policy_loss(batch, method, LossSpec(CLIP, CLIP), metrics="none").loss


def reference_loss(logits64: torch.Tensor, inputs: LossInputs, method: Method) -> torch.Tensor:
    """The float64 reference: ``log_softmax`` statistics; GRPO's loss written out, the others
    through ``policy_loss`` in float64."""
    st = reference_token_stats(logits64, inputs.ids, TEMPERATURE)
    if method.name == "grpo":
        # ℓ_t = max(−A·r_t, −A·clip(r_t, 1−ε, 1+ε)), r_t = exp(logp_t − old_logp_t); token mean (docs/design.md §4)
        r = torch.exp(st.logp - inputs.old_logp)
        a = inputs.advantages[:, None]
        ell = torch.maximum(-a * r, -a * r.clamp(1 - CLIP, 1 + CLIP))
        return (ell * inputs.mask).sum() / inputs.mask.sum()
    batch = TokenBatch(
        st.logp, inputs.old_logp, inputs.advantages, inputs.mask, entropy=st.entropy,
        old_entropy=inputs.old_entropy, sum_p2=st.sum_p2.detach(), sum_p2_logp=st.sum_p2_logp.detach(),
    )  # fmt: skip
    return policy_loss(batch, method, LossSpec(CLIP, CLIP), metrics="none").loss


def make_inputs(N: int, T: int, V: int, seed: int = 1) -> tuple[torch.Tensor, LossInputs]:
    """``(logits [N, T, V] float64, inputs)`` on the CPU: groups of 4 responses with 0/1 rewards,
    ragged masks, an old policy 0.3 nats away, old entropies a little off the current ones."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(N, T, V, generator=g, dtype=torch.float64) * 1.5
    ids = torch.multinomial(torch.softmax(logits.view(-1, V) / TEMPERATURE, -1), 1, generator=g).view(N, T)
    st = reference_token_stats(logits, ids, TEMPERATURE)
    lengths = torch.randint(T // 2, T + 1, (N,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None] < lengths[:, None]).double()
    rewards = torch.tensor([1.0, 0.0] * (N // 2), dtype=torch.float64)[torch.randperm(N, generator=g)]
    adv = group_advantages(rewards, torch.arange(N) // 4)
    old_logp = (st.logp + 0.3 * torch.randn(N, T, generator=g, dtype=torch.float64)).clamp(max=-1e-4)
    old_H = st.entropy + 0.05 * torch.rand(N, T, generator=g, dtype=torch.float64)
    return logits, LossInputs(ids, old_logp, old_H, adv, mask)


def gradient_errors(loss_fn: LossFn, name: str, params: dict, device: torch.device, shape: tuple[int, int, int]):
    """(loss error, gradient error, max |reference gradient|) of ``loss_fn`` in float32 on
    ``device`` against the float64 CPU reference."""
    logits64, inputs = make_inputs(*shape)
    x = logits64.to(device=device, dtype=torch.float32).requires_grad_()
    loss = loss_fn(x, inputs.to(device, torch.float32), get_method(name, **params))
    (grad,) = torch.autograd.grad(loss, x)
    x64 = x.detach().to("cpu", torch.float64).requires_grad_()  # the same rounded values
    ref = reference_loss(x64, inputs, get_method(name, **params))
    (ref_grad,) = torch.autograd.grad(ref, x64)
    return max_scaled_error(loss, ref), max_relative_to_peak(grad, ref_grad), float(ref_grad.abs().max())


def check_loss_gradients(
    device: str | torch.device, quick: bool = False, loss_fn: LossFn = entflow_loss
) -> list[CheckResult]:
    """One result per method of :data:`METHODS`: loss and gradient w.r.t. the logits within
    :data:`GRAD_TOL` of float64 autograd. ``loss_fn`` is the subject (tests pass a faulty one)."""
    device = torch.device(device)
    shape = (8, 12, 257) if quick else (16, 32, 4099)
    results: list[CheckResult] = []
    for name, params in METHODS:
        label = f"loss_gradient[{device.type},{name}]"

        def run(name=name, params=params, label=label) -> CheckResult:
            loss_err, grad_err, peak = gradient_errors(loss_fn, name, params, device, shape)
            if not peak > 0:
                return CheckResult(label, False, "the reference gradient is zero: nothing was checked")
            r = compared(label, max(loss_err, grad_err), GRAD_TOL, "max error")
            r.detail = f"gradient {grad_err:.1e}, loss {loss_err:.1e} (tol {GRAD_TOL:.0e}) vs float64 autograd"
            r.measurements = {"loss_error": loss_err, "gradient_error": grad_err}
            return r

        results += timed(label, run)
    return results
