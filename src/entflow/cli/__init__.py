"""The ``entflow`` command line (outermost layer: depends on everything, nothing depends on it)."""
