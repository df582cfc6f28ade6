"""Shared prompts (entflow.trainer.shared_prompts): every distinct prompt runs once, its KV cache is
gathered for the rows that share it. The logits, hidden states and parameter gradients must equal
those of the plain full forward over ``[prompt | response]`` (float32 round-off only)."""

from __future__ import annotations

import functools

import pytest
import torch

from entflow.lab.config import LabConfig
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.tasks import get_task
from entflow.trainer.rollout import response_hidden, response_logits, sample_rollout
from entflow.trainer.shared_prompts import (
    common_prefix_length,
    distinct_prompts,
    prefix_first_layout,
    prompt_cache,
    shared_response_forward,
    worth_sharing,
)
from entflow.trainer.tokens import encode_prompts, position_ids_from_mask

TOL = 1e-5  # float32: the same matmuls over fewer rows may sum in another order


def _rollout(arch: str = "llama", seed: int = 3):
    task = get_task("arithmetic", validation_size=4)  # prompts of several lengths: left padding
    tok = build_tokenizer(task.alphabet)
    model = build_policy(
        tok, PolicyConfig(arch=arch, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=seed
    )
    cfg = LabConfig(prompts_per_step=5, group_size=3, seed=11)
    torch.manual_seed(0)
    roll = sample_rollout(model, tok, task, cfg, step=1)
    assert (roll.prompt_mask == 0).any(), "prompts of one length: left padding untested"
    return model, roll


def test_distinct_prompts_match_a_dictionary_of_rows():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 3, (40, 4), generator=g)
    mask = torch.randint(0, 2, (40, 4), generator=g)
    first, inverse = distinct_prompts(ids, mask)
    seen: dict[tuple, int] = {}
    for i in range(40):
        seen.setdefault((tuple(ids[i].tolist()), tuple(mask[i].tolist())), i)
    assert sorted(first.tolist()) == sorted(seen.values())  # one first row per distinct (ids, mask)
    assert torch.equal(ids[first][inverse], ids) and torch.equal(mask[first][inverse], mask)
    # the same ids under another mask are another prompt
    assert distinct_prompts(torch.zeros(2, 3, dtype=torch.long), torch.tensor([[1, 1, 1], [0, 1, 1]]))[0].numel() == 2


def test_worth_sharing_only_when_a_prompt_repeats():
    ids = torch.tensor([[1, 2, 3], [4, 5, 6], [1, 2, 3]])
    mask = torch.ones_like(ids)
    assert worth_sharing(ids, mask)
    assert not worth_sharing(ids[:2], mask[:2])  # all distinct, no common first token
    assert worth_sharing(torch.tensor([[1, 2, 3], [1, 5, 6]]), mask[:2])  # distinct, but they begin alike
    assert not worth_sharing(ids[:, :1], mask[:, :1])  # one prompt token: nothing to cache


PATHS = pytest.mark.parametrize("packed", [False, True], ids=["cached", "packed"])


@PATHS
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_shared_forward_equals_the_full_forward(arch, packed):
    model, roll = _rollout(arch)
    model.eval()
    args = (roll.prompt_ids, roll.prompt_mask, roll.response_ids)
    with torch.no_grad():
        ref, mine = response_logits(model, *args), shared_response_forward(model, *args, packed=packed)
        ref_h = response_hidden(model, *args)
        mine_h = shared_response_forward(model, *args, hidden=True, packed=packed)
    assert mine.shape == ref.shape and mine_h.shape == ref_h.shape
    assert torch.allclose(mine, ref, atol=TOL, rtol=0), float((mine - ref).abs().max())
    assert torch.allclose(mine_h, ref_h, atol=TOL, rtol=0), float((mine_h - ref_h).abs().max())
    # sharp: one row's cache given to another row's response does not match
    swapped = torch.roll(roll.prompt_ids, 1, 0), torch.roll(roll.prompt_mask, 1, 0), roll.response_ids
    with torch.no_grad():
        wrong = shared_response_forward(model, *swapped, packed=packed)
    assert (wrong - ref).abs().max() > 1e3 * TOL


@PATHS
def test_shared_forward_gradients_equal_the_full_forward(packed):
    """A mini-batch of rows where some prompts repeat: the prompt's forward receives the summed
    gradient of every row reading its cache, as in the full forward."""
    model, roll = _rollout()
    model.train()
    idx = torch.tensor([0, 1, 2, 4, 7, 12, 13])  # whole and partial groups
    args = (roll.prompt_ids[idx], roll.prompt_mask[idx], roll.response_ids[idx])
    assert worth_sharing(*args[:2])
    weights = torch.randn(roll.response_ids[idx].shape, generator=torch.Generator().manual_seed(1))
    _assert_same_gradients(model, args, weights * roll.mask[idx], packed)


def _assert_same_gradients(model, args, weights: torch.Tensor, packed: bool) -> None:
    """The parameter gradients of Σ weights · log p(response) through the shared forward equal the
    full forward's, to 1e-4 relative per tensor (float32 round-off)."""

    def grads(forward):
        model.zero_grad(set_to_none=True)
        logp = torch.log_softmax(forward(model, *args), -1).gather(-1, args[2][..., None]).squeeze(-1)
        (logp * weights).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    ref, mine = grads(response_logits), grads(functools.partial(shared_response_forward, packed=packed))
    assert ref.keys() == mine.keys() and len(ref) > 0
    for name in ref:
        err = float((mine[name] - ref[name]).norm() / ref[name].norm().clamp_min(1e-12))
        assert err < 1e-4, f"{name}: relative error {err:.2e}"


def test_prompt_cache_repeats_rows_as_generate_lays_them_out():
    """``repeats=n``: rows i·n … i·n + n − 1 hold prompt i, as ``generate(n=...)`` repeats them."""
    model, roll = _rollout()
    model.eval()
    ids, mask = roll.prompt_ids[::3], roll.prompt_mask[::3]  # one row per group
    ids3, mask3 = ids.repeat_interleave(3, 0), mask.repeat_interleave(3, 0)
    with torch.no_grad():
        shared = prompt_cache(model, ids, mask, repeats=3)
        # the prompts as laid out for the cache: each row's ids, 3 times in a row
        lay_ids, lay_mask = prefix_first_layout(ids3, mask3, common_prefix_length(ids, mask))
        assert torch.equal(shared.prompt_ids, lay_ids) and torch.equal(shared.prompt_mask, lay_mask)
        # reference: a plain forward of every row's prompt (all but its last token), in that layout
        full = model(
            input_ids=lay_ids[:, :-1],
            attention_mask=lay_mask[:, :-1],
            position_ids=position_ids_from_mask(lay_mask[:, :-1]),
            use_cache=True,
        ).past_key_values
    real = lay_mask[:, None, :-1, None].bool()  # padding positions' keys are masked out: not compared
    for a, b in zip(shared.cache.layers, full.layers, strict=True):
        assert a.keys.shape == b.keys.shape and a.keys.shape[0] == 3 * ids.shape[0]
        for x, y in ((a.keys, b.keys), (a.values, b.values)):
            assert torch.allclose(x * real, y * real, atol=TOL)


# --------------------------------------------------------------------------------------------
# The common prefix of distinct prompts
# --------------------------------------------------------------------------------------------


def test_common_prefix_length_and_layout_by_hand():
    """Left-padded rows ``[0 0 7 8 9 4]``, ``[7 8 9 5 6 2]``, ``[0 7 8 9 3 1]``: all begin 7 8 9; the
    layout moves those three tokens to columns 0–2 and the padding after them."""
    ids = torch.tensor([[0, 0, 7, 8, 9, 4], [7, 8, 9, 5, 6, 2], [0, 7, 8, 9, 3, 1]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 1, 1]])
    assert common_prefix_length(ids, mask) == 3
    lay_ids, lay_mask = prefix_first_layout(ids, mask, 3)
    assert lay_ids.tolist() == [[7, 8, 9, 0, 0, 4], [7, 8, 9, 5, 6, 2], [7, 8, 9, 0, 3, 1]]
    assert lay_mask.tolist() == [[1, 1, 1, 0, 0, 1], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 1, 1]]
    # positions follow the mask: each real token keeps its position
    assert torch.equal(position_ids_from_mask(lay_mask)[lay_mask.bool()], position_ids_from_mask(mask)[mask.bool()])
    assert common_prefix_length(lay_ids, lay_mask) == 3  # the layout keeps the prefix; padding anywhere
    assert torch.equal(prefix_first_layout(ids, mask, 0)[0], ids)  # c = 0: left padding as it was
    # at most the shortest prompt's length − 1: its last token runs per row
    assert common_prefix_length(torch.tensor([[0, 7, 8], [7, 8, 9]]), torch.tensor([[0, 1, 1], [1, 1, 1]])) == 1
    assert common_prefix_length(ids[:1], mask[:1]) == 3  # one row: all but its last token
    assert common_prefix_length(torch.tensor([[1, 2], [3, 2]]), torch.ones(2, 2, dtype=torch.long)) == 0


def _prefixed_prompts():
    """Distinct prompts of several lengths that begin alike (a shared 'few-shot' head), as the real
    setting's chat template and worked examples make them."""
    task = get_task("arithmetic", validation_size=4)
    tok = build_tokenizer(task.alphabet)
    head = "12+34=46 7*8=56 "
    prompts = [head + q for q in ("3+4=", "12*3=", "(1+2)*3=", "9-8=", "3+4=")]
    model = build_policy(
        tok, PolicyConfig(arch="llama", hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=4
    )
    return model, tok, prompts


@PATHS
def test_the_common_prefix_is_run_once_and_the_forward_is_unchanged(packed):
    """Distinct prompts with a 17-token common head (bos + 16 characters): the logits, hidden states
    and gradients of the shared forward equal the full forward's. Cached: the prefix runs for one
    row, then the 4 distinct prompts' rest, then every row's response. Packed: one sequence of
    prefix + rests + responses (but their last tokens) in one body call."""
    model, tok, prompts = _prefixed_prompts()
    enc = encode_prompts(tok, prompts)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert (mask == 0).any() and common_prefix_length(ids, mask) == 17
    g = torch.Generator().manual_seed(2)
    response = torch.randint(1, 20, (ids.shape[0], 5), generator=g)
    calls: list[tuple[int, int]] = []
    model.model.register_forward_pre_hook(lambda m, a, k: calls.append(tuple(k["input_ids"].shape)), with_kwargs=True)
    model.eval()
    with torch.no_grad():
        ref, ref_h = response_logits(model, ids, mask, response), response_hidden(model, ids, mask, response)
        calls.clear()
        mine = shared_response_forward(model, ids, mask, response, packed=packed)
    rest = [int(mask[i].sum()) - 17 for i in range(4)]  # prompts 0 and 4 are the same
    assert calls == ([(1, 17 + sum(rest) + 5 * 4)] if packed else [(1, 17), (4, ids.shape[1] - 1 - 17), (5, 6)])
    assert torch.allclose(mine, ref, atol=TOL, rtol=0), float((mine - ref).abs().max())
    with torch.no_grad():
        mine_h = shared_response_forward(model, ids, mask, response, hidden=True, packed=packed)
    assert torch.allclose(mine_h, ref_h, atol=TOL, rtol=0), float((mine_h - ref_h).abs().max())
    # sharp: prompts given to other rows' responses do not match
    with torch.no_grad():
        wrong = shared_response_forward(model, ids.roll(1, 0), mask.roll(1, 0), response, packed=packed)
    assert (wrong - ref).abs().max() > 1e3 * TOL

    model.train()
    _assert_same_gradients(model, (ids, mask, response), torch.randn(response.shape, generator=g), packed)


def test_packed_tree_by_hand():
    """Two distinct prompts [5 6 7] and [5 6 8 9] (left-padded) sharing the prefix [5 6], three rows
    (the first prompt twice) of 3 response tokens: the packed sequence, its positions, which tokens
    each reads, and which response positions are read."""
    from entflow.trainer.shared_prompts import _packed_tree, packed_length

    ids = torch.tensor([[0, 5, 6, 7], [0, 5, 6, 7], [5, 6, 8, 9]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]])
    resp = torch.tensor([[1, 2, 3], [4, 3, 2], [2, 2, 1]])
    seq, pos, attends, reads = _packed_tree(ids, mask, resp)
    # prefix 5 6 | rest of prompt A: 7 | rest of prompt B: 8 9 | responses but their last token
    assert seq.tolist() == [5, 6, 7, 8, 9, 1, 2, 4, 3, 2, 2]
    assert pos.tolist() == [0, 1, 2, 2, 3, 3, 4, 3, 4, 4, 5]
    assert packed_length(ids, mask, resp) == 11
    seen = {i: [j for j in range(11) if attends[i, j]] for i in range(11)}
    assert seen[4] == [0, 1, 3, 4]  # prompt B's last token: the prefix and B
    assert seen[6] == [0, 1, 2, 5, 6]  # row 0's second response token: prefix, A, its own response
    assert seen[8] == [0, 1, 2, 7, 8]  # row 1 shares A's tokens but not row 0's response
    assert seen[10] == [0, 1, 3, 4, 9, 10]
    assert reads.tolist() == [[2, 5, 6], [2, 7, 8], [4, 9, 10]]


def test_generate_shares_the_common_prefix_even_with_one_sample():
    """``generate(n=1, share_prompts=True)`` (greedy, or one sample per problem): the prompts' common
    prefix is prefilled once; the same responses and logits to round-off as plain ``generate``."""
    from entflow.trainer.rollout import generate

    model, tok, prompts = _prefixed_prompts()
    model.eval()
    for greedy, n in ((True, 1), (False, 1), (False, 3)):
        out = []
        for share in (False, True):
            torch.manual_seed(5)
            out.append(generate(model, tok, prompts, 6, n=n, greedy=greedy, output_logits=True, share_prompts=share))
        plain, shared = out
        assert plain.texts == shared.texts and torch.equal(plain.response_ids, shared.response_ids), (greedy, n)
        assert torch.allclose(plain.logits, shared.logits, atol=TOL, rtol=0), (greedy, n)
        # the rows keep their left-padded prompts, whatever layout the cache used
        assert torch.equal(plain.prompt_ids, shared.prompt_ids) and torch.equal(plain.prompt_mask, shared.prompt_mask)


def test_generate_with_shared_prompts_equals_plain_generate():
    """``generate(share_prompts=True)``: each prompt's prefill runs once for its n rows; the greedy
    responses are the same and generate's raw logits equal to round-off; sampling under one seed
    draws the same responses."""
    from entflow.trainer.rollout import generate

    model, roll = _rollout()
    task = get_task("arithmetic", validation_size=4)
    tok = build_tokenizer(task.alphabet)
    prompts = list(dict.fromkeys(roll.prompts))
    model.eval()
    for greedy in (True, False):
        out = []
        for share in (False, True):
            torch.manual_seed(5)
            out.append(generate(model, tok, prompts, 8, n=3, greedy=greedy, output_logits=True, share_prompts=share))
        plain, shared = out
        assert plain.texts == shared.texts and torch.equal(plain.response_ids, shared.response_ids)
        assert torch.allclose(plain.logits, shared.logits, atol=TOL, rtol=0)


def test_generate_in_batches_passes_share_prompts_to_generate(monkeypatch):
    """The evaluation path (``generate_in_batches``, used by ``entflow eval`` and a real run's
    validation) shares each prompt's prefill when asked, greedy rows included (their common prefix),
    and samples the same responses under one seed as without sharing."""
    import entflow.trainer.evaluate as ev
    from entflow.trainer.rollout import generate

    model, roll = _rollout()
    tok = build_tokenizer(get_task("arithmetic", validation_size=4).alphabet)
    prompts = list(dict.fromkeys(roll.prompts))
    seen: list[bool] = []

    def spy(*a, **k):
        seen.append(k["share_prompts"])
        return generate(*a, **k)

    monkeypatch.setattr(ev, "generate", spy)
    runs = {}
    for share in (False, True):
        for greedy in (False, True):
            seen.clear()
            gens = ev.generate_in_batches(
                model, tok, prompts, 4, 8, batch_size=8, seed=7, greedy=greedy, share_prompts=share
            )
            assert seen and all(flag == share for flag in seen), (share, greedy, seen)
            runs[share, greedy] = [t for g in gens for t in g.texts]
    assert runs[True, False] == runs[False, False] and runs[True, True] == runs[False, True]


def test_cache_kwarg_follows_the_forward_signature():
    """The KV cache goes in by the name the model's forward takes: ``cache`` (newer transformers) or
    ``past_key_values``; a peft-style wrapper is asked about the model it wraps."""
    from entflow.trainer.shared_prompts import cache_kwarg

    class Old(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, use_cache=False): ...

    class New(torch.nn.Module):
        def forward(self, input_ids, cache=None, use_cache=False): ...

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def get_base_model(self):
            return self.inner

        def forward(self, *args, **kwargs): ...

    assert cache_kwarg(Old()) == "past_key_values"
    assert cache_kwarg(New()) == "cache"
    assert cache_kwarg(Wrapper(New())) == "cache" and cache_kwarg(Wrapper(Old())) == "past_key_values"


def test_packed_forward_runs_a_peft_models_adapters():
    """A LoRA-wrapped policy (``hf.setup.add_lora``): the packed forward goes through the wrapped
    model, adapters included, and equals the wrapper's own full forward."""
    pytest.importorskip("peft")
    from entflow.hf.setup import add_lora

    model, tok, prompts = _prefixed_prompts()
    lora = add_lora(model, rank=4, seed=0)
    with torch.no_grad():  # B = 0 at the start: make the adapters change the logits
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    enc = encode_prompts(tok, prompts)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    response = torch.randint(1, 20, (ids.shape[0], 4), generator=torch.Generator().manual_seed(3))
    lora.eval()
    with torch.no_grad():
        ref = response_logits(lora, ids, mask, response)
        mine = shared_response_forward(lora, ids, mask, response, packed=True)
        with lora.disable_adapter():
            without = response_logits(lora, ids, mask, response)
    assert torch.allclose(mine, ref, atol=TOL, rtol=0), float((mine - ref).abs().max())
    assert (without - ref).abs().max() > 1e3 * TOL  # the adapters matter here
