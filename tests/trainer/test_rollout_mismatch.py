"""An injected rollout–training mismatch in the lab (``TrainConfig.rollout_mismatch``,
trainer/rollout.py ``SamplingMismatch``) and the sampler's log-probs it gives the batch
(``rollout_logp``, trainer/collect.py), and the step's ``mismatch/*`` metrics (trainer/step.py).

- the sampler draws from the perturbed law: with ``temperature`` × 2 the tokens are exactly those
  of ``generate`` at temperature 2 under the same seed; with a coarse ``quantize`` grid (all logits
  round to 0) the first tokens are uniform;
- ``rollout_logp`` is the drawn tokens' log-probability under that law and ``old_logp`` under the
  trainer's, both against an independent float64 softmax of a separate full forward's logits;
- without a mismatch the sampler's law is the trainer's (``rollout_logp`` = ``old_logp``), so a
  correction changes nothing: ``grpo+tis`` trains exactly as ``grpo``;
- with one, the metrics are there and consistent (k3 KL over kept tokens lower when IcePop
  removes some, the removed shares per entropy quartile averaging to the overall share);
- the config key is checked, named in its errors, and left out of ``config.yaml`` while null.
"""

from __future__ import annotations

import math

import pytest
import torch

from entflow.errors import ConfigError
from entflow.lab.config import LabConfig, build_config
from entflow.lab.pretrain import load_policy
from entflow.lab.setup import train_lab
from entflow.lab.tasks import get_task
from entflow.trainer.collect import collect_rollout
from entflow.trainer.rollout import SamplingMismatch, generate, response_logits
from support.lab_micro import TASK_PARAMS, metric_column, micro_run_config

D = torch.float64


@pytest.fixture(scope="module")
def micro(micro_policy):
    model, tok = load_policy(micro_policy)
    model.eval()
    return model, tok


def test_the_sampler_draws_from_the_perturbed_law(micro):
    model, tok = micro
    prompts = ["12+7=", "3*4+1="]
    torch.manual_seed(5)
    a = generate(
        model, tok, prompts, 6, n=8, temperature=1.0, mismatch=SamplingMismatch("temperature", 2.0), output_logits=True
    )
    torch.manual_seed(5)
    b = generate(model, tok, prompts, 6, n=8, temperature=2.0)
    assert torch.equal(a.response_ids, b.response_ids)
    torch.manual_seed(5)
    c = generate(model, tok, prompts, 6, n=8, temperature=1.0, output_logits=True)
    assert not torch.equal(a.response_ids, c.response_ids)  # the perturbation changed the draws
    # the raw logits generate keeps are the model's, not the perturbed ones
    torch.testing.assert_close(a.logits[:, 0], c.logits[:, 0])


def test_a_coarse_quantisation_grid_samples_uniformly(micro):
    model, tok = micro
    torch.manual_seed(0)
    g = generate(model, tok, ["12+7="], 1, n=4000, mismatch=SamplingMismatch("quantize", 1e4), output_logits=True)
    first = g.response_ids[:, 0]
    vocab = g.logits.shape[-1]
    freq = torch.bincount(first, minlength=vocab).to(D) / first.numel()
    trainer = torch.softmax(g.logits[0, 0].to(D), -1)
    tv_uniform = 0.5 * float((freq - 1.0 / vocab).abs().sum())
    tv_trainer = 0.5 * float((freq - trainer).abs().sum())
    assert tv_uniform < 0.05 < tv_trainer  # drawn from the grid's (uniform) law, not the model's


@pytest.mark.parametrize(
    "mismatch", [{"kind": "temperature", "value": 1.7}, {"kind": "quantize", "value": 0.75}, None], ids=str
)
def test_rollout_logp_and_old_logp_against_a_float64_softmax(micro, mismatch):
    model, tok = micro
    cfg = LabConfig(prompts_per_step=3, group_size=4, temperature=0.9, seed=2, rollout_mismatch=mismatch)
    task = get_task("countdown", **TASK_PARAMS)
    torch.manual_seed(1)
    col = collect_rollout(model, tok, task, cfg, 1, ("logp", "entropy"), with_sampler_logp=True)
    roll = col.roll
    with torch.no_grad():
        z = response_logits(model, roll.prompt_ids, roll.prompt_mask, roll.response_ids).to(D)
    if mismatch is None:
        engine = z
    elif mismatch["kind"] == "temperature":
        engine = z / mismatch["value"]
    else:
        engine = torch.round(z / mismatch["value"]) * mismatch["value"]
    ids = roll.response_ids.unsqueeze(-1)
    want_old = torch.log_softmax(z / cfg.temperature, -1).gather(-1, ids)[..., 0]
    want_roll = torch.log_softmax(engine / cfg.temperature, -1).gather(-1, ids)[..., 0]
    valid = roll.mask.bool()
    torch.testing.assert_close(col.old.logp.to(D)[valid], want_old[valid], rtol=0, atol=2e-4)
    if mismatch is not None and mismatch["kind"] == "quantize":
        # rounding is discontinuous: a logit within float32 noise of a grid midpoint may round apart
        near = ((z / mismatch["value"]).frac().abs() - 0.5).abs().lt(1e-4).any(-1)
        valid = valid & ~near
    torch.testing.assert_close(col.rollout_logp.to(D)[valid], want_roll[valid], rtol=0, atol=2e-4)
    if mismatch is None:
        assert torch.equal(col.rollout_logp, col.old.logp)  # the trainer's own law
    else:
        assert float((col.rollout_logp - col.old.logp)[valid].abs().max()) > 1e-2


def test_without_a_mismatch_a_correction_changes_nothing(tmp_path, micro_policy):
    runs = {}
    for method in ("grpo", "grpo+tis"):
        cfg = micro_run_config(tmp_path, micro_policy, method=method, name=method.replace("+", "_"))
        train_lab(cfg)
        runs[method] = cfg.run_dir
    for key in ("loss", "pg_loss", "reward/mean", "entropy", "grad_norm"):
        assert metric_column(runs["grpo"], key) == metric_column(runs["grpo+tis"], key), key
    assert metric_column(runs["grpo+tis"], "tis/mean") == [1.0, 1.0, 1.0]
    assert metric_column(runs["grpo+tis"], "mismatch/k3_kl") == [0.0, 0.0, 0.0]


def test_a_run_under_a_mismatch_reports_it(tmp_path, micro_policy):
    mm = {"kind": "temperature", "value": 1.6}
    grpo = micro_run_config(tmp_path, micro_policy, name="grpo", rollout_mismatch=mm)
    ice = micro_run_config(
        tmp_path, micro_policy, method="grpo+icepop", name="ice", rollout_mismatch=mm,
        method_params={"lower": 0.9, "upper": 1.1},
    )  # fmt: skip
    for cfg in (grpo, ice):
        train_lab(cfg)
    assert "rollout_mismatch" in (grpo.run_dir / "config.yaml").read_text()
    k3 = metric_column(grpo.run_dir, "mismatch/k3_kl")
    assert all(v > 0 for v in k3)
    assert metric_column(grpo.run_dir, "mismatch/k3_kl_kept") == k3  # grpo keeps every token
    assert metric_column(grpo.run_dir, "mismatch/removed_frac") == [0.0, 0.0, 0.0]
    kept, total = metric_column(ice.run_dir, "mismatch/k3_kl_kept"), metric_column(ice.run_dir, "mismatch/k3_kl")
    removed = metric_column(ice.run_dir, "mismatch/removed_frac")
    assert all(r > 0 for r in removed) and all(k < t for k, t in zip(kept, total, strict=True))
    for step, r in enumerate(removed):  # quartiles of (near) equal size: their shares average to the whole
        q = [metric_column(ice.run_dir, f"mismatch/removed_frac_q{i}")[step] for i in range(1, 5)]
        assert abs(sum(q) / 4 - r) < 0.05
    masked = metric_column(ice.run_dir, "icepop/oob_ratio")
    assert all(m > 0 for m in masked)
    ratio = metric_column(grpo.run_dir, "mismatch/kl_ent_ratio")
    assert all(
        math.isclose(x, k / h, rel_tol=1e-6)
        for x, k, h in zip(ratio, k3, metric_column(grpo.run_dir, "entropy"), strict=True)
    )


def test_the_config_key_is_checked_and_left_out_while_null(tmp_path):
    base = {"out_dir": str(tmp_path)}
    for bad, what in [
        ({"kind": "noise", "value": 1.0}, "kind"),
        ({"kind": "temperature", "value": 0}, "value"),
        ({"kind": "temperature", "value": float("inf")}, "value"),
        ({"kind": "temperature"}, "null or"),
        ("temperature", "expected"),
    ]:
        with pytest.raises(ConfigError, match=what) as e:
            build_config(base | {"rollout_mismatch": bad})
        assert e.value.key == "rollout_mismatch"
    cfg = build_config(base, ["rollout_mismatch={kind: quantize, value: 0.5}"])
    assert cfg.rollout_mismatch == {"kind": "quantize", "value": 0.5}
    assert cfg.to_dict()["rollout_mismatch"] == {"kind": "quantize", "value": 0.5}
    assert "rollout_mismatch" not in build_config(base).to_dict()  # older configs hash as before
