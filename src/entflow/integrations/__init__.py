"""Adapters that run entflow's methods inside other trainers (docs/design.md §12).

Each adapter lives in its own submodule and imports its trainer library only when that
submodule is imported, so ``import entflow`` never needs TRL or verl::

    from entflow.integrations.trl import EntflowGRPOConfig, EntflowGRPOTrainer   # needs the `trl` extra
    # verl: nothing to import — `pip install entflow[verl]` registers entflow through verl's
    # "verl.plugins" entry point (entflow.integrations.verl), see docs/integrations.md.
"""
