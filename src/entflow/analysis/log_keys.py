"""Which log key plays each role (entropy, reward, validation metric, validation entropy, …) of
:func:`entflow.analysis.collapse.analyze_log`: :data:`KEY_TABLE` (first match wins; ``*`` matches
anything, ``/`` included), which users may extend with :func:`add_key`, or an override per role
(``--entropy-key`` / ``--reward-key`` / ``--val-key``). Problems are a
:class:`entflow.errors.LogError` naming the file and the key.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Sequence
from typing import TYPE_CHECKING

from entflow.errors import LogError

if TYPE_CHECKING:
    from entflow.analysis.log_readers import LogData

__all__ = ["KEY_TABLE", "add_key", "resolve_keys"]

# role -> log keys, most specific first (docs/analyze.md). Extend with add_key().
KEY_TABLE: dict[str, list[str]] = {
    "entropy": ["entropy", "train/entropy", "actor/entropy"],
    "reward": [
        "reward/mean",  # entflow
        "reward",  # TRL (trainer_state.json)
        "train/reward",  # TRL through TensorBoard / W&B
        "critic/score/mean",  # verl: the verifier's score
        "critic/rewards/mean",  # verl: the reward after KL-in-reward
        "rewards/*/mean",  # TRL: one reward function
        "train/rewards/*/mean",
    ],
    "val": [
        "val/acc",  # entflow
        "eval_reward",  # TRL (trainer_state.json)
        "eval/reward",  # TRL through TensorBoard / W&B
        "val-core/*/acc/mean@*",  # verl
        "val-core/*/reward/mean@*",
        "val/test_score/*",  # older verl
    ],
    "val_entropy": ["val/entropy", "eval_entropy", "eval/entropy"],
    # shown in the plots and source.keys, not fitted
    "response_length": [
        "response/len_mean",
        "completions/mean_length",
        "train/completions/mean_length",
        "response_length/mean",
    ],
    "clip": ["clip_ratio/region_mean", "train/clip_ratio/region_mean", "actor/pg_clipfrac", "clip/frac_high"],
    # the curves an entropy surge is triaged with (analysis/surge.py), not fitted
    "clip_high": [
        "clip/frac_high",  # entflow
        "clip_ratio/high_mean",  # TRL: ratio > 1 + ε_high with a positive advantage
        "train/clip_ratio/high_mean",
        "actor/entflow/clip/frac_high",  # entflow's loss inside verl
    ],
    "clip_low": ["clip/frac_low", "clip_ratio/low_mean", "train/clip_ratio/low_mean", "actor/entflow/clip/frac_low"],
    "clip_dual": ["actor/pg_clipfrac_lower"],  # verl: dual-clip bound (ratio > clip_ratio_c, negative advantage)
    "grad_norm": ["grad_norm", "train/grad_norm", "actor/grad_norm"],  # entflow and TRL; verl
    "lr": ["learning_rate", "train/learning_rate", "actor/lr", "lr"],  # TRL; verl
    # rollout engine vs trainer log-probs of the same tokens
    "mismatch": [
        "rollout_corr/k3_kl",  # verl: KL(π_rollout ‖ π_train), k3 estimator
        "rollout_corr/kl",  # verl: the direct estimator
        "training/rollout_probs_diff_mean",  # verl: mean |p_rollout − p_train|
        "sampling/sampling_logp_difference/mean",  # TRL (vLLM): mean |logp_train − logp_rollout|
        "train/sampling/sampling_logp_difference/mean",
    ],
}


def add_key(role: str, pattern: str, *, first: bool = True) -> None:
    """Add a log key (or ``*`` pattern) for ``role`` to :data:`KEY_TABLE`, tried first by default."""
    if role not in KEY_TABLE:
        raise LogError("KEY_TABLE", role, f"unknown role; known: {', '.join(KEY_TABLE)}")
    keys = KEY_TABLE[role]
    if pattern in keys:
        keys.remove(pattern)
    keys.insert(0 if first else len(keys), pattern)


def _match(log: LogData, patterns: Sequence[str]) -> tuple[str | None, list[str]]:
    """The first key matching the first pattern that matches any (sorted), and the other matches."""
    keys = log.keys()
    for pat in patterns:
        hits = [k for k in keys if fnmatch.fnmatchcase(k, pat)]
        if hits:
            return hits[0], hits[1:]
    return None, []


def _keys_like(log: LogData, given: str, limit: int = 25) -> str:
    """The log's keys that look like ``given`` (its last part inside them, or close spellings),
    else every key of the log (the first ``limit``)."""
    keys = log.keys()
    tail = given.split("/")[-1]
    near = [k for k in keys if tail and tail in k]
    near += [k for k in difflib.get_close_matches(given, keys, n=8, cutoff=0.6) if k not in near]
    if near:
        return "keys like it: " + ", ".join(near[:8])
    more = f" … ({len(keys)} in all)" if len(keys) > limit else ""
    return "the log has: " + ", ".join(keys[:limit]) + more


def resolve_keys(
    log: LogData, overrides: dict[str, str | None] | None = None, table: dict[str, list[str]] | None = None
) -> dict[str, str | None]:
    """Which log key plays each role of :data:`KEY_TABLE` (an override wins; it must be in the log).

    Raises:
        LogError: an override names a key the log lacks, or no key is found for ``entropy`` or ``reward``.
    """
    table = KEY_TABLE if table is None else table
    out: dict[str, str | None] = {}
    for role, patterns in table.items():
        given = (overrides or {}).get(role)
        if given:
            if given not in log.series:
                raise LogError(
                    log.path, given, f"--{role.replace('_', '-')}-key not in the log; {_keys_like(log, given)}"
                )
            out[role] = given
            continue
        key, others = _match(log, patterns)
        out[role] = key
        if others:
            log.notes.append(f"{role}: using {key}; also in the log: {', '.join(others[:5])}")
    for role in ("entropy", "reward"):
        if out[role] is None:
            shown = ", ".join(log.keys()[:25])
            raise LogError(
                log.path,
                role,
                f"no {role} key (looked for {', '.join(table[role])}); the log has: {shown}; pass --{role}-key",
            )
    return out
