"""entflow.trainer.grouped_kv: within the block, masked no-grad CPU attention over grouped key/value
heads skips transformers' per-head copy (repeat_kv) and gives bit-identical outputs; a forward that
records a gradient keeps the copy; the switch is undone on exit, also on an error; a model without
grouped heads is left alone; generate's tokens and logits are bit-identical with and without it."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM
from transformers.integrations import sdpa_attention

import entflow.trainer.grouped_kv as gkv
import entflow.trainer.rollout as rollout
from entflow.hf.models import save_tiny_llama
from support.real_tiny import build_tokenizer


def tiny_llama(folder: Path, kv_heads: int, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer Llama with 4 query heads and ``kv_heads`` key/value heads (the shared tiny builder,
    saved under ``folder``), loaded with SDPA attention, float32, in eval mode."""
    path = save_tiny_llama(folder / f"kv{kv_heads}-s{seed}", build_tokenizer(), num_kv_heads=kv_heads, seed=seed)
    return LlamaForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()


@pytest.fixture
def copies(monkeypatch):
    """Counts transformers' repeat_kv calls that copy (more than one query head per key/value head)."""
    seen: list[int] = []
    real = sdpa_attention.repeat_kv

    def spy(hidden_states, n_rep):
        if n_rep > 1:
            seen.append(n_rep)
        return real(hidden_states, n_rep)

    monkeypatch.setattr(sdpa_attention, "repeat_kv", spy)
    return seen


def padded_batch(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """Three left-padded rows of different lengths: the model sees a mask."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, model.config.vocab_size, (3, 9), generator=g)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, :4], mask[1, :1] = 0, 0
    return {"input_ids": ids, "attention_mask": mask}


def test_masked_no_grad_attention_reads_grouped_heads_in_place_with_identical_logits(tmp_path, copies):
    model = tiny_llama(tmp_path, kv_heads=2)
    batch = padded_batch(model)
    with torch.no_grad():
        plain = model(**batch).logits
        assert copies == [2, 2] * 2  # K and V copied in each of the 2 layers
        with gkv.grouped_kv_attention(model):
            fast = model(**batch).logits
    assert copies == [2, 2] * 2  # none more inside the block
    assert torch.equal(fast, plain)


def test_a_forward_recording_a_gradient_keeps_the_copy(tmp_path, copies):
    model = tiny_llama(tmp_path, kv_heads=2)
    batch = padded_batch(model)
    plain = model(**batch).logits
    plain.sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with gkv.grouped_kv_attention(model):
        inside = model(**batch).logits
        inside.sum().backward()
    assert len(copies) == 8  # 2 layers × K, V × both forwards
    assert torch.equal(inside, plain)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))


def test_switch_undone_on_exit_and_on_an_error(tmp_path, copies):
    model = tiny_llama(tmp_path, kv_heads=2)
    decide = sdpa_attention.use_gqa_in_sdpa
    with gkv.grouped_kv_attention(model):
        assert sdpa_attention.use_gqa_in_sdpa is not decide
    assert sdpa_attention.use_gqa_in_sdpa is decide
    with pytest.raises(RuntimeError, match="boom"), gkv.grouped_kv_attention(model):
        raise RuntimeError("boom")
    assert sdpa_attention.use_gqa_in_sdpa is decide
    with torch.no_grad():
        model(**padded_batch(model))
    assert copies == [2, 2] * 2  # after the block, masked attention copies again


def test_a_model_without_grouped_heads_is_left_alone(tmp_path):
    model = tiny_llama(tmp_path, kv_heads=4)
    assert not gkv.has_grouped_kv_heads(model) and gkv.has_grouped_kv_heads(tiny_llama(tmp_path, kv_heads=1))
    decide = sdpa_attention.use_gqa_in_sdpa
    with gkv.grouped_kv_attention(model):
        assert sdpa_attention.use_gqa_in_sdpa is decide
    assert not gkv.has_grouped_kv_heads(torch.nn.Linear(2, 2))  # no config at all


def test_unmasked_attention_is_decided_by_transformers_as_before(tmp_path):
    model = tiny_llama(tmp_path, kv_heads=2)
    key = torch.zeros(1, 2, 3, 8)
    mask = torch.zeros(1, 1, 1, 3)
    decide = sdpa_attention.use_gqa_in_sdpa
    with gkv.grouped_kv_attention(model), torch.no_grad():
        assert sdpa_attention.use_gqa_in_sdpa(None, key) == decide(None, key)
        assert sdpa_attention.use_gqa_in_sdpa(mask, key) is True
        assert decide(mask, key) is False  # what transformers answers without the block
    with gkv.grouped_kv_attention(model):  # gradient recorded
        assert sdpa_attention.use_gqa_in_sdpa(mask, key) is False


@pytest.mark.parametrize("greedy", [True, False])
def test_generate_is_bit_identical_with_and_without_it(tmp_path, copies, monkeypatch, greedy):
    """generate decodes under grouped_kv_attention: the same tokens, raw logits and entropies, bit
    for bit, as with transformers' copy; left-padded prompts of different lengths, shared or not."""
    model = tiny_llama(tmp_path, kv_heads=2, seed=3)
    tok = build_tokenizer()
    prompts = ["Calculate 3 + 4.", "What is 12 - 5? It is", "7"]
    outs = {}
    for name, ctx in (("copy", lambda m: contextlib.nullcontext()), ("in place", gkv.grouped_kv_attention)):
        monkeypatch.setattr(rollout, "grouped_kv_attention", ctx)
        for share in (False, True):
            torch.manual_seed(5)
            before = len(copies)
            outs[name, share] = rollout.generate(
                model, tok, prompts, 6, n=2, greedy=greedy, output_logits=True, record_entropy=True, share_prompts=share
            )
            outs[name, share, "copies"] = len(copies) - before
    assert outs["in place", False, "copies"] == 0 < outs["copy", False, "copies"]
    # shared prompts: the prompts' cache is built before decoding, outside the block
    assert 0 < outs["in place", True, "copies"] < outs["copy", True, "copies"]
    for share in (False, True):
        a, b = outs["copy", share], outs["in place", share]
        assert torch.equal(a.response_ids, b.response_ids)
        assert torch.equal(a.logits, b.logits)
        assert torch.equal(a.entropy, b.entropy)
