"""The settings a run is trained in: the lab's tiny policy (``lab``) or a real model (``real``), each
with its config class, setup, training, evaluation and presets (``base.py``, ``lab.py``,
``real.py``); the registry that chooses between them (``registry.py``); several runs side by side
(``side_by_side.py``) and the comparison of methods that trains them (``compare.py``). It sits above
``entflow.lab`` and ``entflow.hf`` and below the claims harness (``entflow.evidence``) and the
command line (docs/architecture.md §1)."""
