"""Check the TRL adapter: one step of ``EntflowGRPOTrainer(method="grpo")`` equals one step of
``trl.GRPOTrainer``.

A 2-layer Llama (hidden 32) with a character tokenizer is built in-process (nothing is
downloaded), both trainers take one optimizer step with plain SGD (the update is lr × gradient,
so a wrong loss scale shows) on the same prompts and seed, and the two updates must agree.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
from typing import Any

import torch

from entflow.doctor.result import CheckResult, compared, skipped, timed

TOKENS = "0123456789+-*() >:="
# relative difference of the two updates Δθ = θ_after − θ_before, max over parameter tensors
# (float32: the same loss through two code paths differs by round-off only)
TOL = 1e-4


def _tokenizer():
    """Character-level fast tokenizer (ids 0–3 are the special tokens), left padding."""
    from tokenizers import Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    from entflow.trainer.tokens import BOS, EOS, PAD, SPECIAL_TOKENS, UNK

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for c in dict.fromkeys(TOKENS):
        vocab[c] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))  # no merges: one token per character
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, vocab[BOS])])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD, unk_token=UNK, padding_side="left",
        model_max_length=64, clean_up_tokenization_spaces=False,
    )  # fmt: skip


def save_tiny_model(path: str) -> Any:
    """Save a random 2-layer Llama and its tokenizer to ``path``; return the tokenizer."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok = _tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForCausalLM(config)
    with torch.no_grad():  # make <eos> likely enough that completion lengths vary
        model.lm_head.weight[tok.eos_token_id] *= 4.0
    model.generation_config = GenerationConfig(
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return tok


def reward(completions, **kwargs) -> list[float]:
    """A continuous reward (TRL's signature): groups almost never tie, so advantages are non-zero."""
    return [(c.count("1") + 0.5 * c.count("2") + 0.1 * len(c)) / (len(c) + 1) for c in completions]


def _args(cls, out: str, device: torch.device, **extra):
    return cls(
        output_dir=out, per_device_train_batch_size=4, num_generations=4, max_completion_length=6,
        gradient_accumulation_steps=2, max_steps=1, optim="sgd", learning_rate=0.5, lr_scheduler_type="constant",
        max_grad_norm=0.0, seed=0, use_cpu=device.type == "cpu", report_to="none", save_strategy="no",
        disable_tqdm=True, bf16=False, loss_type="dapo", **extra,
    )  # fmt: skip


@contextlib.contextmanager
def _quiet():
    """Silence the trainers' progress bars, printed logs and transformers' notices."""
    from entflow.trainer.progress import quiet_transformers

    with quiet_transformers(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        yield


def one_step(trainer_cls, args, path: str, tok, data) -> tuple[dict[str, torch.Tensor], list[str]]:
    """(weights after one step, completions) of ``trainer_cls``."""
    with _quiet():
        trainer = trainer_cls(model=path, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok)
        trainer.train()
    w = {k: v.detach().float().cpu().clone() for k, v in trainer.model.state_dict().items()}
    return w, list(trainer._logs["completion"])


def update_difference(trainer_cls: Any, device: torch.device) -> tuple[float, float, bool]:
    """(max relative difference of the updates, norm of TRL's update, same completions)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from entflow.integrations.trl import EntflowGRPOConfig

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model")
        with _quiet():
            tok = save_tiny_model(path)
            w0 = {
                k: v.detach().float().clone()
                for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()
            }
        data = Dataset.from_dict({"prompt": [f"{i} {i + 2}>{3 * i + 1}:" for i in range(8)]})
        w_trl, c_trl = one_step(GRPOTrainer, _args(GRPOConfig, os.path.join(tmp, "trl"), device), path, tok, data)
        args = _args(EntflowGRPOConfig, os.path.join(tmp, "ef"), device, entflow_method="grpo")
        w_ef, c_ef = one_step(trainer_cls, args, path, tok, data)
    worst, moved = 0.0, 0.0
    for k, w in w_trl.items():
        d_trl, d_ef = w - w0[k], w_ef[k] - w0[k]
        moved += float(d_trl.norm())
        worst = max(
            worst,
            float((d_ef - d_trl).norm()) / max(float(d_trl.norm()), 1e-30) if d_trl.norm() > 0 else float(d_ef.norm()),
        )
    return worst, moved, c_trl == c_ef


def check_trl(device: str | torch.device = "cpu", quick: bool = False, trainer_cls: Any = None) -> list[CheckResult]:
    """``trainer_cls`` (default ``EntflowGRPOTrainer``) with ``grpo`` makes TRL's own update.
    Skipped when TRL is not installed; tests pass a trainer with a faulty loss."""
    device = torch.device(device)
    label = f"trl[{device.type},grpo == GRPOTrainer]"
    if importlib.util.find_spec("trl") is None:
        return [skipped(label, "trl not installed (pip install 'entflow[trl]')")]
    if device.type not in ("cpu", "cuda"):
        return [skipped(label, f"the TRL check runs on cpu and cuda, not {device.type}")]

    def run() -> CheckResult:
        import trl

        from entflow.integrations.trl import EntflowGRPOTrainer

        worst, moved, same = update_difference(trainer_cls or EntflowGRPOTrainer, device)
        if not same:
            return CheckResult(label, False, "the two trainers generated different completions: not like for like")
        if not moved > 1e-6:
            return CheckResult(label, False, "TRL's step did not move the weights: nothing was compared")
        r = compared(label, worst, TOL, f"trl {trl.__version__}: update vs GRPOTrainer's, max relative difference")
        r.measurements = {"update_norm": moved}
        return r

    return timed(label, run)
