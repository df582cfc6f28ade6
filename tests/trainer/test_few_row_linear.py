"""entflow.trainer.few_row_linear: (W @ xᵀ)ᵀ equals F.linear in float64 to float32 round-off, is taken
only by large CPU float32 layers on a few rows without grad, is undone on exit, and leaves
generate's logits those of the plain layers to round-off."""

from __future__ import annotations

import contextlib
import functools
import re
import warnings

import pytest
import torch
from torch.nn import functional

import entflow.trainer.few_row_linear as frl
import entflow.trainer.rollout as rollout
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.tasks import get_task


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("lead", [(7,), (3, 5), (16, 1)])
def test_linear_few_rows_matches_float64_linear(bias, lead):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*lead, 96, generator=g)
    w = torch.randn(40, 96, generator=g)
    b = torch.randn(40, generator=g) if bias else None
    out = frl.linear_few_rows(x, w, b)
    ref = functional.linear(x.double(), w.double(), None if b is None else b.double())
    assert out.shape == (*lead, 40) and out.dtype == torch.float32 and out.is_contiguous()
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)  # float32 round-off over K = 96


@pytest.fixture
def calls(monkeypatch):
    """Counts the calls of linear_few_rows (the switched path) and records their row counts."""
    seen: list[int] = []
    real = frl.linear_few_rows

    def spy(x, w, b=None):
        seen.append(x.numel() // x.shape[-1])
        return real(x, w, b)

    monkeypatch.setattr(frl, "linear_few_rows", spy)
    return seen


def test_only_large_layers_on_few_rows_without_grad_switch(calls):
    big, small = torch.nn.Linear(600, 600), torch.nn.Linear(600, 10)  # 360,000 ≥ MIN_WEIGHT > 6,000 entries
    model = torch.nn.Sequential(big, small)
    x_few, x_many, x_one = torch.randn(2, 4, 600), torch.randn(frl.MAX_ROWS + 1, 600), torch.randn(1, 600)
    with frl.few_row_linears(model):
        with torch.no_grad():
            few = model(x_few)
            many = model(x_many)
            one = model(x_one)
        assert calls == [8]  # the large layer on 2 × 4 rows; not the small one, not 33 rows, not 1 row
        with_grad = model(x_few)
        assert calls == [8]  # recording a gradient: F.linear
    assert "forward" not in vars(big) and "forward" not in vars(small)  # restored
    with torch.no_grad():
        torch.testing.assert_close(few, model(x_few), rtol=1e-5, atol=1e-5)
        assert torch.equal(many, model(x_many)) and torch.equal(one, model(x_one))  # F.linear both times
    assert torch.equal(with_grad.detach(), model(x_few).detach())


def test_layers_restored_after_an_error(calls):
    model = torch.nn.Sequential(torch.nn.Linear(600, 600))
    with pytest.raises(RuntimeError, match="boom"), frl.few_row_linears(model):
        raise RuntimeError("boom")
    assert "forward" not in vars(model[0])
    with torch.no_grad():
        model(torch.randn(3, 600))
    assert calls == []


def test_bfloat16_layers_are_left_alone(calls):
    model = torch.nn.Sequential(torch.nn.Linear(600, 600)).to(torch.bfloat16)
    with frl.few_row_linears(model), torch.no_grad():
        model(torch.randn(3, 600, dtype=torch.bfloat16))
    assert calls == []


def test_generate_logits_equal_the_plain_layers_to_round_off(calls, monkeypatch):
    """generate decodes under few_row_linears (here with every layer switched, min_weight=0): the
    same greedy tokens and the same raw logits to float32 round-off as with the plain layers."""
    task = get_task("arithmetic", validation_size=4)
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, PolicyConfig(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128), seed=3)
    model.eval()
    prompts = ["1+2", "37+5", "9"]
    monkeypatch.setattr(rollout, "few_row_linears", lambda m: contextlib.nullcontext())
    plain = rollout.generate(model, tok, prompts, 6, n=2, greedy=True, output_logits=True)
    assert calls == []
    monkeypatch.setattr(rollout, "few_row_linears", functools.partial(frl.few_row_linears, min_weight=0))
    fast = rollout.generate(model, tok, prompts, 6, n=2, greedy=True, output_logits=True)
    assert calls.count(6) > 0  # the decoding steps (6 rows each) took W @ xᵀ
    assert torch.equal(fast.response_ids, plain.response_ids)
    torch.testing.assert_close(fast.logits, plain.logits, rtol=1e-5, atol=1e-5)


def test_a_call_by_keyword_takes_the_switch_and_one_it_does_not_read_goes_to_torch(calls):
    layer = torch.nn.Linear(600, 600)
    x = torch.randn(4, 600)
    with frl.few_row_linears(torch.nn.Sequential(layer)), torch.no_grad():
        by_name = layer(input=x)
        assert calls == [4]
        with pytest.raises(TypeError):  # torch's own refusal of an argument nn.Linear does not take
            layer(x, 2.0)
    assert calls == [4]
    with torch.no_grad():
        torch.testing.assert_close(by_name, layer(x), rtol=1e-5, atol=1e-5)


def test_a_torch_whose_linear_forward_changed_keeps_its_own_layers(calls, monkeypatch):
    """A torch whose ``nn.Linear.forward`` takes an extra positional and a keyword: the layers are
    left to it (calls with the new arguments work), with one warning naming the torch version."""

    def forward(self, input, scale=1.0, *, shift=False):
        out = functional.linear(input, self.weight, self.bias) * scale
        return out + 1.0 if shift else out

    monkeypatch.setattr(torch.nn.Linear, "forward", forward)
    monkeypatch.setattr(frl, "_warned", set())
    layer = torch.nn.Linear(600, 600)
    model = torch.nn.Sequential(layer)
    x = torch.randn(4, 600)
    version = re.escape(str(torch.__version__))
    with pytest.warns(RuntimeWarning, match=rf"torch {version}'s nn.Linear.forward\(self, input, scale, shift\)"):
        with frl.few_row_linears(model), torch.no_grad():
            changed = layer(x, 2.0, shift=True)
            plain = model(x)
    assert calls == [] and "forward" not in vars(layer)
    with torch.no_grad():
        assert torch.equal(changed, forward(layer, x, 2.0, shift=True)) and torch.equal(plain, forward(layer, x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per torch version
        with frl.few_row_linears(model):
            pass
