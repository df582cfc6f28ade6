"""The tiny TRL setup the TRL tests share: a 2-layer Llama with the lab's character tokenizer, saved
to a folder, 8 countdown-like prompts, and a continuous reward (TRL's signature)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer

TOKENS = "0123456789+-*() >:="


def save_tiny_llama(path: Path) -> tuple[str, Any, Any]:
    """(model_dir, tokenizer, dataset) of the tiny policy saved under ``path``."""
    from datasets import Dataset

    tok = build_tokenizer(TOKENS)
    model = build_policy(tok, PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=0)
    with torch.no_grad():  # make <eos> likely enough that completion lengths vary (token-count normalisers differ)
        h = model.model(**tok(["3 5>16:"], return_tensors="pt")).last_hidden_state[0, -1]
        model.lm_head.weight[tok.eos_token_id] += h / h.norm() ** 2
    model.save_pretrained(path)
    tok.save_pretrained(path)
    data = Dataset.from_dict({"prompt": [f"{i} {i + 2}>{3 * i + 1}:" for i in range(8)]})
    return str(path), tok, data


def continuous_reward(completions: list[str], **kwargs: Any) -> list[float]:
    """A continuous reward (TRL's signature): groups almost never tie, so advantages are non-zero."""
    return [(c.count("1") + 0.5 * c.count("2") + 0.1 * len(c)) / (len(c) + 1) for c in completions]
