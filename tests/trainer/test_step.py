"""One training step (trainer/step.py).

Strict on-policy makes exactly one optimizer step per rollout batch, so the ratio is 1 and nothing
is clipped (a micro lab run).

The methods of other RL libraries (docs/methods.md, "Exploration and entropy methods of other RL
libraries") through the generic trainer's step: two epochs × two mini-batches on a random micro
Llama with random 0/1 rewards (``random_reward``), so every group has a signal. Each step must
train (the parameters move), report the method's own metrics from the loss it ran, and — for
the methods that drop tokens — count fewer tokens than the batch holds. ``chord`` is not here:
the generic trainer does not append expert rows (docs/methods.md, "Our readings").

verl's and TRL's loss modes (methods/loss_modes.py) in the generic trainer's step: each runs
through ``train_step`` with two mini-batches (the second sees ratios off 1, where the losses differ
from GRPO), logs its own metrics, and changes the update relative to GRPO on the same rollout.
The formulas themselves are tested in tests/methods/test_loss_modes.py and against the peers in
tests/integrations/.

A random (not warm-started) micro Llama on countdown with random rewards (Bernoulli ½, so groups
have signal): the checks are about the wiring.

What the generic trainer's step does for methods that need more than the token statistics:
SIREN's top-p entropy in the update forward (arXiv 2509.25133 §3) and AEPO's extra samples
at the controller's temperature (arXiv 2510.08141 §4).

A random (not warm-started) micro Llama on countdown: the checks are about which tensors the loss
sees, not about learning.

The trainer's update forward from the last hidden state (``TrainConfig.hidden_stats``): values
and gradients equal the logits path to float32 round-off, a whole step moves the weights the same
way, and no grad-enabled forward asks the LM head for logits.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

import entflow as ef
from entflow.core.nucleus import topp_entropy
from entflow.errors import CompositionError
from entflow.lab.config import LabConfig
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.setup import train_lab
from entflow.lab.tasks import get_task
from entflow.methods.needs import needs_of
from entflow.trainer import step as step_mod
from entflow.trainer.config import TrainConfig
from entflow.trainer.rollout import response_token_stats, sample_rollout
from entflow.trainer.step import train_step
from entflow.trainer.tokens import position_ids_from_mask
from support.lab_micro import metric_column, micro_run_config  # the micro_policy fixture is in conftest
from support.soft_capped import tiny_gemma2
from support.throwaway_methods import StrictOnPolicyMethod


def test_strict_on_policy_forces_one_gradient_step(tmp_path, micro_policy):
    run = train_lab(
        micro_run_config(tmp_path, micro_policy, name="s", strict_on_policy=True, ppo_epochs=3, mini_batches=4, steps=2)
    )
    assert metric_column(run, "update/optimizer_steps") == [1.0, 1.0]
    # r ≡ 1 on the single step: nothing is clipped at either bound
    assert metric_column(run, "clip/frac_high") == [0.0, 0.0] and metric_column(run, "clip/frac_low") == [0.0, 0.0]
    loose = train_lab(micro_run_config(tmp_path, micro_policy, name="l", ppo_epochs=2, mini_batches=2, steps=1))
    assert metric_column(loose, "update/optimizer_steps") == [4.0]


# --- the methods of other RL libraries through the step ---

MICRO = PolicyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)

CASES = [
    ("maxrl", {}, "maxrl/abs_mean"),
    ("asymre", {}, "asymre/baseline_mean"),
    ("topr", {"importance_sampling_level": "sequence"}, "topr/neg_weight_mean"),
    ("positive_nll", {}, "positive_nll/nll"),
    ("clipb", {"mu": 0.3}, "clipb/dropped_frac"),
    ("stare", {"variant": "C2", "target_entropy": 10.0}, "stare/plus_frac"),
]


@pytest.mark.parametrize(("name", "params", "key"), CASES, ids=[c[0] for c in CASES])
def test_a_trainer_step_runs_the_method(setup, name, params, key):
    task, tok, model = setup
    before = [p.detach().clone() for p in model.parameters()]
    cfg = make_cfg(name, method_params=params, ppo_epochs=2, mini_batches=2, random_reward=True, seed=3)
    method = ef.get_method(name, **params)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    metrics, _, _ = step_mod.train_step(model, tok, task, method, opt, cfg, step=1)
    assert key in metrics and metrics[key] == metrics[key]  # reported, and not NaN
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    if name == "clipb":
        assert metrics["clipb/dropped_frac"] > 0  # with μ = 0.3 some negative tokens leave the loss
    if name == "positive_nll":
        assert metrics["positive_nll/n_tokens"] > 0
    if name == "stare":
        assert metrics["stare/gate_on"] == 1.0 and metrics["stare/plus_frac"] > 0


# --- verl's and TRL's loss modes through the step ---

METHODS = {
    "geo_mean": ({}, "geo_mean/clip_frac"),
    "dppo_tv": ({}, "dppo_tv/masked_frac"),
    "dppo_kl": ({}, "dppo_kl/masked_frac"),
    "gpg": ({}, None),
    "dro": ({"dro_beta": 0.5}, "dro/log_ratio_sq_mean"),
    "vespo": ({}, "vespo/phi_mean"),
    "luspo": ({}, "luspo/clip_frac"),
    "off_policy_mask": ({"threshold": 1e-9}, "off_policy_mask/masked_frac"),
}


def one_step(method: ef.Method) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    task = get_task("countdown", validation_size=8)
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, MICRO, seed=0)
    cfg = TrainConfig(
        method=method.name, prompts_per_step=4, group_size=4, mini_batches=2, audit=False,
        temperature=1.0, lr=0.05, progress=False, dual_clip=3.0, random_reward=True,
    )  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    metrics, _, _ = step_mod.train_step(model, tok, task, method, opt, cfg, step=1)
    return metrics, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def grpo_step():
    return one_step(ef.get_method("grpo"))


@pytest.mark.parametrize("name", list(METHODS))
def test_loss_mode_runs_in_the_generic_step(name, grpo_step):
    params, key = METHODS[name]
    metrics, w = one_step(ef.get_method(name, **params))
    _, w_grpo = grpo_step
    assert math.isfinite(metrics["loss"])
    if key is not None:
        assert key in metrics and math.isfinite(metrics[key])
    w0 = build_policy(build_tokenizer(get_task("countdown", validation_size=8).alphabet), MICRO, seed=0).state_dict()
    assert any(not torch.equal(w_grpo[k], w0[k]) for k in w)  # GRPO's step moved the weights
    assert any(not torch.equal(w[k], w_grpo[k]) for k in w)  # the method changed the update


# --- methods that need more than the token statistics (SIREN's top-p entropy, AEPO's samples) ---


@pytest.fixture
def setup():
    task = get_task("countdown", validation_size=8)
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, MICRO, seed=0)
    return task, tok, model


def make_cfg(method: str, **kw) -> TrainConfig:
    base = dict(
        method=method,
        prompts_per_step=4,
        group_size=4,
        mini_batches=1,
        audit=False,
        temperature=0.9,
        lr=1e-3,
        progress=False,
    )
    base.update(kw)
    return TrainConfig(**base)


def full_forward_logits(model, prompt_ids, prompt_mask, response_ids) -> torch.Tensor:
    """Logits ``[N, T, V]`` predicting each response token, from one plain forward over the whole
    sequence (no ``logits_to_keep``): independent of ``response_logits``."""
    ids = torch.cat([prompt_ids, response_ids], 1)
    attn = torch.cat([prompt_mask, torch.ones_like(response_ids)], 1)
    logits = model(input_ids=ids, attention_mask=attn, position_ids=position_ids_from_mask(attn)).logits
    T = response_ids.shape[1]
    return logits[:, -T - 1 : -1]


class Spy:
    """Records what ``policy_update`` hands ``policy_loss``: the rows ``idx`` and the batch."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[torch.Tensor, ef.TokenBatch]] = []
        real = step_mod.mini_batch

        def spy(full, adv, idx, cur, topk_logp=None):
            b = real(full, adv, idx, cur, topk_logp)
            self.calls.append((idx.clone(), b))
            return b

        monkeypatch.setattr(step_mod, "mini_batch", spy)


# --------------------------------------------------------------------------------------------
# siren: the update forward's entropy is the top-p entropy
# --------------------------------------------------------------------------------------------


def test_siren_step_differentiates_the_top_p_entropy(setup, monkeypatch):
    task, tok, model = setup
    before = copy.deepcopy(model)
    spy = Spy(monkeypatch)
    cfg = make_cfg("siren", method_params={"top_p": 0.8})
    method = ef.get_method("siren", top_p=0.8)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    metrics, roll, _ = step_mod.train_step(model, tok, task, method, opt, cfg, step=1)

    ((idx, batch),) = spy.calls  # one epoch, one mini-batch, before any optimizer step
    assert batch.entropy is not None and batch.entropy.requires_grad  # the loss differentiates it
    with torch.no_grad():
        logits = full_forward_logits(before, **roll.select(idx))
        want = topp_entropy(logits, 0.8, cfg.temperature)
        full = ef.token_stats(logits, roll.response_ids[idx], temperature=cfg.temperature).entropy
    m = batch.mask.bool()
    assert torch.allclose(batch.entropy.detach()[m], want[m], rtol=1e-5, atol=1e-6)
    # and it is not the full entropy the trainer used to give (a random policy: nuclei ⊊ vocabulary)
    assert float((full - want)[m].abs().max()) > 1e-2
    assert metrics["siren/top_p"] == 0.8 and "siren/entropy" in metrics


def test_siren_with_top_p_one_uses_the_full_entropy(setup, monkeypatch):
    task, tok, model = setup
    before = copy.deepcopy(model)
    spy = Spy(monkeypatch)
    cfg = make_cfg("siren", method_params={"top_p": 1.0})
    assert needs_of(ef.get_method("siren", top_p=1.0)).entropy_top_p is None
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    _, roll, _ = step_mod.train_step(model, tok, task, ef.get_method("siren", top_p=1.0), opt, cfg, step=1)
    ((idx, batch),) = spy.calls
    with torch.no_grad():
        logits = full_forward_logits(before, **roll.select(idx))
        full = ef.token_stats(logits, roll.response_ids[idx], temperature=cfg.temperature).entropy
    m = batch.mask.bool()
    assert torch.allclose(batch.entropy.detach()[m], full[m], rtol=1e-5, atol=1e-6)


def test_siren_cannot_share_a_batch_entropy_with_a_full_entropy_term():
    with pytest.raises(CompositionError, match="top-p"):
        needs_of(ef.get_method("siren+entropy_bonus", top_p=0.8))
    assert needs_of(ef.get_method("siren+entropy_bonus", top_p=1.0)).entropy_top_p is None


# --------------------------------------------------------------------------------------------
# aepo: extra rows at the controller's temperature, appended to the update batch
# --------------------------------------------------------------------------------------------


def continuous_reward(problem, response: str) -> float:
    """Almost never ties within a group, so the temperature groups have rewarded responses."""
    return (response.count("1") + 0.5 * response.count("2") + 0.1 * len(response)) / (len(response) + 1)


class Recorder:
    """Records every ``generate`` call (prompts, n, temperature) and every ``policy_update``'s inputs."""

    def __init__(self, monkeypatch):
        from entflow.trainer import rollout as rollout_mod

        self.generations: list[tuple[int, int, float]] = []
        self.updates: list[tuple] = []
        real_generate, real_update = rollout_mod.generate, step_mod.policy_update

        def generate(model, tokenizer, prompts, max_new_tokens, **kw):
            self.generations.append((len(prompts), kw["n"], kw["temperature"]))
            return real_generate(model, tokenizer, prompts, max_new_tokens, **kw)

        def update(model, optimizer, rows, method, cfg, step, plan):
            self.updates.append((rows.collected.roll, rows.batch, rows.adv.clone()))
            return real_update(model, optimizer, rows, method, cfg, step, plan)

        monkeypatch.setattr(rollout_mod, "generate", generate)
        monkeypatch.setattr(step_mod, "policy_update", update)


def test_aepo_step_trains_on_rows_drawn_at_the_controllers_temperature(setup, monkeypatch):
    task, tok, model = setup
    task.reward = continuous_reward
    rec = Recorder(monkeypatch)
    cfg = make_cfg("aepo")
    m = ef.get_method("aepo", target=0.5, t_high=1.5, t_low=0.6, n_samples=3, prompt_fraction=0.5, alpha=0.7)
    before = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    metrics, roll, _ = step_mod.train_step(model, tok, task, m, opt, cfg, step=1)

    P, G, N = cfg.prompts_per_step, cfg.group_size, cfg.prompts_per_step * cfg.group_size
    # the regular rollout at the training temperature, then n_prompts(P) = 2 prompts at t_high (no entropy yet)
    assert rec.generations == [(P, G, 0.9), (2, G, 1.5)]
    ((roll_u, full_u, adv_u),) = rec.updates
    K = int(metrics["aepo/n_kept"])
    assert 0 < K <= 3 and roll_u.rewards.shape[0] == N + K
    assert metrics["aepo/temperature"] == 1.5
    # the extra rows: responses to the step's first two prompts, scored by the task, in their own groups
    assert set(roll_u.prompts[N:]) <= set(roll.prompts[: 2 * G])
    assert roll_u.rewards[N:].tolist() == pytest.approx([continuous_reward(None, t) for t in roll_u.texts[N:]])
    assert int(roll_u.group_index[N:].min()) >= P
    # REINFORCE advantage α on every valid token of a kept row; the rollout's rows unchanged
    valid = full_u.mask.bool()
    assert torch.equal(adv_u[N:][valid[N:]], torch.full_like(adv_u[N:][valid[N:]], 0.7))
    assert float(adv_u[N:][~valid[N:]].abs().sum()) == 0.0
    # old log-probs of every row (rollout and extra, with their padding) = the policy before the
    # update at the training temperature, from an independent full forward
    with torch.no_grad():
        logits = full_forward_logits(before, roll_u.prompt_ids, roll_u.prompt_mask, roll_u.response_ids)
        want = ef.token_stats(logits, roll_u.response_ids, temperature=cfg.temperature).logp
    assert torch.allclose(full_u.old_logp[valid], want[valid], rtol=1e-5, atol=1e-5)

    # entropy above target: the next step samples cold (t_low) and keeps at most n_samples // 2
    m.update({"entropy": 5.0})
    metrics2, _, _ = step_mod.train_step(model, tok, task, m, opt, cfg, step=2)
    assert rec.generations[-1] == (2, G, 0.6)
    assert metrics2["aepo/n_kept"] <= 1 and metrics2["aepo/temperature"] == 0.6


@pytest.mark.parametrize("method", ["grpo", "siren"])
def test_other_methods_draw_no_extra_samples(setup, monkeypatch, method):
    task, tok, model = setup
    rec = Recorder(monkeypatch)
    cfg = make_cfg(method)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    step_mod.train_step(model, tok, task, ef.get_method(method), opt, cfg, step=1)
    assert rec.generations == [(4, 4, 0.9)]
    ((roll_u, full_u, adv_u),) = rec.updates
    assert roll_u.rewards.shape[0] == 16 and adv_u.shape == full_u.mask.shape


# --------------------------------------------------------------------------------------------
# verl's estimators: optimal_token_baseline reads the rollout's Σπ²; remax is refused
# --------------------------------------------------------------------------------------------


def test_optimal_token_baseline_gets_the_rollout_sum_p2(setup, monkeypatch):
    task, tok, model = setup
    before = copy.deepcopy(model)
    seen: list[ef.TokenBatch] = []
    real = step_mod.compute_advantages

    def spy(batch, method, **kw):
        seen.append(batch)
        return real(batch, method, **kw)

    monkeypatch.setattr(step_mod, "compute_advantages", spy)
    cfg = make_cfg("optimal_token_baseline")
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    _, roll, _ = step_mod.train_step(model, tok, task, ef.get_method("optimal_token_baseline"), opt, cfg, step=1)
    (full,) = seen
    assert full.sum_p2 is not None and full.sum_p2_logp is None  # Σπ² only, not the tabular pair
    with torch.no_grad():  # Σπ² of the rollout policy at the sampling temperature, from an independent forward
        logits = full_forward_logits(before, roll.prompt_ids, roll.prompt_mask, roll.response_ids)
        want = (torch.softmax(logits.double() / cfg.temperature, -1) ** 2).sum(-1)
    m = full.mask.bool()
    assert torch.allclose(full.sum_p2.double()[m], want[m], rtol=1e-4, atol=1e-5)


def test_remax_is_refused_by_the_generic_trainer():
    from entflow.errors import ConfigError
    from entflow.trainer.loop import _start_state

    with pytest.raises(ConfigError, match=r"method.*remax.*greedy response"):
        _start_state(None, make_cfg("remax"), resume=False, method=ef.get_method("remax"))


def test_simko_step_gives_the_loss_the_top_k_log_probs(setup, monkeypatch):
    task, tok, model = setup
    before = copy.deepcopy(model)
    spy = Spy(monkeypatch)
    cfg = make_cfg("simko")
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    metrics, roll, _ = step_mod.train_step(model, tok, task, ef.get_method("simko"), opt, cfg, step=1)
    ((idx, batch),) = spy.calls
    assert batch.topk_logp is not None and batch.topk_logp.requires_grad and batch.topk_logp.shape[-1] == 3
    with torch.no_grad():
        logits = full_forward_logits(before, **roll.select(idx))
        want = torch.log_softmax(logits.double() / cfg.temperature, -1).sort(-1, descending=True).values[..., :3]
    m = batch.mask.bool()
    assert torch.allclose(batch.topk_logp.detach().double()[m], want[m], rtol=1e-5, atol=1e-5)
    assert "simko/high_entropy_frac" in metrics and 0 < metrics["simko/high_entropy_frac"] < 1


# --------------------------------------------------------------------------------------------
# the run's plan: the method's needs are read once per run, strictly on-policy decided in one place
# --------------------------------------------------------------------------------------------


def test_a_step_given_the_runs_plan_reads_no_needs(setup, monkeypatch):
    task, tok, model = setup
    task.reward = continuous_reward
    cfg = make_cfg("aepo")
    m = ef.get_method("aepo", target=0.5, n_samples=3, prompt_fraction=0.5)
    plan = step_mod.plan_steps(m, cfg)
    calls = []

    def counted(*args, **kw):
        calls.append(args)
        return needs_of(*args, **kw)

    monkeypatch.setattr(step_mod, "needs_of", counted)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    for step in (1, 2):
        metrics, _, timings = step_mod.train_step(model, tok, task, m, opt, cfg, step=step, plan=plan)
    assert calls == [] and metrics["aepo/n_kept"] >= 0
    # each timer times one part of the step; the reward's scoring is part of the rollout's time
    assert {"time/rollout_s", "time/old_stats_s", "time/advantages_s", "time/temperature_samples_s"} <= set(timings)
    assert timings["time/verify_s"] <= timings["time/rollout_s"]
    step_mod.train_step(model, tok, task, m, opt, cfg, step=3)  # without a plan: made for this call
    assert len(calls) == 2  # needs_of(method) and needs_of(method, ESTIMATORS), once


@pytest.mark.parametrize(
    "strict, method, passes",
    [(False, None, (3, 2)), (True, None, (1, 1)), (False, StrictOnPolicyMethod, (1, 1))],
)
def test_strictly_on_policy_is_one_pass_of_one_step(strict, method, passes):
    cfg = make_cfg("grpo", ppo_epochs=3, mini_batches=2, strict_on_policy=strict)
    assert (cfg.ppo_epochs, cfg.mini_batches) == (3, 2)  # the config keeps what was asked
    m = ef.get_method("grpo") if method is None else method()
    plan = step_mod.plan_steps(m, cfg)
    assert (plan.epochs, plan.mini_batches) == passes == step_mod.update_passes(cfg, needs_of(m))


def test_the_step_names_no_method():
    """trainer/step.py is generic: no registered method's name appears in it (GRPO, the base
    algorithm every method modifies, aside)."""
    import re
    from pathlib import Path

    text = Path(step_mod.__file__).read_text().lower()
    named = [n for n in ef.list_methods() if n != "grpo" and re.search(rf"\b{re.escape(n.lower())}\b", text)]
    assert named == []


# --- the update forward from the last hidden state (TrainConfig.hidden_stats) ---

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
