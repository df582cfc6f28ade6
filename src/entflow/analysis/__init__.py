"""Diagnostics and analysis (SPEC §9): depends on the core, never on the trainer or CLI."""
