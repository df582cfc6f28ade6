"""``python -m entflow.integrations.verl.check [hydra overrides...]``: validate a verl launch command.

Composes verl's own ``ppo_trainer`` config (from the installed verl package) with the given
overrides, runs verl's own ``validate_config`` (as ``verl.trainer.main_ppo`` does before it
starts Ray; it converts the actor config through verl's dataclasses) and then
:func:`entflow.integrations.verl.config.check_config`.
Needs no GPU, no Ray and no model. Exit code 0 and one line on success; 2 and the error naming
the key otherwise.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def compose(overrides: list[str], config_name: str = "ppo_trainer") -> Any:
    """verl's Hydra config ``config_name`` with ``overrides`` applied (Hydra's compose API)."""
    import verl
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return hydra_compose(config_name=config_name, overrides=overrides)


def validate(overrides: list[str]) -> Any:
    """Compose, convert the actor config through verl's dataclasses, check entflow's settings.
    Returns the entflow method (None when the loss is not entflow's)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    from entflow.integrations.verl.config import check_config

    config = compose(overrides)
    # what verl.trainer.main_ppo does before it starts Ray (converts the actor config through
    # verl's dataclasses, so EntflowPolicyLossConfig validates the method and its parameters)
    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    return check_config(config)


def main(argv: list[str] | None = None) -> int:
    from entflow.errors import EntflowError

    try:
        method = validate(list(sys.argv[1:] if argv is None else argv))
    except Exception as e:  # Hydra wraps errors raised while instantiating the config
        cause: BaseException | None = e
        while cause is not None and not isinstance(cause, EntflowError):
            cause = cause.__cause__
        print(f"entflow: invalid verl config: {cause or e}", file=sys.stderr)
        return 2
    print(f"entflow: verl config OK ({'no entflow method' if method is None else method!r})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
