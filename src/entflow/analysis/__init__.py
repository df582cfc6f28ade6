"""Diagnostics and analysis (docs/design.md §9): depends on the core, never on the trainer or CLI."""
