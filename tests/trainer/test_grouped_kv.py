"""entflow.trainer.grouped_kv: within the block, masked no-grad CPU attention over grouped key/value
heads skips transformers' per-head copy (repeat_kv) and gives bit-identical outputs; a forward that
records a gradient keeps the copy; the switch is undone on exit, also on an error; a model without
grouped heads is left alone; generate's tokens and logits are bit-identical with and without it; a
use_gqa_in_sdpa of another signature is left to transformers (one warning), arguments the replacement
cannot read are handed to transformers' own function, and a single query that transformers 5.25 on
folds itself is left to it. Runs at both ends of the transformers range (.ci/real-range)."""

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


FOLDS_DECODING = callable(getattr(sdpa_attention, "pack_gqa", None))  # transformers 5.25 on


def ask(fn, mask, key):
    """``use_gqa_in_sdpa``'s answer, called as this transformers calls it (with ``value`` from 5.25)."""
    return fn(mask, key, key) if FOLDS_DECODING else fn(mask, key)


def test_unmasked_attention_is_decided_by_transformers_as_before(tmp_path):
    model = tiny_llama(tmp_path, kv_heads=2)
    key = torch.zeros(1, 2, 3, 8)
    prefill = torch.zeros(1, 1, 2, 3)  # two queries: transformers copies K and V under a mask
    decode = torch.zeros(1, 1, 1, 3)  # one query: transformers 5.25 on folds the query heads itself
    decide = sdpa_attention.use_gqa_in_sdpa
    with gkv.grouped_kv_attention(model), torch.no_grad():
        widened = sdpa_attention.use_gqa_in_sdpa
        assert ask(widened, None, key) == ask(decide, None, key)
        assert ask(widened, prefill, key) is True
        assert ask(decide, prefill, key) is False  # what transformers answers without the block
        assert ask(widened, decode, key) is (False if FOLDS_DECODING else True)
    with gkv.grouped_kv_attention(model):  # gradient recorded
        assert ask(sdpa_attention.use_gqa_in_sdpa, prefill, key) is False


def test_the_replacement_hands_calls_it_cannot_read_to_transformers(tmp_path, monkeypatch):
    """Arguments that do not bind to the known signature go to transformers' own function as they came."""
    model = tiny_llama(tmp_path, kv_heads=2)
    seen = []

    def decide(attention_mask, key, value):  # a known signature
        seen.append((attention_mask, key, value))
        return "transformers"

    monkeypatch.setattr(sdpa_attention, "use_gqa_in_sdpa", decide)
    with gkv.grouped_kv_attention(model), torch.no_grad():
        widened = sdpa_attention.use_gqa_in_sdpa
        assert widened is not decide
        assert widened(None, "k", "v") == "transformers"  # no mask: transformers decides
        with pytest.raises(TypeError):  # more than it knows: transformers' own function answers
            widened(torch.zeros(1, 1, 2, 3), torch.zeros(1, 2, 3, 8), None, "extra", flag=True)
    assert seen == [(None, "k", "v")]


def future_sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """An SDPA attention of a transformers release that calls ``use_gqa_in_sdpa`` with an extra
    positional and a keyword argument."""
    decode = query.shape[2] == 1
    groups = getattr(module, "num_key_value_groups", 1)
    gqa = groups > 1 and sdpa_attention.use_gqa_in_sdpa(attention_mask, key, value, query, is_decoding=decode)
    if groups > 1 and not gqa:
        key, value = sdpa_attention.repeat_kv(key, groups), sdpa_attention.repeat_kv(value, groups)
    causal = attention_mask is None and query.shape[2] > 1
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, is_causal=causal, scale=scaling, enable_gqa=bool(gqa)
    )
    return out.transpose(1, 2).contiguous(), None


def test_an_unknown_signature_leaves_transformers_alone(tmp_path, monkeypatch):
    """A use_gqa_in_sdpa with another signature (an extra positional and a keyword argument): the
    block is a no-op, decoding still works and gives the same samples, and one warning names the
    transformers version."""
    import transformers
    from transformers import AttentionInterface

    def changed(attention_mask, key, value, query, *, is_decoding=False):
        return attention_mask is None

    monkeypatch.setattr(sdpa_attention, "use_gqa_in_sdpa", changed)
    monkeypatch.setattr(gkv, "_warned", set())
    AttentionInterface.register("entflow_future_sdpa", future_sdpa)
    path = save_tiny_llama(tmp_path / "future", build_tokenizer(), num_kv_heads=2, seed=3)
    model = LlamaForCausalLM.from_pretrained(path, attn_implementation="entflow_future_sdpa").eval()
    tok = build_tokenizer()
    outs = []
    with pytest.warns(RuntimeWarning, match=f"transformers {transformers.__version__}") as caught:
        for ctx in (contextlib.nullcontext(), gkv.grouped_kv_attention(model), gkv.grouped_kv_attention(model)):
            with ctx:
                assert sdpa_attention.use_gqa_in_sdpa is changed
                torch.manual_seed(5)
                outs.append(rollout.generate(model, tok, ["Calculate 3 + 4.", "7"], 5, n=2, output_logits=True))
    assert len([w for w in caught if "use_gqa_in_sdpa" in str(w.message)]) == 1  # once per version
    first = outs[0]
    assert all(torch.equal(o.response_ids, first.response_ids) and torch.equal(o.logits, first.logits) for o in outs)


def test_nested_blocks_widen_once_and_restore(tmp_path):
    model = tiny_llama(tmp_path, kv_heads=2)
    decide = sdpa_attention.use_gqa_in_sdpa
    with gkv.grouped_kv_attention(model):
        outer = sdpa_attention.use_gqa_in_sdpa
        with gkv.grouped_kv_attention(model):
            assert sdpa_attention.use_gqa_in_sdpa is outer
        assert sdpa_attention.use_gqa_in_sdpa is outer
    assert sdpa_attention.use_gqa_in_sdpa is decide


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
    # shared prompts: the prompts' cache is built before decoding, outside the block; from 5.25 on
    # transformers decodes a single query without a copy, so only older releases copy more
    assert 0 < outs["in place", True, "copies"] <= outs["copy", True, "copies"]
    if not FOLDS_DECODING:
        assert outs["in place", True, "copies"] < outs["copy", True, "copies"]
    for share in (False, True):
        a, b = outs["copy", share], outs["in place", share]
        assert torch.equal(a.response_ids, b.response_ids)
        assert torch.equal(a.logits, b.logits)
        assert torch.equal(a.entropy, b.entropy)
