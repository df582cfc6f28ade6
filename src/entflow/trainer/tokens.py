"""Tokens of a rollout (docs/design.md §10): left-padded prompts, response masks and decoding.

Sequence layout used by the trainer for every policy (the lab's tiny one and real models)::

    <pad> … <pad> <bos> p r o m p t  r e s p <eos>
    └─ left padding ─┘               └ response ┘

Position ids follow the attention mask (:func:`position_ids_from_mask`), which is what
``generate`` does for left-padded batches, so a forward pass over ``[prompt | response]``
reproduces the logits seen while sampling.
"""

from __future__ import annotations

from torch import Tensor

from entflow.errors import ParameterError

# the special tokens of a character-level tokenizer (the lab's; ids 0, 1, 2, 3)
PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
GARBAGE_CHAR = "\ufffd"  # what decode_responses writes for bos/unk/pad generated inside a response


def encode_prompts(tokenizer, prompts: list[str]) -> dict[str, Tensor]:
    """Left-padded ``input_ids`` / ``attention_mask`` ([P, L], int64) with ``<bos>`` prepended."""
    if isinstance(prompts, str):
        raise ParameterError("encode_prompts", "prompts", "must be a list of strings, got one string")
    if len(prompts) == 0:
        raise ParameterError("encode_prompts", "prompts", "must not be empty")
    enc = tokenizer(list(prompts), padding=True, return_tensors="pt", add_special_tokens=True)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def _id_to_char(tokenizer) -> list[str]:
    table = getattr(tokenizer, "_entflow_id_to_char", None)
    if table is None:
        vocab = tokenizer.get_vocab()
        table = [GARBAGE_CHAR] * (max(vocab.values()) + 1)
        for tok, i in vocab.items():
            table[i] = GARBAGE_CHAR if tok in SPECIAL_TOKENS else tok
        tokenizer._entflow_id_to_char = table
    return table


def decode_responses(tokenizer, ids: Tensor) -> list[str]:
    """Response token ids ``[N, T]`` (``generate`` output with the prompt columns removed) →
    strings: each row is cut at its first ``<eos>``, leading/trailing ``<pad>`` are stripped, and a
    special token the model generated *inside* a response becomes ``GARBAGE_CHAR`` (so a verifier
    rejects it instead of silently reading around it). Any other (subword) tokenizer decodes with
    its own ``batch_decode(skip_special_tokens=True)`` after the same cut."""
    if ids.dim() == 1:
        ids = ids.unsqueeze(0)
    if ids.dim() != 2:
        raise ParameterError("decode_responses", "ids", f"must be [N, T], got shape {tuple(ids.shape)}")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rows: list[list[int]] = []
    for row in ids.tolist():
        if eos in row:
            row = row[: row.index(eos)]
        lo, hi = 0, len(row)
        while lo < hi and row[lo] == pad:
            lo += 1
        while hi > lo and row[hi - 1] == pad:
            hi -= 1
        rows.append(row[lo:hi])
    if not is_char_tokenizer(tokenizer):  # a real (subword) tokenizer: its own decoder, specials dropped
        return tokenizer.batch_decode(rows, skip_special_tokens=True)
    table = _id_to_char(tokenizer)
    return ["".join(table[i] if 0 <= i < len(table) else GARBAGE_CHAR for i in row) for row in rows]


def is_char_tokenizer(tokenizer) -> bool:
    """True for the lab's character-level tokenizer (every token one character or a special)."""
    flag = getattr(tokenizer, "_entflow_is_char", None)
    if flag is None:
        flag = all(len(t) == 1 or t in SPECIAL_TOKENS for t in tokenizer.get_vocab())
        tokenizer._entflow_is_char = flag
    return flag


def response_mask(tokenizer, ids: Tensor) -> Tensor:
    """``[N, T]`` float mask over generated ids: 1 up to and including the first ``<eos>`` (the
    whole row when there is none), 0 after it."""
    eos = tokenizer.eos_token_id
    is_eos = ids == eos
    after = (is_eos.cumsum(dim=1) - is_eos.long()) > 0  # strictly after the first eos
    return (~after).float()


def position_ids_from_mask(attention_mask: Tensor) -> Tensor:
    """Positions counted over real tokens only (0 at ``<bos>``), as ``generate`` does for
    left-padded input; padding positions get 0."""
    pos = attention_mask.long().cumsum(dim=1) - 1
    return pos.clamp_min(0)
