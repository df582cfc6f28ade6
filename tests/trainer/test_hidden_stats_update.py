"""The trainer's update forward from the last hidden state (``TrainConfig.hidden_stats``): values
and gradients equal the logits path to float32 round-off, a whole step moves the weights the same
way, and no grad-enabled forward asks the LM head for logits."""

from __future__ import annotations

import copy

import pytest
import torch

import entflow as ef
from entflow.lab.config import LabConfig
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.tasks import get_task
from entflow.trainer.rollout import response_token_stats, sample_rollout
from entflow.trainer.step import train_step
from support.soft_capped import tiny_gemma2

STATS = ("logp", "entropy", "sum_p2", "sum_p2_logp")
METHOD = "entropy_advantage+clip_higher+steer+entropy_bonus"  # reads logp, H (with grad), Σπ², Σπ² log π
PARAMS = {"alpha": 0.05, "lambda_min": 0.5, "estimator": "tabular", "c": 0.01}


def _tiny(tie: bool = True):
    task = get_task("arithmetic", validation_size=4)  # prompts of several lengths: left padding
    tok = build_tokenizer(task.alphabet)
    cfg = PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, tie_embeddings=tie)
    return task, tok, build_policy(tok, cfg, seed=3)


class _HeadCalls:
    """Counts the LM head's forward calls made with grad enabled (the update's forwards)."""

    def __init__(self, model):
        self.n = 0
        self._h = model.get_output_embeddings().register_forward_hook(self._count)

    def _count(self, mod, args, out):
        self.n += int(torch.is_grad_enabled())

    def remove(self):
        self._h.remove()


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_response_token_stats_from_hidden_values_and_gradients(tie):
    task, tok, model = _tiny(tie)
    cfg = LabConfig(prompts_per_step=4, group_size=3, temperature=0.7, seed=5)
    torch.manual_seed(0)
    roll = sample_rollout(model, tok, task, cfg, step=1)
    assert (roll.prompt_mask == 0).any()
    model.train()
    weights = torch.randn(4, *roll.mask.shape, generator=torch.Generator().manual_seed(2)) * roll.mask
    results = {}
    for hidden in (False, True):
        model.zero_grad(set_to_none=True)
        calls = _HeadCalls(model)
        s = response_token_stats(
            model, roll.prompt_ids, roll.prompt_mask, roll.response_ids, 0.7, 5, STATS, hidden_stats=hidden
        )
        calls.remove()
        sum(((getattr(s, f) * w).sum() for f, w in zip(STATS, weights, strict=True))).backward()
        grads = {k: p.grad.clone() for k, p in model.named_parameters()}
        results[hidden] = (s, grads, calls.n)
    (s0, g0, n0), (s1, g1, n1) = results[False], results[True]
    assert n0 >= 1 and n1 == 0  # the hidden path never runs the head
    for f in STATS:
        a, b = getattr(s1, f).detach(), getattr(s0, f).detach()
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), f"{f}: {float((a - b).abs().max()):.2e}"
    for k in g0:
        err = float((g1[k] - g0[k]).norm() / g0[k].norm().clamp(min=1e-12))
        assert err < 1e-4, f"{k}: relative error {err:.2e}"


def test_train_step_with_hidden_stats_matches_the_logits_path():
    task, tok, model0 = _tiny()
    runs = {}
    for hidden in (False, True):
        model = copy.deepcopy(model0)
        cfg = LabConfig(
            prompts_per_step=4, group_size=3, temperature=0.7, seed=5, mini_batches=2, audit=False, hidden_stats=hidden
        )
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        calls = _HeadCalls(model)
        torch.manual_seed(0)
        metrics, _, _ = train_step(model, tok, task, ef.get_method(METHOD, **PARAMS), opt, cfg, step=1)
        calls.remove()
        runs[hidden] = ({k: v.detach().clone() for k, v in model.state_dict().items()}, metrics, calls.n)
    (w0, m0, n0), (w1, m1, n1) = runs[False], runs[True]
    assert n0 == 2 and n1 == 0  # one update forward per mini-batch on the logits path, none on the hidden one
    init = model0.state_dict()
    d0 = torch.cat([(w0[k] - init[k]).flatten() for k in w0])  # the update each path applied
    d1 = torch.cat([(w1[k] - init[k]).flatten() for k in w0])
    assert float(d0.abs().max()) > 1e-4  # the step did change the weights
    assert float((d1 - d0).norm() / d0.norm()) < 1e-4
    assert m0.keys() == m1.keys()
    for k in m0:
        assert m1[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-6), k


def test_a_soft_capped_head_falls_back_to_the_logits_with_a_warning():
    model = tiny_gemma2(2.0)  # c·tanh(z/c) with logits of several units: the cap acts
    g = torch.Generator().manual_seed(1)
    prompt_ids, response_ids = torch.randint(1, 40, (3, 4), generator=g), torch.randint(1, 40, (3, 5), generator=g)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[0, :2] = 0
    with torch.no_grad():
        with pytest.warns(UserWarning, match="final_logit_softcapping = 2.0"):
            got = response_token_stats(
                model, prompt_ids, prompt_mask, response_ids, 0.9, None, STATS, hidden_stats=True
            )
        ref = response_token_stats(model, prompt_ids, prompt_mask, response_ids, 0.9, None, STATS)
    for f in STATS:
        assert torch.equal(getattr(got, f), getattr(ref, f)), f  # the very same logits path
