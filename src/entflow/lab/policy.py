"""The lab's tiny policy (docs/design.md §10): a character-level ``PreTrainedTokenizerFast`` and a 1–5 M
parameter Hugging Face causal LM (Llama- or Qwen2-style), built in-process (nothing downloaded).

Sequence layout used everywhere in the lab (generation, warm start, trainer)::

    <pad> … <pad> <bos> p r o m p t  r e s p <eos>
    └─ left padding ─┘               └ response ┘

Position ids follow the attention mask (``position_ids_from_mask``), which is what ``generate``
does for left-padded batches, so a forward pass over ``[prompt | response]`` reproduces the
logits seen while sampling.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from entflow.core.rules import Check, at_least, choice
from entflow.errors import ParameterError
from entflow.trainer.config import check_keys, setting
from entflow.trainer.progress import quiet_transformers
from entflow.trainer.tokens import BOS, EOS, PAD, SPECIAL_TOKENS, UNK


@dataclass
class PolicyConfig:
    """Shape of the tiny policy. The default (~1.06 M parameters) is sized for a 2-core CPU."""

    arch: str = setting("llama", "the transformers architecture", allowed=choice("llama", "qwen2"))
    hidden_size: int = setting(128, "width of the residual stream", allowed=at_least(8))
    num_layers: int = setting(4, "transformer layers", allowed=at_least(1))
    num_heads: int = setting(
        4,
        "attention heads",
        allowed=at_least(1)
        & Check(
            "a divisor of hidden_size leaving an even head dimension (RoPE)",
            lambda v, c: c.hidden_size % v == 0 and (c.hidden_size // v) % 2 == 0,
            ("hidden_size",),
        ),
    )
    intermediate_size: int = setting(512, "width of the MLP", allowed=at_least(1))
    max_positions: int = setting(64, "longest sequence (prompt and response) in tokens", allowed=at_least(8))
    tie_embeddings: bool = setting(True, "the output layer shares the input embedding's weights")

    def validate(self) -> None:
        check_keys(self, error=lambda key, message: ParameterError("PolicyConfig", key, message))


def build_tokenizer(alphabet: str, model_max_length: int = 64):
    """Character-level fast tokenizer: ids 0–3 are ``<pad> <bos> <eos> <unk>``, then one id per
    character of ``alphabet`` in order. Encoding prepends ``<bos>`` (no eos); padding is left."""
    from tokenizers import Tokenizer, decoders, models, processors
    from transformers import PreTrainedTokenizerFast

    chars = list(dict.fromkeys(alphabet))  # unique, order kept
    if not chars:
        raise ParameterError("build_tokenizer", "alphabet", "must not be empty")
    if any(len(c) != 1 for c in chars):  # pragma: no cover - str iteration yields characters
        raise ParameterError("build_tokenizer", "alphabet", "must be a string of characters")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for c in chars:
        vocab[c] = len(vocab)
    # BPE without merges and without a pre-tokenizer splits any text into single characters.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        truncation_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )


def build_policy(tokenizer, cfg: PolicyConfig | None = None, seed: int = 0):
    """A freshly initialised causal LM for ``tokenizer``; the global torch RNG is left untouched."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    cfg = cfg or PolicyConfig()
    cfg.validate()
    common = dict(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=cfg.tie_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rms_norm_eps=1e-5,
        use_cache=True,
    )
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if cfg.arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = config_cls(**common)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.generation_config = GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=None,
        top_p=None,
        max_new_tokens=16,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return model


def count_parameters(model) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def load_policy(path: str | Path) -> tuple[Any, Any]:
    """(model, tokenizer) saved by :func:`entflow.lab.pretrain.pretrain` or by ``save_pretrained``
    of a lab policy (a trainer checkpoint). Also importable from ``entflow.lab.pretrain``."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ParameterError("load_policy", "path", f"has no saved model (config.json): {str(path)!r}")
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path)
    tokenizer.padding_side = "left"
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    return model, tokenizer
