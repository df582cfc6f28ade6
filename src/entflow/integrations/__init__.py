"""Adapters that run entflow's methods inside other trainers (SPEC §12).

Each adapter lives in its own submodule and imports its trainer library only when that
submodule is imported, so ``import entflow`` never needs TRL or verl::

    from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer   # needs the `trl` extra
"""
