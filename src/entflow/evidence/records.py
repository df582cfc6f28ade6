"""Per-run facts records: the small JSON that keeps a run's evidence after its run directory is gone.

One record per run (``facts.json`` in the run directory; ``<out>/facts/<setting>/<run>-s<seed>.json``
gathered by ``entflow reproduce``; committed under ``docs/results/facts/<set>/``). It holds every
fact of :data:`entflow.evidence.facts.FACTS` (a non-finite one as ``null``), the run key
(setting, run), the seed, the SHA-256 of the run's resolved config, and where it was measured
(entflow / torch / Python versions, CPU model, date). JSON floats round-trip exactly, so a claim
recomputed from a record gets the same bits as from the run directory.

A facts *set* is a folder of records (``<setting>/<run>-s<seed>.json``) plus ``source.json``, which
points to the published claims JSON the same ``entflow reproduce`` wrote: ``entflow reproduce
--verify`` recomputes those claims' per-seed values from the records (:mod:`entflow.evidence.verify`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from entflow.errors import EvidenceError
from entflow.files import write_json

__all__ = [
    "FACTS_FILE",
    "LOCATION_KEYS",
    "SOURCE_FILE",
    "backfill_facts_set",
    "config_hash",
    "cpu_model",
    "environment",
    "export_facts",
    "facts_record",
    "fresh_config_hash",
    "load_run_facts",
    "read_facts_set",
    "read_json",
    "read_record",
    "read_source",
    "record_name",
    "write_record",
    "write_source",
]

FACTS_FILE = "facts.json"
SCHEMA = 1
# config keys that say where a run was written or its model was cached, not what it trained: left
# out of the config hash, so the same run on two machines hashes the same
LOCATION_KEYS = ("out_dir", "policy_path")


def config_hash(config: dict[str, Any]) -> str:
    """SHA-256 (hex) of a resolved config: its keys but :data:`LOCATION_KEYS`, as JSON with sorted
    keys and no spaces (a non-JSON value as its ``str``)."""
    kept = {k: v for k, v in config.items() if k not in LOCATION_KEYS}
    text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str, allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def fresh_config_hash(cfg: Any) -> str:
    """The :func:`config_hash` a fresh run of ``cfg`` (a trainer config) records: the hash of the
    ``config.yaml`` it writes, with ``schedule_steps`` anchored on ``steps`` and no progress bar (as
    ``entflow reproduce`` trains). Lets a run be matched to its record before it is trained."""
    import dataclasses

    import yaml

    from entflow.trainer.collect import schedule_steps  # the anchoring a fresh run applies (trainer/loop.py)

    run = dataclasses.replace(cfg, schedule_steps=schedule_steps(cfg), progress=False)
    return config_hash(yaml.safe_load(yaml.safe_dump(run.to_dict(), sort_keys=False)))


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows: the machine a
    measurement names."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Where a record is written: entflow, torch and Python versions, the CPU model, the UTC date."""
    return {
        "versions": {"entflow": _version("entflow"), "torch": _version("torch"), "python": platform.python_version()},
        "machine": cpu_model(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def record_name(run: str, seed: int) -> str:
    """A record's file name in a facts set: ``<run>-s<seed>.json``."""
    return f"{run}-s{seed}.json"


def facts_record(
    setting: str,
    run: str,
    seed: int,
    facts: dict[str, float],
    config: dict[str, Any],
    env: dict[str, Any] | None = None,
    origin: str = "entflow reproduce",
) -> dict[str, Any]:
    """One run's record: its key, seed, config hash, ``env`` (default :func:`environment`), its
    ``origin`` (what wrote it) and ``facts`` (sorted by name; a non-finite value as None)."""
    clean = {k: (float(v) if math.isfinite(float(v)) else None) for k, v in sorted(facts.items())}
    return {
        "schema": SCHEMA,
        "setting": setting,
        "run": run,
        "seed": int(seed),
        "config_sha256": config_hash(config),
        **(env if env is not None else environment()),
        "origin": origin,
        "facts": clean,
    }


def write_record(path: str | os.PathLike, record: dict[str, Any]) -> Path:
    """Write a record as JSON (creating the folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, record)
    return path


def read_json(path: Path, what: str) -> Any:
    """``path``'s JSON; a missing or garbled file raises :class:`~entflow.errors.EvidenceError`
    naming it (``what``: the kind of file, for the message)."""
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise EvidenceError(path, None, f"cannot read the {what}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise EvidenceError(path, None, f"not valid JSON ({e.msg}, line {e.lineno})") from None


def read_record(path: str | os.PathLike) -> dict[str, Any]:
    """A record, checked: its key fields and a ``facts`` mapping of numbers or null (null → NaN).
    Raises :class:`~entflow.errors.EvidenceError` naming the file and the field."""
    path = Path(path)
    data = read_json(path, "facts record")
    if not isinstance(data, dict):
        raise EvidenceError(path, None, f"expected a JSON object, got {type(data).__name__}")
    for key, kind in (("setting", str), ("run", str), ("seed", int), ("config_sha256", str), ("facts", dict)):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise EvidenceError(path, key, f"expected {kind.__name__}, got {data.get(key)!r}")
    facts = {}
    for name, v in data["facts"].items():
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise EvidenceError(path, f"facts.{name}", f"expected a number or null, got {v!r}")
        facts[name] = math.nan if v is None else float(v)
    return {**data, "facts": facts}


def load_run_facts(run_dir: str | os.PathLike) -> dict[str, float]:
    """A run directory's facts: its ``facts.json`` when it has one, else computed from its files
    (:func:`entflow.evidence.facts.run_facts`)."""
    run_dir = Path(run_dir)
    if (run_dir / FACTS_FILE).is_file():
        return read_record(run_dir / FACTS_FILE)["facts"]
    from entflow.evidence.facts import run_facts

    return run_facts(run_dir)


def read_facts_set(folder: str | os.PathLike) -> dict[tuple[str, str, int], dict[str, float]]:
    """Every record of a facts set (``<setting>/<run>-s<seed>.json`` under ``folder``), by
    (setting, run, seed). A record whose place disagrees with its content, or a key seen twice,
    raises :class:`~entflow.errors.EvidenceError`."""
    out: dict[tuple[str, str, int], dict[str, float]] = {}
    for path in sorted(Path(folder).glob("*/*.json")):  # <setting>/<run>-s<seed>.json
        rec = read_record(path)
        if path.parent.name != rec["setting"] or path.name != record_name(rec["run"], rec["seed"]):
            raise EvidenceError(
                path, None, f"holds {rec['setting']}/{record_name(rec['run'], rec['seed'])}: the file is misplaced"
            )
        key = (rec["setting"], rec["run"], rec["seed"])
        out[key] = rec["facts"]
    return out


SOURCE_FILE = "source.json"


def write_source(dest: Path, claims_json: Path) -> Path:
    """``dest/source.json``: the path, relative to ``dest``, of the published claims JSON the set's
    runs produced (a pointer, not a copy, so the results pages list each claim once)."""
    rel = os.path.relpath(Path(claims_json).resolve(), Path(dest).resolve())
    return write_record(dest / SOURCE_FILE, {"claims_json": Path(rel).as_posix()})


def read_source(folder: str | os.PathLike) -> Path:
    """The published claims JSON a facts set points to (``source.json``), checked to exist."""
    path = Path(folder) / SOURCE_FILE
    data = read_json(path, "facts set's pointer")
    if not isinstance(data, dict) or not isinstance(data.get("claims_json"), str):
        raise EvidenceError(path, "claims_json", "expected {claims_json: a path relative to this folder}")
    target = Path(folder) / data["claims_json"]
    if not target.is_file():
        raise EvidenceError(path, "claims_json", f"points to {target}, which does not exist")
    return target


def export_facts(out: str | os.PathLike, dest: str | os.PathLike, published: str | os.PathLike) -> list[Path]:
    """Publish a reproduce output: its records (``out/facts/<setting>/…``) copied into ``dest`` (a
    facts set to commit, e.g. ``docs/results/facts/<name>``), ``out/claims.json`` copied to
    ``published`` (e.g. ``docs/results/<name>_claims.json``) and ``dest/source.json`` pointing to it.
    An output without records (written before they existed) gets them computed from its run
    folders, with the versions, machine and date of this export. Returns the files written. Raises
    :class:`~entflow.errors.EvidenceError` when ``out`` has no ``claims.json``, a run it names has
    neither a record nor a run folder, or a record is garbled."""
    out, dest, published = Path(out), Path(dest), Path(published)
    records = sorted((out / "facts").glob("*/*.json"))  # <setting>/<run>-s<seed>.json
    if not (out / "claims.json").is_file():
        raise EvidenceError(out / "claims.json", None, "missing: run `entflow reproduce` into this folder first")
    written = []
    if not records:  # an output written before records existed: compute them from its run folders
        written = _records_from_run_folders(out, dest)
    for src in records:
        read_record(src)  # a garbled record is never committed
        target = dest / src.parent.name / src.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
        written.append(target)
    published.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(out / "claims.json", published)
    return [*written, published, write_source(dest, published)]


def _records_from_run_folders(out: Path, dest: Path) -> list[Path]:
    """Records for every run and seed ``out/claims.json`` names (its ``runs`` keys and ``seeds``),
    computed from the run folders ``entflow reproduce`` left (``out/<run>-s<seed>`` in the demo
    setting, ``out/<setting>/<run>-s<seed>`` in another). Raises
    :class:`~entflow.errors.EvidenceError` when a named run folder is missing."""
    from entflow.analysis.runs import load_config
    from entflow.evidence.claims import DEFAULT_SETTING, split_key

    try:
        data = json.loads((out / "claims.json").read_text())
        keys, seeds = list(data["runs"]), [int(s) for s in data["seeds"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise EvidenceError(out / "claims.json", "runs", f"cannot read its runs and seeds: {e}") from None
    env = environment()
    written = []
    for key in keys:
        setting, run = split_key(str(key))
        for seed in seeds:
            d = (out if setting == DEFAULT_SETTING else out / setting) / f"{run}-s{seed}"
            if not (d / "metrics.jsonl").is_file():
                raise EvidenceError(d, None, "missing: claims.json names this run, and it has no facts record")
            origin = f"computed by entflow reproduce --export-facts from the run folder {d.name}"
            rec = facts_record(setting, run, seed, load_run_facts(d), load_config(d), env, origin)
            written.append(write_record(dest / setting / record_name(run, seed), rec))
    if not written:
        raise EvidenceError(out / "facts", None, "no per-run facts records, and claims.json names no run")
    return written


def backfill_facts_set(
    runs_root: str | os.PathLike, setting: str, claims_json: str | os.PathLike, dest: str | os.PathLike
) -> list[Path]:
    """A facts set from committed run directories (``runs_root/<run>-s<seed>/`` with their
    ``config.yaml``, ``metrics.jsonl``, ``coverage.json``) of one ``setting``: each run's facts
    computed from its files (:func:`load_run_facts`) as a record under ``dest/<setting>/``, and
    ``dest/source.json`` pointing to ``claims_json`` (the published claims JSON those runs produced). The
    records' versions, machine and date are those of this recomputation, which their ``origin`` says."""
    from entflow.analysis.runs import load_config

    runs_root, dest = Path(runs_root), Path(dest)
    env = environment()
    written = []
    for d in sorted(p for p in runs_root.iterdir() if (p / "metrics.jsonl").is_file()):
        config = load_config(d)
        run, seed = str(config.get("group") or d.name.rsplit("-s", 1)[0]), int(config["seed"])
        if d.name != f"{run}-s{seed}":
            raise EvidenceError(d, "config.yaml", f"group {run!r} and seed {seed} do not name the folder")
        origin = (
            f"recomputed from the committed run directory {d.as_posix()} "
            "(versions, machine and date: of this recomputation)"
        )
        rec = facts_record(setting, run, seed, load_run_facts(d), config, env, origin)
        written.append(write_record(dest / setting / record_name(run, seed), rec))
    if not written:
        raise EvidenceError(runs_root, None, "holds no run directory (a folder with metrics.jsonl)")
    return [*written, write_source(dest, Path(claims_json))]
