"""Adapters that run entflow methods inside existing trainers (SPEC §12).

Each adapter lives in its own subpackage or module and imports its trainer lazily, so
``import entflow`` never needs TRL or verl.
"""
