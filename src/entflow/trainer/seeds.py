"""The random streams of a run, each named once.

Every random draw of a run is a function of the run's ``seed`` and a step (or split) index alone,
which is what lets ``resume`` reproduce an uninterrupted run bit for bit: a stream's seed is
``stream_seed(cfg.seed, STREAM, index)`` = ``step_seed(cfg.seed + STREAM, index)``. The names below
are the offsets; their values are those the runs have always used, so that a run's metrics stay
byte-identical.

Two offsets are shared by two streams (kept, because changing either would change published runs):

- ``HARD_SET`` and ``RANDOM_REWARD`` are both 3: in a ``random_reward`` run on a task with a hard
  split, the hard split's sampling and the reward coin start from the same torch seed at a step.
- ``REGIME_HARD_SET`` and ``COVERAGE`` are both 2, and the hard split is evaluated under two
  offsets: ``val/hard_acc`` (the lab's validation, ``HARD_SET`` = 3) and the regime experiment's
  ``hard/*`` (``REGIME_HARD_SET`` = 2), so their accuracies differ by sampling noise. The regime
  experiment's draws at steps 0 and 1 have the seeds of the coverage curves' validation and hard
  splits.
"""

from __future__ import annotations

#: the step's own stream: its prompts (``random.Random``), the update's mini-batch order (a
#: ``torch.Generator``) and the global torch and Python RNGs the step runs under
STEP = 0
#: the validation samples of every evaluation step (the lab's and a real model's ``val/*``)
VALIDATION = 1
#: the pass@k curves of ``coverage.json``, indexed by split (0: validation, 1: hard), not by step
COVERAGE = 2
#: the hard split's evaluation in ``experiments/regime/train.py`` (``hard/*``), indexed by step
REGIME_HARD_SET = 2
#: the hard split's evaluation in the lab's validation (``val/hard_acc``), indexed by step
HARD_SET = 3
#: the Bernoulli(1/2) coin of ``random_reward`` (rewards without signal), indexed by step
RANDOM_REWARD = 3


def step_seed(seed: int, step: int) -> int:
    """A per-step seed, so that every step's randomness is a function of (seed, step) alone."""
    return (seed * 1_000_003 + step * 7_919) % (2**63 - 1)


def stream_seed(seed: int, stream: int, index: int) -> int:
    """The seed of stream ``stream`` (one of this module's offsets) at ``index`` (a step, or a
    split for ``COVERAGE``) of the run seeded ``seed``: ``step_seed(seed + stream, index)``."""
    return step_seed(seed + stream, index)
