"""Methods that verl's actor cannot feed: ``siren`` with top_p < 1 (its top-p entropy
needs the logits; verl gives the loss only the full entropy) and ``aepo`` (extra samples at its
own temperature, which verl does not draw) are refused when verl converts the policy-loss config,
with a :class:`ConfigError` that says why; ``siren`` with top_p = 1 is accepted."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from entflow.errors import ConfigError
from entflow.integrations.verl.config import EntflowPolicyLossConfig
from entflow.integrations.verl.spec import KEY, verl_blockers
from entflow.methods.base import get_method


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        (dict(loss_mode="entflow.siren"), r"siren\(top_p=0\.8\).*full logits.*params\.top_p=1"),
        (dict(loss_mode="entflow", method="clip_higher+siren", params={"top_p": 0.5}), r"siren\(top_p=0\.5\)"),
        (dict(loss_mode="entflow.aepo"), r"aepo.*own temperature"),
        (dict(loss_mode="entflow.remax"), r"remax.*greedy response.*adv_estimator=remax"),
        (dict(loss_mode="entflow.aer"), r"aer reads group_index in the loss"),
        (dict(loss_mode="entflow.simko"), r"simko reads the log-probs of the top-3 candidates.*logits"),
        (dict(loss_mode="entflow.optimal_token_baseline"), r"optimal_token_baseline.*Σπ².*calculate_sum_pi_squared"),
    ],
)
def test_methods_verl_cannot_feed_are_refused(kw, why):
    with pytest.raises(ConfigError, match=why) as e:
        EntflowPolicyLossConfig(**kw)
    assert e.value.key == f"{KEY}.method"


def test_siren_with_the_full_entropy_is_accepted():
    EntflowPolicyLossConfig(loss_mode="entflow.siren", params={"top_p": 1.0})
    assert verl_blockers(get_method("siren", top_p=1.0)) == []
