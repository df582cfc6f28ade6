"""entflow's cispo / sapo inside TRL 1.16 == TRL's own ``loss_type="cispo"`` / ``"sapo"``.

TRL computes these losses inline in ``GRPOTrainer._compute_loss`` (no lower-level function), so
the comparison is one whole training run each: TRL's ``GRPOTrainer`` with its loss type against
``EntflowGRPOTrainer`` with the entflow method, same tiny model, seed and generations, plain SGD
(the update is lr·gradient, so a wrong loss scale shows), two passes over each generation batch
(``num_iterations=2``: the second pass has ratios off 1, where the methods differ from GRPO).
Acceptance: updated weights equal to 1e-6 relative, the updates themselves to 1e-4 (float32).

Mapping (docs/methods.md): TRL's cispo weight is ``min(r, epsilon_high)`` with its ``dapo``
normaliser → entflow ``cispo`` with ``loss_type="dapo"``, ``epsilon=1`` (1 − ε_low = 0: no lower
bound) and ``epsilon_high = E − 1``. TRL's sapo aggregates like its ``grpo`` (sequence mean of
token means, over gradient-accumulation steps) → entflow ``sapo`` with ``loss_type="grpo"``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer

from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer
from support.trl_capture import assert_same_update, rel, two_pass_run
from support.trl_tiny import continuous_reward

reward = continuous_reward


def run(cls, cfg_cls, path, tok, data, out, **kw):
    return two_pass_run(cls, cfg_cls, (path, tok, data), out, reward, **kw)


CASES = {
    # TRL ε_max = 1.05 truncates the weight of every token whose ratio passed 1.05 on the second pass
    "cispo": (dict(loss_type="cispo", epsilon_high=1.05), dict(loss_type="dapo", epsilon=1.0, epsilon_high=0.05)),
    "sapo": (dict(loss_type="sapo", sapo_temperature_pos=0.8, sapo_temperature_neg=1.6), dict(loss_type="grpo")),
}


@pytest.mark.parametrize("name", list(CASES))
def test_entflow_method_in_trl_equals_trls_loss_type(tiny, tmp_path, name):
    path, tok, data = tiny
    trl_kw, ef_kw = CASES[name]
    params = {"tau_pos": 0.8, "tau_neg": 1.6} if name == "sapo" else None
    w0 = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(path).state_dict().items()}
    w_trl, c_trl, _ = run(GRPOTrainer, GRPOConfig, path, tok, data, tmp_path / "trl", **trl_kw)
    w_ef, c_ef, trainer = run(
        EntflowGRPOTrainer, EntflowGRPOConfig, path, tok, data, tmp_path / "ef",
        entflow_method=name, entflow_method_params=params, **ef_kw,
    )  # fmt: skip
    assert c_trl == c_ef and len({len(c) for c in c_trl}) > 1  # same generations, ragged lengths
    assert_same_update(w0, w_trl, w_ef)
    # the method's own metric went through TRL's logging
    key = "cispo/weight_clipped_frac" if name == "cispo" else "sapo/gate_mean"
    values = [h[key] for h in trainer.state.log_history if key in h]
    assert values, key
    if name == "cispo":
        assert max(values) > 0  # some weights were truncated on the second pass


@pytest.mark.parametrize("name", list(CASES))
def test_plain_grpo_does_not_reproduce_the_run(tiny, tmp_path, name):
    """The comparison above can fail: entflow's plain grpo does not reproduce TRL's cispo / sapo run."""
    path, tok, data = tiny
    trl_kw, ef_kw = CASES[name]
    w_trl, _, _ = run(GRPOTrainer, GRPOConfig, path, tok, data, tmp_path / "trl", **trl_kw)
    w_ef, _, _ = run(
        EntflowGRPOTrainer, EntflowGRPOConfig, path, tok, data, tmp_path / "ef", entflow_method="grpo", **ef_kw
    )
    assert max(rel(w_ef[k], w_trl[k]) for k in w_trl) > 1e-4
