"""Entropy interventions, registered by name (SPEC §6). Importing this package registers them."""

from entflow.methods import clip  # noqa: F401  (registers grpo and the clip variants)
from entflow.methods.base import (
    Composite,
    LossContext,
    Method,
    get_method,
    list_methods,
    register,
    resolve_method,
)

__all__ = ["Composite", "LossContext", "Method", "get_method", "list_methods", "register", "resolve_method"]
