"""What the TRL equality tests share once ``trl`` is importable: the trainer keywords, a trainer that
keeps its last micro-batch, and the independent re-computation of that micro-batch's tensors.

Import it only after ``pytest.importorskip("trl")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

import entflow as ef
from entflow.integrations.trl import EntflowGRPOTrainer


def trl_args(out: Path | str, **kw: Any) -> dict[str, Any]:
    """``GRPOConfig`` keywords of the TRL tests, ``kw`` overriding: one CPU process in float32 (TRL
    defaults to bf16 autocast, also on CPU), plain SGD at a constant rate with no gradient clipping (the
    update is lr·gradient, so a wrong loss scale shows; Adam would hide it), no logging sink."""
    args: dict[str, Any] = dict(
        output_dir=str(out), per_device_train_batch_size=8, num_generations=4, max_completion_length=6,
        gradient_accumulation_steps=1, max_steps=1, optim="sgd", learning_rate=0.5, lr_scheduler_type="constant",
        max_grad_norm=0.0, seed=0, use_cpu=True, report_to="none", logging_steps=1, save_strategy="no",
        disable_tqdm=True, bf16=False,
    )  # fmt: skip
    args.update(kw)
    return args


def two_pass_run(cls: type, cfg_cls: type, tiny: tuple, out: Path, reward: Any, **kw: Any) -> tuple:
    """Train ``cls`` (TRL's ``GRPOTrainer`` or entflow's) 2 steps of 2 micro-batches with two passes over
    each generation batch (``num_iterations=2``: ratios move off 1 on the second pass).

    Returns (final weights, the completions TRL logged, the trainer)."""
    path, tok, data = tiny
    args = cfg_cls(**trl_args(
        out, per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=2, num_iterations=2,
        learning_rate=2.0, **kw,
    ))  # fmt: skip
    trainer = cls(model=path, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    w = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return w, list(trainer._logs["completion"]), trainer


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """‖a − b‖ / ‖b‖."""
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def assert_same_update(w0: dict, w_peer: dict, w_ours: dict) -> None:
    """Two trainings from the weights ``w0`` end equal: the final weights to 1e-6 relative, the updates
    themselves to 1e-4 (float32), and a tensor the peer left untouched stays untouched."""
    for k in w_peer:
        if (w_peer[k] - w0[k]).norm() == 0:
            assert (w_ours[k] - w0[k]).norm() == 0, k
            continue
        assert rel(w_ours[k], w_peer[k]) <= 1e-6, k
        assert rel(w_ours[k] - w0[k], w_peer[k] - w0[k]) <= 1e-4, k


class CapturingTrainer(EntflowGRPOTrainer):
    """Keeps the last micro-batch's inputs, the weights it was computed with and its loss."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        self.captured_inputs = {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in inputs.items()}
        self.captured_weights = {
            k: v.detach().clone() for k, v in self.accelerator.unwrap_model(model).state_dict().items()
        }
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.captured_loss = loss.detach().clone()
        return loss


def completion_logits(model: Any, x: dict[str, torch.Tensor]) -> torch.Tensor:
    """``[B, T, V]`` logits that score the captured completions ``x["completion_ids"]`` ``[B, T]``:
    a plain transformers forward of prompt + completion."""
    ids = torch.cat([x["prompt_ids"], x["completion_ids"]], 1)
    attn = torch.cat([x["prompt_mask"], x["completion_mask"]], 1)
    T = x["completion_ids"].shape[1]
    return model(input_ids=ids, attention_mask=attn).logits[:, -T - 1 : -1]


def captured_model(trainer: CapturingTrainer, path: str) -> Any:
    """A fresh copy of the model at ``path`` holding the captured weights (TRL patches the trained one's
    forward, so it is not reused)."""
    model = AutoModelForCausalLM.from_pretrained(path)
    model.load_state_dict(trainer.captured_weights)
    return model


def rewards_and_groups(trainer: CapturingTrainer, tok: Any, seen: dict[str, float]) -> tuple:
    """Independent rewards ``[B]`` (by completion text, from ``seen``) and group ids ``[B]`` (identical
    prompts) of the captured micro-batch."""
    x = trainer.captured_inputs
    texts = tok.batch_decode(x["completion_ids"], skip_special_tokens=True)
    rewards = torch.tensor([seen[t] for t in texts])
    _, group = torch.unique(x["prompt_ids"], dim=0, return_inverse=True)
    return rewards, group


def recording(reward: Any, seen: dict[str, float]) -> Any:
    """``reward`` that also records each completion's reward in ``seen``."""

    def wrapped(completions, **kwargs):
        r = reward(completions)
        seen.update(zip(completions, r, strict=True))
        return r

    return wrapped


def captured_stats(trainer: CapturingTrainer, path: str, temperature: float = 1.0) -> Any:
    """``ef.token_stats`` of the captured micro-batch from an independent forward of its weights."""
    x = trainer.captured_inputs
    logits = completion_logits(captured_model(trainer, path), x)
    return ef.token_stats(logits, x["completion_ids"], temperature=temperature)
