"""entflow inside TRL's GRPOTrainer: equivalence with TRL, end-to-end training with
methods, the loss against ``ef.policy_loss`` on the same tensors, checkpoints, bad input.

A tiny Llama (2 layers, hidden 32, character vocabulary) is built in-process and saved to a
temporary directory; TRL generates on CPU with ``transformers``' ``generate`` (no vLLM, no hub).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("trl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoModelForCausalLM, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

import entflow as ef
from entflow.errors import ConfigError
from entflow.integrations.trl import STATE_FILE, EntflowGRPOConfig, EntflowGRPOTrainer
from support.gloo import free_port
from support.trl_capture import CapturingTrainer, captured_stats, recording, rel, rewards_and_groups, trl_args
from support.trl_tiny import continuous_reward

reward_ones = continuous_reward


def base_args(out, **kw):
    """The equivalence tests' keywords: 2 micro-batches of 4 (tests/support/trl_capture.py's rest)."""
    return trl_args(out, **{"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, **kw})


def weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def initial_weights(path) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}


# --------------------------------------------------------------------------------------------
# (1) equivalence: EntflowGRPOTrainer with grpo == TRL's GRPOTrainer
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        dict(loss_type="dapo"),
        dict(loss_type="grpo"),
        dict(loss_type="dr_grpo"),
        # two passes over the batch: TRL computes old log-probs, ratios move off 1, the clip acts
        dict(loss_type="dapo", num_iterations=2, max_steps=2, epsilon_high=0.28, learning_rate=2.0),
    ],
    ids=["dapo", "grpo", "dr_grpo", "dapo-2iter-clip"],
)
def test_grpo_matches_trl(tiny, tmp_path, case):
    path, tok, data = tiny
    w0 = initial_weights(path)
    runs = {}
    for name, trainer_cls, cfg_cls, extra in (
        ("trl", GRPOTrainer, GRPOConfig, {}),
        ("entflow", EntflowGRPOTrainer, EntflowGRPOConfig, {"entflow_method": "grpo"}),
    ):
        args = cfg_cls(**base_args(tmp_path / name, **case), **extra)
        trainer = trainer_cls(model=path, reward_funcs=reward_ones, args=args, train_dataset=data, processing_class=tok)
        trainer.train()
        runs[name] = (weights(trainer), list(trainer._logs["completion"]), trainer.state.log_history)
    (w_trl, c_trl, h_trl), (w_ef, c_ef, h_ef) = runs["trl"], runs["entflow"]
    assert c_trl == c_ef and len(c_trl) > 0  # same generations: the comparison is like for like
    assert len({len(c) for c in c_trl}) > 1  # lengths differ, so the three normalisers differ
    for k in w_trl:
        delta_trl, delta_ef = w_trl[k] - w0[k], w_ef[k] - w0[k]
        if delta_trl.norm() == 0:  # e.g. embeddings of tokens never seen
            assert delta_ef.norm() == 0, k
            continue
        assert rel(w_ef[k], w_trl[k]) <= 1e-6, k  # acceptance: updated weights to 1e-6 relative
        assert rel(delta_ef, delta_trl) <= 1e-4, k  # stronger: the update itself (float32 round-off)
    moved = sum(float((w_trl[k] - w0[k]).norm()) for k in w_trl)
    assert moved > 1e-3  # the step did something
    if "epsilon_high" in case:  # the clip was exercised in at least one logged step
        clipped = [h.get("clip_ratio/region_mean", 0) for h in h_trl if "loss" in h]
        assert max(clipped) > 0
        ours = [h.get("clip_ratio/region_mean", 0) for h in h_ef if "loss" in h]
        assert ours == pytest.approx(clipped, rel=1e-5, abs=1e-7)


def test_global_statistics_equal_one_full_batch(tiny, tmp_path):
    """Gradient accumulation with global statistics gives the update of one micro-batch holding
    the whole batch (STEER's max|Ω|, Clip-Cov's means and draws over all 8 completions); per
    micro-batch statistics do not."""
    path, tok, data = tiny
    w0 = initial_weights(path)
    method = dict(
        entflow_method="steer+clip_cov",
        entflow_method_params={"lambda_min": 0.3, "ratio": 0.1, "cov_low": -1e6, "cov_high": 1e6},
    )
    deltas = {}
    for name, kw in (
        ("full", dict(per_device_train_batch_size=8, gradient_accumulation_steps=1)),
        ("global", dict(per_device_train_batch_size=4, gradient_accumulation_steps=2)),
        ("per_call", dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, entflow_global_stats=False)),
    ):
        args = EntflowGRPOConfig(
            **base_args(tmp_path / name, **{k: v for k, v in kw.items() if k.startswith(("per", "grad"))}),
            **method,
            **{k: v for k, v in kw.items() if k.startswith("entflow")},
        )
        trainer = EntflowGRPOTrainer(
            model=path, reward_funcs=reward_ones, args=args, train_dataset=data, processing_class=tok
        )
        trainer.train()
        w = weights(trainer)
        deltas[name] = torch.cat([(w[k] - w0[k]).flatten() for k in sorted(w)])
        assert trainer.state.log_history[0]["clip_cov/n_selected"] > 0
    assert rel(deltas["global"], deltas["full"]) <= 1e-5
    assert rel(deltas["per_call"], deltas["full"]) > 1e-3  # the test can tell the two modes apart


def test_two_processes_equal_one_process_on_the_whole_batch(tiny, tmp_path):
    """Two CPU processes (gloo DDP) × gradient accumulation 2 with global statistics make the
    update of ONE process computing ef.policy_loss on all four micro-batches at once (STEER's
    max|Ω| and Clip-Cov's means and draws over every completion of both ranks)."""
    path = tiny[0]
    method, params = "steer+clip_cov", {"lambda_min": 0.3, "ratio": 0.1, "cov_low": -1e6, "cov_high": 1e6}
    worker = Path(__file__).parents[1] / "support" / "trl_ddp_worker.py"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}"]
    cmd += [str(worker), path, str(tmp_path), method, json.dumps(params)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    r0 = torch.load(tmp_path / "rank0.pt", weights_only=False)
    r1 = torch.load(tmp_path / "rank1.pt", weights_only=False)
    assert r0["world"] == 2 and len(r0["seen"]) == len(r1["seen"]) == 2
    for k in r0["weights"]:
        assert torch.equal(r0["weights"][k], r1["weights"][k]), k  # the ranks stayed in sync

    # independent reference: one process, one batch = rank 0's micro-batches then rank 1's
    model = AutoModelForCausalLM.from_pretrained(path)
    micro = r0["seen"] + r1["seen"]
    T = max(mb["completion_ids"].shape[1] for mb in micro)
    logps, ents, masks, advs = [], [], [], []
    for mb in micro:
        t = mb["completion_ids"].shape[1]
        ids = torch.cat([mb["prompt_ids"], mb["completion_ids"]], 1)
        attn = torch.cat([mb["prompt_mask"], mb["completion_mask"]], 1)
        st = ef.token_stats(model(input_ids=ids, attention_mask=attn).logits[:, -t - 1 : -1], mb["completion_ids"])
        pad = (0, T - t)
        logps.append(torch.nn.functional.pad(st.logp, pad))
        ents.append(torch.nn.functional.pad(st.entropy, pad))
        masks.append(torch.nn.functional.pad(mb["completion_mask"], pad))
        advs.append(torch.nn.functional.pad(mb["advantages"], pad))
    logp, H = torch.cat(logps), torch.cat(ents)
    batch = ef.TokenBatch(logp, logp.detach(), torch.cat(advs), torch.cat(masks), entropy=H, old_entropy=H.detach())
    m = ef.get_method(method, **params)
    m.set_rank(0)
    out = ef.policy_loss(batch, m)
    assert out.metrics["clip_cov/n_selected"] > 0 and out.metrics["steer/weight_min"] < 1
    out.loss.backward()
    w0 = initial_weights(path)
    for name, p in model.named_parameters():
        if p.grad is None or p.grad.norm() == 0:
            continue
        expected = w0[name] - 0.5 * p.grad  # SGD, lr 0.5
        assert rel(r0["weights"][name] - w0[name], expected - w0[name]) <= 1e-4, name


# --------------------------------------------------------------------------------------------
# (2) end to end with methods: weights change, metrics logged, save + resume restores state
# --------------------------------------------------------------------------------------------

METHODS = [
    ("steer", {}, "steer/weight_mean"),
    ("clip_cov", {"ratio": 0.2, "cov_low": -1e6, "cov_high": 1e6, "seed": 3}, "clip_cov/n_selected"),
    ("adaptive_entropy", {"target": 50.0, "delta": 1e-3}, "adaptive_entropy/coef"),
    # two iterations per generation: KL-Cov acts once the policy has moved; TRL computes old
    # log-probs (the adapter takes the rollout entropy from that pass) and the second optimizer
    # step's global statistics need a fresh no-grad forward
    ("clip_higher+kl_cov", {"ratio": 0.1}, "kl_cov/n_selected"),
]
EXTRA = {"clip_higher+kl_cov": {"num_iterations": 2}}


class _Snapshots(TrainerCallback):
    """Records the method state at each save (what the checkpoint must hold)."""

    def __init__(self):
        self.trainer = None
        self.at_save: dict[int, dict] = {}

    def on_save(self, args, state, control, **kwargs):
        self.at_save[state.global_step] = copy.deepcopy(self.trainer.entflow_state_dict())


class _RecordingResume(EntflowGRPOTrainer):
    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        self.loaded_state = copy.deepcopy(self.entflow_state_dict())


def _assert_same_state(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same_state(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    else:
        assert a == b


@pytest.mark.parametrize("method,params,metric", METHODS, ids=[m[0] for m in METHODS])
def test_methods_train_log_and_resume(tiny, tmp_path, method, params, metric):
    path, tok, data = tiny
    w0 = initial_weights(path)
    common = base_args(
        tmp_path / "run",
        max_steps=3,
        save_strategy="steps",
        save_steps=2,
        learning_rate=0.05,
        entflow_method=method,
        entflow_method_params=params,
        **EXTRA.get(method, {}),
    )
    snaps = _Snapshots()
    trainer = EntflowGRPOTrainer(
        model=path,
        reward_funcs=reward_ones,
        args=EntflowGRPOConfig(**common),
        train_dataset=data,
        processing_class=tok,
        callbacks=[snaps],
    )
    snaps.trainer = trainer
    trainer.train()
    w = weights(trainer)
    assert sum(float((w[k] - w0[k]).norm()) for k in w) > 1e-4  # the weights moved
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logged) == 3
    assert all(metric in h for h in logged), metric  # the method's own metric reaches TRL's log
    assert all(k in logged[0] for k in ("entropy", "flow/lambda_star", "quadrant/II/frac", "clip_ratio/high_mean"))
    final = copy.deepcopy(trainer.entflow_state_dict())
    n_gen = 3 * 2 // (2 * common.get("num_iterations", 1))  # micro-steps / (steps_per_generation × iterations)
    assert final["gen_step"] == n_gen  # update() once per generation step
    if method == "adaptive_entropy":  # entropy (≈3 nats) < target: the coefficient grew every step
        assert final["method_state"]["coef"] == pytest.approx(3e-3)
        assert [h["adaptive_entropy/coef"] for h in logged] == pytest.approx([0.0, 1e-3, 2e-3])
    if method == "clip_higher+kl_cov":  # first iteration: |Δlogp| = 0; second: the KL-Cov penalty is on
        assert logged[0]["kl_cov/kl_mean"] == 0.0 and logged[1]["kl_cov/kl_mean"] > 0.0
    if method == "clip_cov":  # tokens were drawn: the generator advanced
        assert any(h["clip_cov/n_selected"] > 0 for h in logged)
        streams = final["method_state"]["generator"]
        assert list(streams) == ["shared"]  # gradient accumulation 2: global statistics, one shared stream
        start = ef.get_method("clip_cov", **params).generator("cpu", shared=True).get_state()
        assert not torch.equal(streams["shared"]["state"], start)

    ckpt = tmp_path / "run" / "checkpoint-2"
    assert (ckpt / STATE_FILE).exists()
    _assert_same_state(torch.load(ckpt / STATE_FILE, weights_only=True), snaps.at_save[2])
    resumed = _RecordingResume(
        model=path,
        reward_funcs=reward_ones,
        args=EntflowGRPOConfig(**{**common, "output_dir": str(tmp_path / "resumed")}),
        train_dataset=data,
        processing_class=tok,
    )
    resumed.train(resume_from_checkpoint=str(ckpt))
    _assert_same_state(resumed.loaded_state, snaps.at_save[2])  # state restored exactly
    assert resumed.entflow_state_dict()["gen_step"] == n_gen


# --------------------------------------------------------------------------------------------
# (3) the trainer's loss is ef.policy_loss on the tensors TRL produced
# --------------------------------------------------------------------------------------------


def test_composed_loss_equals_policy_loss(tiny, tmp_path):
    path, tok, data = tiny
    # entropy_advantage reads the rollout entropy at advantage time and the tabular estimator needs
    # Σπ², Σπ² log π: both come from the trainer's rollout pass (one per generation batch)
    method = "entropy_advantage+clip_higher+steer+entropy_bonus"
    params = {"alpha": 0.05, "lambda_min": 0.5, "estimator": "tabular", "c": 0.01}
    args = EntflowGRPOConfig(
        **base_args(tmp_path, gradient_accumulation_steps=1, per_device_train_batch_size=8, temperature=0.7),
        entflow_method=method,
        entflow_method_params=params,
    )
    seen: dict[str, float] = {}
    reward = recording(reward_ones, seen)
    trainer = CapturingTrainer(model=path, reward_funcs=reward, args=args, train_dataset=data, processing_class=tok)
    trainer.train()
    x = trainer.captured_inputs
    # independent forward: plain logits from transformers, then entflow's token_stats
    stats = captured_stats(trainer, path, temperature=0.7)
    mask = x["completion_mask"]
    # independent advantages: rewards by completion text, groups = identical prompts
    rewards, group = rewards_and_groups(trainer, tok, seen)
    m = ef.get_method(method, **params)
    H = stats.entropy.detach()
    probe = ef.TokenBatch(
        stats.logp.detach(), stats.logp.detach(), None, mask, old_entropy=H, rewards=rewards, group_index=group
    )
    adv = ef.compute_advantages(probe, m, scale="group", eps=1e-4)
    assert torch.allclose(adv, x["advantages"], rtol=1e-5, atol=1e-6)
    assert torch.allclose(x["ef_sum_p2"], stats.sum_p2.detach(), rtol=1e-5, atol=1e-6)
    batch = ef.TokenBatch(
        stats.logp,
        stats.logp.detach(),
        adv,
        mask,
        entropy=stats.entropy,
        old_entropy=H,
        sum_p2=stats.sum_p2.detach(),
        sum_p2_logp=stats.sum_p2_logp.detach(),
    )
    out = ef.policy_loss(batch, m, ef.LossSpec(agg="token-mean"))
    # GA = 1, one process, dapo: TRL's normaliser is this micro-batch's token count → the token mean
    assert float(trainer.captured_loss) == pytest.approx(float(out.loss.detach()), rel=1e-6, abs=1e-7)
    assert out.metrics["steer/weight_min"] < 1.0 and out.metrics["entropy_bonus/loss"] != 0.0
    assert out.metrics["entropy_advantage/bonus_mean"] > 0


# --------------------------------------------------------------------------------------------
# (5) bad input fails at construction, naming the field
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(entflow_method="no_such_method"), "entflow_method"),
        (dict(entflow_method="steer", entflow_method_params={"lambda_min": 2.0}), "lambda_min"),
        (dict(entflow_method="steer", entflow_method_params={"lambda_mn": 0.5}), "lambda_mn"),
        (dict(entflow_method="steer", entflow_method_params="{not json"), "entflow_method_params"),
        (dict(entflow_method="steer+steer"), "entflow_method"),
        # TRL options another method cannot meet (with grpo, TRL computes the update: nothing refused)
        (dict(entflow_method="steer", loss_type="cispo"), "loss_type"),
        (dict(entflow_method="steer", beta=0.04), "beta"),
        (dict(entflow_method="kl_ref", use_bias_correction_kl=True), "use_bias_correction_kl"),  # TRL < 1.10: False
        (dict(entflow_method="clip_higher", epsilon_high=0.3), "epsilon_high"),
        (dict(entflow_method="steer", delta=1.1), "delta"),
        (dict(entflow_method="steer", importance_sampling_level="sequence"), "importance_sampling_level"),
    ],
)
def test_bad_input_names_the_field(tmp_path, kw, field):
    with pytest.raises(ConfigError, match=field):
        EntflowGRPOConfig(**base_args(tmp_path), **kw)


def test_bad_input_fails_before_loading_anything(tmp_path):
    args = EntflowGRPOConfig(**base_args(tmp_path), entflow_method="steer")
    args.entflow_method = "steer+no_such_method"  # changed after the config was validated
    with pytest.raises(ConfigError, match="entflow_method"):  # not an OSError about the missing model
        EntflowGRPOTrainer(model=str(tmp_path / "missing"), reward_funcs=reward_ones, args=args)
    with pytest.raises(ConfigError, match="args"):  # neither GRPOConfig nor EntflowGRPOConfig
        EntflowGRPOTrainer(model=str(tmp_path / "missing"), reward_funcs=reward_ones, args=base_args(tmp_path))


def test_kl_ref_sets_trl_beta(tmp_path):
    args = EntflowGRPOConfig(
        **base_args(tmp_path),
        entflow_method="steer+kl_ref",
        entflow_method_params={"beta": 0.02},
        use_bias_correction_kl=False,
    )
    assert args.beta == 0.02  # TRL then loads the reference model and passes ref_per_token_logps


def test_vllm_importance_ratio_is_a_token_weight(gen):
    """TRL multiplies each token's PPO term by the vLLM importance ratio ρ (not the extra terms);
    the adapter passes it as policy_loss's token_weights. Checked against the hand formula."""
    from entflow.core.ppo import ppo_clip_loss
    from entflow.integrations.trl.loss import trl_loss

    N, T = 6, 5
    old = -torch.rand(N, T, generator=gen) * 3
    logp = (old + 0.3 * torch.randn(N, T, generator=gen)).requires_grad_()
    adv = torch.randn(N, generator=gen).unsqueeze(1).expand(N, T).contiguous()
    mask = (torch.rand(N, T, generator=gen) > 0.2).float()
    H = torch.rand(N, T, generator=gen) * 2
    rho = torch.rand(N, 1, generator=gen) * 2  # sequence-level ratio, broadcast over tokens
    steer = ef.get_method("steer", lambda_min=0.5)
    batch = ef.TokenBatch(logp, old, adv, mask, entropy=H, old_entropy=H, ref_logp=old)
    plain = ef.policy_loss(batch, steer)
    steer_kl = ef.get_method("steer+kl_ref", lambda_min=0.5, beta=0.1)
    _, out = trl_loss(batch, steer_kl, ef.LossSpec(), 1.0, token_weights=rho)
    assert torch.allclose(out.token_weights, plain.token_weights * rho.expand(N, T) * mask)
    ell = ppo_clip_loss(adv, torch.exp(logp - old), 0.2, 0.2)
    d = old - logp
    k3 = torch.exp(d) - d - 1
    expected = ((plain.token_weights * rho * ell + 0.1 * k3) * mask).sum() / mask.sum()
    assert float(out.loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-6)


# --------------------------------------------------------------------------------------------
# (6) what the adapter computes comes from the method's MethodNeeds
# --------------------------------------------------------------------------------------------


def _completion_entropy(model, inputs) -> torch.Tensor:
    """Entropy [B, T] of the policy at each completion token, from one plain forward (temperature 1)."""
    P = inputs["prompt_ids"].shape[1]
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=att).logits[:, P - 1 : -1].double()
    logpi = torch.log_softmax(logits, -1)
    return -(logpi.exp() * logpi).sum(-1)


def test_a_new_shaper_gets_the_rollout_entropy_from_its_declaration(tiny, tmp_path):
    """A method declaring ``advantage_needs = ("old_entropy",)`` gets the rollout entropy before its
    advantages although TRL computes no old log-probs here (one pass per generation); the same
    shaper without the declaration gets none. The adapter names no method: only MethodNeeds."""
    from support.throwaway_methods import RolloutEntropyShaper, UndeclaredEntropyShaper, registered

    path, tok, data = tiny
    RolloutEntropyShaper.seen.clear()
    with registered(RolloutEntropyShaper), registered(UndeclaredEntropyShaper):
        args = base_args(tmp_path / "a", learning_rate=0.0, entflow_method="test_rollout_entropy_shaper")
        trainer = EntflowGRPOTrainer(
            model=path, reward_funcs=reward_ones, args=EntflowGRPOConfig(**args), train_dataset=data,
            processing_class=tok,
        )  # fmt: skip
        assert not trainer._ef_trl_old_logps
        trainer.train()
        (seen, seen_mask), *more = RolloutEntropyShaper.seen
        assert not more  # one generation batch
        model = AutoModelForCausalLM.from_pretrained(path)  # lr = 0: the rollout policy
        rows = []
        for inputs in trainer._buffered_inputs:
            m = inputs["completion_mask"].bool()
            expected = _completion_entropy(model, inputs)
            assert torch.allclose(inputs["ef_old_entropy"].double()[m], expected[m], atol=1e-5)
            rows.append(inputs["ef_old_entropy"].double() * m)
        rows = torch.cat(rows)
        got = seen.double() * seen_mask
        assert got.shape == rows.shape
        for row in rows:  # the shaper saw those rows (TRL shuffles them after the advantages)
            assert float((got - row).abs().amax(-1).min()) < 1e-6

        args = base_args(tmp_path / "b", learning_rate=0.0, entflow_method="test_undeclared_entropy_shaper")
        trainer = EntflowGRPOTrainer(
            model=path, reward_funcs=reward_ones, args=EntflowGRPOConfig(**args), train_dataset=data,
            processing_class=tok,
        )  # fmt: skip
        with pytest.raises(ef.MissingInputError, match="old_entropy"):
            trainer.train()


def test_a_method_reading_reference_logps_without_kl_ref_gets_the_reference(tmp_path):
    """TRL computes reference log-probs only when its ``beta`` ≠ 0: a method declaring
    ``needs = ("ref_logp",)`` without ``kl_ref`` gets ``REFERENCE_ONLY_BETA`` (TRL's own KL term is
    in the loss the adapter replaces); a beta the user sets for it is refused, naming ``beta``."""
    from entflow.integrations.trl.config import REFERENCE_ONLY_BETA
    from support.throwaway_methods import ReferenceReader, registered

    with registered(ReferenceReader):
        args = EntflowGRPOConfig(**base_args(tmp_path), entflow_method="test_reference_reader")
        assert args.beta == REFERENCE_ONLY_BETA != 0.0
        with pytest.raises(ConfigError, match=r"'beta'.*own KL"):
            EntflowGRPOConfig(**base_args(tmp_path), entflow_method="test_reference_reader", beta=0.04)
        args = EntflowGRPOConfig(
            **base_args(tmp_path), entflow_method="test_reference_reader+kl_ref", use_bias_correction_kl=False
        )
        assert args.beta == ef.get_method("kl_ref").beta  # with kl_ref, TRL's beta is kl_ref's


def test_a_strict_on_policy_method_refuses_several_updates_per_generation(tmp_path):
    from support.throwaway_methods import StrictOnPolicyMethod, registered

    with registered(StrictOnPolicyMethod):
        EntflowGRPOConfig(**base_args(tmp_path), entflow_method="test_strict_on_policy")  # one update: accepted
        with pytest.raises(ConfigError, match="num_iterations"):
            EntflowGRPOConfig(**base_args(tmp_path), entflow_method="test_strict_on_policy", num_iterations=2)
        with pytest.raises(ConfigError, match="steps_per_generation"):
            EntflowGRPOConfig(**base_args(tmp_path), entflow_method="test_strict_on_policy", steps_per_generation=4)
