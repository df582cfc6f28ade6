"""The fixed-text probe: an entropy that does not depend on what the policy now samples.

A policy's entropy measured on its own samples moves with them: a policy that learns to stop early
or to stay at the length cap changes *which* tokens are measured, so the sampled entropy mixes the
policy's uncertainty with its response length. The probe fixes the text: a set of prompt +
response pairs sampled once from the starting policy (one response per prompt at the training
temperature, seeded by ``probe_seed``), stored as token ids. At every evaluation the current policy
reads those same tokens (teacher forcing) and :func:`probe_entropy` reports its mean token entropy
over them, so every run and every step is measured on identical tokens.

:class:`Probe` is the stored set (``probe.jsonl``: a header line with the digest, then one line per
pair); :func:`sample_probe` draws it; :func:`probe_entropy` measures a policy on it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from entflow.errors import ConfigError

__all__ = ["Probe", "probe_entropy", "sample_probe"]


@dataclass
class Probe:
    """Prompt + response token ids (unpadded), with their texts for reading."""

    prompt_ids: list[list[int]]  # [P][Lp_i]
    response_ids: list[list[int]]  # [P][T_i], T_i >= 1, eos included when the response ended
    prompts: list[str]
    responses: list[str]
    source: dict[str, Any]  # how it was made (model, split, seed, temperature, max_new_tokens)

    def __post_init__(self) -> None:
        n = len(self.prompt_ids)
        if not (len(self.response_ids) == len(self.prompts) == len(self.responses) == n) or n == 0:
            raise ConfigError("probe", f"needs one prompt, response and text per pair and >= 1 pair, got {n}")
        for i, (p, r) in enumerate(zip(self.prompt_ids, self.response_ids, strict=True)):
            if not p or not r:
                raise ConfigError("probe", f"pair {i} has an empty prompt or response ({len(p)}, {len(r)} tokens)")

    @property
    def n_tokens(self) -> int:
        """Response tokens the probe entropy averages over."""
        return sum(len(r) for r in self.response_ids)

    def digest(self) -> str:
        """sha256 of the token ids: equal digests mean the same probe."""
        blob = json.dumps([self.prompt_ids, self.response_ids], separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        head = {"digest": self.digest(), "pairs": len(self.prompt_ids), "tokens": self.n_tokens, **self.source}
        rows = [json.dumps(head)]
        for p, r, pt, rt in zip(self.prompt_ids, self.response_ids, self.prompts, self.responses, strict=True):
            rows.append(json.dumps({"prompt": pt, "response": rt, "prompt_ids": p, "response_ids": r}))
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(rows) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> Probe:
        """A probe saved by :meth:`save`; a file whose tokens do not match its header's digest raises."""
        path = Path(path)
        if not path.is_file():
            raise ConfigError("probe_file", f"no such file: {str(path)!r}")
        lines = path.read_text(encoding="utf-8").splitlines()
        try:
            head, rows = json.loads(lines[0]), [json.loads(x) for x in lines[1:] if x.strip()]
        except (json.JSONDecodeError, IndexError) as e:
            raise ConfigError("probe_file", f"{path}: not a probe file ({e})") from None
        source = {k: v for k, v in head.items() if k not in ("digest", "pairs", "tokens")}
        probe = cls(
            [r["prompt_ids"] for r in rows],
            [r["response_ids"] for r in rows],
            [r["prompt"] for r in rows],
            [r["response"] for r in rows],
            source,
        )
        if probe.digest() != head.get("digest"):
            raise ConfigError("probe_file", f"{path}: its tokens do not match the digest in its first line")
        return probe


def sample_probe(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[str],
    max_new_tokens: int,
    temperature: float,
    seed: int,
    source: dict[str, Any] | None = None,
    batch_size: int = 64,
) -> Probe:
    """One response per prompt from ``model`` at ``temperature`` (no top-k / top-p), under a forked
    RNG seeded with ``seed``, through the evaluation's generation path
    (:func:`entflow.trainer.evaluate.generate_in_batches`)."""
    from entflow.trainer.evaluate import generate_in_batches

    if not prompts:
        raise ConfigError("probe_prompts", "no prompts to sample the probe from")
    runs = generate_in_batches(
        model, tokenizer, list(prompts), 1, max_new_tokens, temperature=temperature, batch_size=batch_size, seed=seed
    )
    p_ids, r_ids, texts = [], [], []
    for gen in runs:
        for row in range(gen.response_ids.shape[0]):
            keep = gen.prompt_mask[row].bool()
            p_ids.append([int(t) for t in gen.prompt_ids[row][keep]])
            n = int(gen.mask[row].sum())
            r_ids.append([int(t) for t in gen.response_ids[row, :n]])
            texts.append(gen.texts[row])
    info = {"seed": seed, "temperature": temperature, "max_new_tokens": max_new_tokens, **(source or {})}
    return Probe(p_ids, r_ids, list(prompts), texts, info)


@torch.no_grad()
def probe_entropy(
    model: Any, probe: Probe, pad_id: int, temperature: float = 1.0, batch_rows: int = 32, share_prompts: bool = False
) -> float:
    """The policy's mean token entropy (nats) on the probe's response tokens under teacher forcing:
    ``Σ_i Σ_t H_{i,t} / Σ_i T_i``, where ``H_{i,t}`` is the full-vocabulary entropy of
    softmax(logits / temperature) at the position that predicts response token t of pair i (every
    token weighs the same). Rows are batched ``batch_rows`` at a time, prompts left-padded with
    ``pad_id`` and responses right-padded; positions follow the attention mask, as in generation
    (:func:`entflow.trainer.rollout.response_token_stats`, :func:`entflow.core.token_stats.token_stats`).
    ``share_prompts``: the prompts' common prefix runs once per batch (equal to float round-off)."""
    from entflow.trainer.rollout import response_token_stats

    if not temperature > 0:
        raise ConfigError("temperature", f"must be > 0, got {temperature}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for s in range(0, len(probe.prompt_ids), batch_rows):
            prompts, responses = probe.prompt_ids[s : s + batch_rows], probe.response_ids[s : s + batch_rows]
            lp, lr = max(map(len, prompts)), max(map(len, responses))
            p_ids = torch.full((len(prompts), lp), pad_id, dtype=torch.long)
            p_mask = torch.zeros((len(prompts), lp), dtype=torch.long)
            r_ids = torch.full((len(prompts), lr), pad_id, dtype=torch.long)
            r_mask = torch.zeros((len(prompts), lr), dtype=torch.float64)
            for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
                p_ids[i, lp - len(p) :] = torch.tensor(p)
                p_mask[i, lp - len(p) :] = 1
                r_ids[i, : len(r)] = torch.tensor(r)
                r_mask[i, : len(r)] = 1
            stats = response_token_stats(
                model,
                p_ids.to(device),
                p_mask.to(device),
                r_ids.to(device),
                temperature,
                stats=("entropy",),
                share_prompts=share_prompts,
            )
            total += float((stats.entropy.double().cpu() * r_mask).sum())
            count += int(r_mask.sum())
    finally:
        model.train(was_training)
    return total / count
