"""Check the real-model path against the installed transformers: one decoding pass through entflow's
generation path and one update (a policy-loss backward) on a tiny Llama built in-process.

The model has grouped key/value heads (4 query heads, 2 key/value heads, like SmolLM2's 9 and 3), so
decoding runs transformers' SDPA attention under :func:`~entflow.trainer.grouped_kv.grouped_kv_attention`
and :func:`~entflow.trainer.few_row_linear.few_row_linears`, as ``rollout.generate`` always does; the
prompts differ in length, so they are left-padded and every attention call is masked. Nothing is
downloaded. Both checks compare with a float64 copy of the same weights run through transformers'
eager attention, one full forward per row without padding (no mask, no cache, no grouped-head
switch), and name the transformers and TRL versions installed. A release that changes what entflow
relies on (a function entflow wraps called with other arguments, a cache that decodes differently)
shows here as a FAIL naming the versions, not as a crash in the middle of a run.

- ``real_model[dev,decode]``: greedy ``rollout.generate`` with ``output_logits``; the logits of every
  generated token against the reference forward over prompt + response.
- ``real_model[dev,update]``: ``response_token_stats`` (the update's forward, with grad) →
  ``policy_loss("grpo")`` → backward; the loss and the gradient of every weight against the
  reference loss (PPO-clip, token mean, written out) differentiated by autograd in float64.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import torch

from entflow.doctor.result import CheckResult, compared, max_relative_to_peak, max_scaled_error, skipped, timed

# prompts of different lengths: left padding, so every attention call has a mask
PROMPTS = ["12+3=", "7*(4-1)=", "5>", "30-2*8="]
NEW_TOKENS = 6
# float32 against float64 on a 2-layer model with hidden size 64: measured ~1e-7 on a CPU
DECODE_TOL = 1e-4
GRAD_TOL = 1e-4
CLIP = 0.2


def versions() -> str:
    """``"transformers X, trl Y"`` (``"not installed"`` for an absent one)."""
    from entflow.integrations.hooks import library_version

    return f"transformers {library_version('transformers')}, trl {library_version('trl')}"


def tiny_grouped_llama(device: torch.device, attn_implementation: str = "sdpa", seed: int = 0) -> tuple[Any, Any]:
    """(model in eval mode on ``device``, tokenizer): a random 2-layer Llama, hidden size 64, 4
    query heads over 2 key/value heads, the doctor's character tokenizer (left padding)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from entflow.doctor.trl import _tokenizer

    tok = _tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, attn_implementation=attn_implementation,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    return model.to(device).eval(), tok


def reference_model(model: Any) -> Any:
    """A float64 CPU copy of ``model``'s weights under transformers' eager attention."""
    from transformers import LlamaForCausalLM

    config = model.config.__class__.from_dict(model.config.to_dict())
    config._attn_implementation = "eager"
    ref = LlamaForCausalLM(config)
    ref.load_state_dict({k: v.detach().cpu() for k, v in model.state_dict().items()})
    return ref.double().eval()


def reference_logits(ref: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, response_ids: torch.Tensor):
    """float64 logits ``[N, T, V]`` predicting each response token: per row, one full forward of its
    prompt (padding removed) and response, positions from 0, no attention mask at all."""
    t = response_ids.shape[1]
    rows = []
    for ids, mask, resp in zip(prompt_ids.cpu(), prompt_mask.cpu(), response_ids.cpu(), strict=True):
        seq = torch.cat([ids[mask.bool()], resp]).unsqueeze(0)
        rows.append(ref(input_ids=seq).logits[0, -t - 1 : -1])
    return torch.stack(rows)


Generate = Callable[..., Any]
PolicyLoss = Callable[..., Any]


def _decode(model: Any, tok: Any, generate: Generate) -> Any:
    with torch.no_grad():
        return generate(model, tok, PROMPTS, NEW_TOKENS, greedy=True, output_logits=True)


def check_decode(device: torch.device, generate: Generate) -> CheckResult:
    model, tok = tiny_grouped_llama(device)
    gen = _decode(model, tok, generate)
    with torch.no_grad():
        ref = reference_logits(reference_model(model), gen.prompt_ids, gen.prompt_mask, gen.response_ids)
    keep = gen.mask.cpu().bool()
    err = max_scaled_error(gen.logits.cpu()[keep], ref[keep])
    return compared(
        f"real_model[{device.type},decode]",
        err,
        DECODE_TOL,
        f"{versions()}: generate's logits vs float64 eager forward, max error",
        tokens=float(keep.sum()),
    )


def check_update(device: torch.device, generate: Generate, loss_fn: PolicyLoss) -> CheckResult:
    from entflow.core.batch import TokenBatch
    from entflow.core.ppo import LossSpec
    from entflow.trainer.rollout import response_token_stats

    model, tok = tiny_grouped_llama(device)
    gen = _decode(model, tok, generate)
    mask = gen.mask.float()
    adv = torch.linspace(-0.5, 1.0, mask.shape[0], device=mask.device)
    model.zero_grad(set_to_none=True)
    st = response_token_stats(model, gen.prompt_ids, gen.prompt_mask, gen.response_ids, 1.0, stats=("logp", "entropy"))
    batch = TokenBatch(st.logp, st.logp.detach(), adv, mask, entropy=st.entropy)
    loss = loss_fn(batch, "grpo", LossSpec(CLIP, CLIP), metrics="none").loss
    loss.backward()
    grads = {k: p.grad for k, p in model.named_parameters()}

    ref = reference_model(model)
    logits = reference_logits(ref, gen.prompt_ids, gen.prompt_mask, gen.response_ids)
    logp = torch.log_softmax(logits, -1).gather(-1, gen.response_ids.cpu().unsqueeze(-1)).squeeze(-1)
    # ℓ_t = max(−A·r_t, −A·clip(r_t, 1−ε, 1+ε)), r_t = exp(logp_t − old_logp_t), old = logp: token mean
    r = torch.exp(logp - logp.detach())
    a = adv.cpu().double()[:, None]
    per_token = torch.maximum(-a * r, -a * r.clamp(1 - CLIP, 1 + CLIP))
    m = mask.cpu().double()
    ref_loss = (per_token * m).sum() / m.sum()
    ref_loss.backward()
    worst = max_scaled_error(loss.detach().reshape(1), ref_loss.detach().reshape(1))
    for k, p in ref.named_parameters():
        g = grads.get(k)
        if g is None:  # a weight the loss does not reach has no gradient on either side
            if p.grad is not None and bool(p.grad.abs().max() > 0):
                worst = float("inf")
            continue
        worst = max(worst, max_relative_to_peak(g, p.grad))
    return compared(
        f"real_model[{device.type},update]",
        worst,
        GRAD_TOL,
        f"{versions()}: policy-loss gradient vs float64 eager autograd, max error",
        loss=float(loss.detach()),
    )


def check_real_model(
    device: str | torch.device = "cpu",
    quick: bool = False,
    generate: Generate | None = None,
    loss_fn: PolicyLoss | None = None,
) -> list[CheckResult]:
    """``generate`` (default :func:`entflow.trainer.rollout.generate`) decodes and ``loss_fn``
    (default :func:`entflow.policy_loss`) updates a tiny grouped-head Llama like the float64
    reference. Skipped without transformers (the core install) and on devices other than cpu and cuda;
    tests pass a faulty ``generate`` or ``loss_fn``."""
    device = torch.device(device)
    labels = [f"real_model[{device.type},{part}]" for part in ("decode", "update")]
    if importlib.util.find_spec("transformers") is None:
        return [skipped(label, "transformers not installed (pip install 'entflow[real]')") for label in labels]
    if device.type not in ("cpu", "cuda"):
        return [skipped(label, f"the real-model check runs on cpu and cuda, not {device.type}") for label in labels]

    def subjects() -> tuple[Generate, PolicyLoss]:
        from entflow.methods.objective import policy_loss
        from entflow.trainer.rollout import generate as rollout_generate

        return generate or rollout_generate, loss_fn or policy_loss

    results = [
        *timed(labels[0], lambda: check_decode(device, subjects()[0])),
        *timed(labels[1], lambda: check_update(device, *subjects())),
    ]
    for r in results:
        if r.detail.startswith("raised "):  # a crash names the versions too
            r.detail = f"{versions()}: {r.detail}"
    return results
