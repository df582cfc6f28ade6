"""``python -m entflow``: the ``entflow`` command, through the console script's own
:func:`entflow.cli.main.main` (``[project.scripts]`` in pyproject.toml)."""

import sys

from entflow.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
