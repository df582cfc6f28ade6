"""Entropy interventions, registered by name (docs/design.md §6). Importing this package registers them."""

from entflow.methods import (  # noqa: F401  (importing a module registers its methods)
    aepo,
    clip,
    clipb,
    corrections,
    covariance,
    entropic,
    exploration,
    forking,
    group_baselines,
    imitation,
    loss_modes,
    opefo,
    passk,
    policy_loss_variants,
    quadrant,
    regularizers,
    reward_advantages,
    shaping,
    sign,
    siren,
    stare,
    steer,
    topr,
    verl_advantages,
)
from entflow.methods.base import (
    Composite,
    LossContext,
    Method,
    get_method,
    list_methods,
    register,
    resolve_method,
)
from entflow.methods.needs import MethodNeeds, needs_of

__all__ = [
    "Composite",
    "LossContext",
    "Method",
    "MethodNeeds",
    "get_method",
    "list_methods",
    "needs_of",
    "register",
    "resolve_method",
]
