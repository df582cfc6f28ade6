"""entflow's vespo / luspo / off_policy_mask and the loss's dual clip inside TRL 1.16 == TRL's own
``loss_type="vespo"`` / ``"luspo"``, ``off_policy_mask_threshold`` and ``delta``.

TRL computes these inline in ``GRPOTrainer._compute_loss``, so the comparison is one whole
training run each, as tests/integrations/test_trl_field_methods.py: TRL's ``GRPOTrainer`` with its
option against ``EntflowGRPOTrainer`` with the entflow method, same tiny model, seed and
generations, plain SGD (a wrong loss scale shows), two passes over each generation batch
(``num_iterations=2``: ratios move off 1 on the second pass, where these losses differ from GRPO).
Acceptance: updated weights equal to 1e-6 relative, the updates themselves to 1e-4 (float32).

Mapping (docs/methods.md, docs/integrations.md): TRL's vespo normalises like its ``dapo`` →
entflow ``vespo`` with ``loss_type="dapo"``; TRL's luspo (``importance_sampling_level="sequence"``,
the paper's setup) divides like its ``grpo`` → entflow ``luspo`` with ``loss_type="grpo"`` (the
method fixes the response mean); ``off_policy_mask_threshold=δ`` → ``off_policy_mask`` with
``threshold=δ``; ``delta`` → the loss's dual clip, which the adapter passes from ``args.delta``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
from support.trl_capture import assert_same_update, rel, two_pass_run
from support.trl_tiny import continuous_reward


def run(cls, cfg_cls, tiny, out, **kw):
    return two_pass_run(cls, cfg_cls, tiny, out, continuous_reward, **kw)


# name → (TRL's GRPOConfig options, entflow's options)
CASES = {
    "vespo": (
        dict(loss_type="vespo", vespo_k_pos=1.5, vespo_lambda_pos=2.5),
        dict(loss_type="dapo", entflow_method="vespo", entflow_method_params={"k_pos": 1.5, "lambda_pos": 2.5}),
    ),
    "luspo": (
        dict(loss_type="luspo", importance_sampling_level="sequence", epsilon=0.02),
        dict(loss_type="grpo", entflow_method="luspo", epsilon=0.02),
    ),
    "delta": (
        dict(loss_type="dapo", delta=1.25),
        dict(loss_type="dapo", entflow_method="grpo", delta=1.25),
    ),
    "off_policy_mask": (
        dict(loss_type="dapo", off_policy_mask_threshold=1e-3),
        dict(loss_type="dapo", entflow_method="off_policy_mask", entflow_method_params={"threshold": 1e-3}),
    ),
}
# what shows that the option acted: TRL's run without it differs
WITHOUT = {
    "vespo": dict(loss_type="dapo"),
    "luspo": dict(loss_type="grpo", epsilon=0.02),
    "delta": dict(loss_type="dapo"),
    "off_policy_mask": dict(loss_type="dapo"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_entflow_in_trl_equals_trls_own_option(tiny, tmp_path, name):
    trl_kw, ef_kw = CASES[name]
    w0 = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(tiny[0]).state_dict().items()}
    w_trl, c_trl, _ = run(GRPOTrainer, GRPOConfig, tiny, tmp_path / "trl", **trl_kw)
    w_ef, c_ef, trainer = run(EntflowGRPOTrainer, EntflowGRPOConfig, tiny, tmp_path / "ef", **ef_kw)
    assert c_trl == c_ef and len({len(c) for c in c_trl}) > 1  # same generations, ragged lengths
    assert_same_update(w0, w_trl, w_ef)
    # the option acted: TRL without it ends elsewhere
    w_without, _, _ = run(GRPOTrainer, GRPOConfig, tiny, tmp_path / "without", **WITHOUT[name])
    assert max(rel(w_without[k], w_trl[k]) for k in w_trl) > 1e-5
    if name == "off_policy_mask":
        masked = [h["off_policy_mask/masked_frac"] for h in trainer.state.log_history if "loss" in h]
        assert max(masked) > 0


@pytest.mark.parametrize(
    ("kw", "key", "says"),
    [
        (dict(entflow_method="geo_mean", loss_type="dapo"), "loss_type", "'grpo'"),
        (dict(entflow_method="luspo", loss_type="dr_grpo"), "loss_type", "'grpo'"),
        # with another method than grpo (grpo hands these options to TRL's own loss)
        (dict(entflow_method="steer", loss_type="vespo"), "loss_type", "entflow_method='vespo' with loss_type='dapo'"),
        (dict(entflow_method="steer", loss_type="luspo"), "loss_type", "entflow_method='luspo' with loss_type='grpo'"),
    ],
)
def test_trl_options_that_are_entflow_methods_are_refused_with_the_fix(tmp_path, kw, key, says):
    from entflow.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        EntflowGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", **kw)
    assert e.value.key == key and says in str(e.value)
