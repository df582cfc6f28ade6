"""Per-run facts records: the config hash, an exact round trip through JSON, typed errors naming
the file, a run directory with and without ``facts.json``, and the committed real claims' records
equal to the facts recomputed from their committed run directories."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest
import yaml

from entflow.errors import EvidenceError
from entflow.evidence.facts import FACTS, run_facts
from entflow.evidence.records import (
    FACTS_FILE,
    backfill_facts_set,
    config_hash,
    export_facts,
    facts_record,
    load_run_facts,
    read_facts_set,
    read_record,
    read_source,
    write_record,
)

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
REAL_RUNS = RESULTS / "real-claims"


def test_config_hash_is_sorted_json_without_location_keys():
    cfg = {"seed": 3, "lr": 3e-05, "method": "grpo", "out_dir": "/tmp/a", "policy_path": "/x/y"}
    text = '{"lr":3e-05,"method":"grpo","seed":3}'  # written by hand: sorted keys, no spaces
    assert config_hash(cfg) == hashlib.sha256(text.encode()).hexdigest()
    moved = {**cfg, "out_dir": "/elsewhere", "policy_path": "/other/cache"}
    assert config_hash(dict(reversed(list(moved.items())))) == config_hash(cfg)  # where, and key order: no change
    assert config_hash({**cfg, "lr": 3e-5 * (1 + 1e-15)}) != config_hash(cfg)  # what it trained: a change


def test_a_record_round_trips_exactly(tmp_path):
    facts = {"a": 0.1 + 0.2, "b": math.nan, "c": -1e-300, "d": 2.0 / 3.0}
    env = {"versions": {"entflow": "x", "torch": "y", "python": "z"}, "machine": "m", "date": "d"}
    rec = facts_record("real", "grpo", 4, facts, {"seed": 4}, env)
    assert rec["facts"]["b"] is None and list(rec["facts"]) == ["a", "b", "c", "d"]
    back = read_record(write_record(tmp_path / "real" / "grpo-s4.json", rec))["facts"]
    assert back["a"] == facts["a"] and back["c"] == facts["c"] and back["d"] == facts["d"] and math.isnan(back["b"])
    in_set = read_facts_set(tmp_path)
    assert list(in_set) == [("real", "grpo", 4)] and in_set[("real", "grpo", 4)]["d"] == facts["d"]
    (tmp_path / "real" / "grpo-s4.json").rename(tmp_path / "real" / "grpo-s5.json")
    with pytest.raises(EvidenceError, match=r"grpo-s5.json: holds real/grpo-s4.json"):
        read_facts_set(tmp_path)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{not json", r"bad.json: not valid JSON"),
        ("[1, 2]", r"bad.json: expected a JSON object"),
        ('{"setting": "real", "run": "grpo", "seed": 0, "config_sha256": "h", "facts": {"x": "high"}}', r"\[facts.x\]"),
        ('{"setting": "real", "run": "grpo", "seed": true, "config_sha256": "h", "facts": {}}', r"\[seed\]"),
    ],
)
def test_a_garbled_record_is_a_typed_error_naming_the_file(tmp_path, text, match):
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(EvidenceError, match=match):
        read_record(tmp_path / "bad.json")


def test_a_run_dir_with_facts_json_reads_it_and_without_recomputes(tmp_path):
    run = tmp_path / "grpo-s0"
    shutil.copytree(REAL_RUNS / "grpo-s0", run)
    computed = run_facts(run)
    assert set(computed) == FACTS
    got = load_run_facts(run)  # no facts.json: computed from the files
    assert json.dumps(got, sort_keys=True) == json.dumps(computed, sort_keys=True)
    rec = facts_record("real", "grpo", 0, {**computed, "entropy_retention": 0.123}, {"seed": 0})
    write_record(run / FACTS_FILE, rec)
    assert load_run_facts(run)["entropy_retention"] == 0.123  # the record, not a recomputation


def test_the_committed_real_records_are_the_facts_of_the_committed_run_dirs(tmp_path):
    records = read_facts_set(RESULTS / "facts" / "real")
    assert read_source(RESULTS / "facts" / "real").resolve() == (REAL_RUNS / "claims.json").resolve()
    dirs = sorted(p for p in REAL_RUNS.iterdir() if (p / "metrics.jsonl").is_file())
    assert len(dirs) == len(records) == 15
    rebuilt = read_facts_set(
        backfill_facts_set(REAL_RUNS, "real", REAL_RUNS / "claims.json", tmp_path / "set")[0].parents[1]
    )
    for key, facts in records.items():
        assert json.dumps(facts, sort_keys=True) == json.dumps(rebuilt[key], sort_keys=True), key
    raw = json.loads((RESULTS / "facts" / "real" / "real" / "grpo-s0.json").read_text())
    assert raw["config_sha256"] == config_hash(yaml.safe_load((REAL_RUNS / "grpo-s0" / "config.yaml").read_text()))
    assert set(raw["versions"]) == {"entflow", "torch", "python"} and raw["machine"] and raw["date"]


def test_export_copies_records_and_points_to_the_published_json(tmp_path):
    out = tmp_path / "runs" / "x"
    rec = facts_record("regime", "grpo", 40, {"a": 1.0}, {"seed": 40})
    write_record(out / "facts" / "regime" / "grpo-s40.json", rec)
    with pytest.raises(EvidenceError, match=r"claims.json: missing"):
        export_facts(out, tmp_path / "docs" / "facts" / "x", tmp_path / "docs" / "x_claims.json")
    (out / "claims.json").write_text('{"claims": [], "seeds": [40]}')
    written = export_facts(out, tmp_path / "docs" / "facts" / "x", tmp_path / "docs" / "x_claims.json")
    assert (tmp_path / "docs" / "facts" / "x" / "regime" / "grpo-s40.json").read_text() == (
        out / "facts" / "regime" / "grpo-s40.json"
    ).read_text()
    assert (tmp_path / "docs" / "x_claims.json").read_text() == (out / "claims.json").read_text()
    assert read_source(tmp_path / "docs" / "facts" / "x") == tmp_path / "docs" / "facts" / "x" / "../../x_claims.json"
    assert len(written) == 3


def test_export_of_an_output_without_records_computes_them_from_its_run_folders(tmp_path):
    from entflow.evidence.verify import verify

    out = tmp_path / "runs" / "real-claims"  # as entflow reproduce left it: out/<setting>/<run>-s<seed>
    for d in REAL_RUNS.iterdir():
        if (d / "metrics.jsonl").is_file():
            shutil.copytree(d, out / "real" / d.name)
    shutil.copyfile(REAL_RUNS / "claims.json", out / "claims.json")
    results = tmp_path / "results"
    from entflow.cli.main import main

    argv = ["reproduce", "--name", "real-claims", "--export-facts", str(results / "facts" / "real")]
    assert main([*argv, f"out_dir={tmp_path / 'runs'}"]) == 0  # published by default next to facts/
    assert (results / "real_claims.json").read_bytes() == (REAL_RUNS / "claims.json").read_bytes()
    made = read_facts_set(results / "facts" / "real")
    committed = read_facts_set(RESULTS / "facts" / "real")
    assert set(made) == set(committed)
    for key, facts in made.items():
        assert json.dumps(facts, sort_keys=True) == json.dumps(committed[key], sort_keys=True), key
    check = verify(results)
    assert check.ok and {c.source for c in check.checks} == {"per-run facts"} and len(check.checks) == 6
    shutil.rmtree(out / "real" / "kl_cov-s2")
    with pytest.raises(EvidenceError, match=r"kl_cov-s2: missing"):
        export_facts(out, tmp_path / "again", tmp_path / "again_claims.json")


@pytest.mark.parametrize("schedule", [None, 5])
def test_fresh_config_hash_is_the_hash_of_the_config_a_fresh_run_writes(tmp_path, micro_policy, schedule):
    # the hash is taken before training, to match a run to its record; it must equal the hash of the
    # config.yaml the trainer then writes (schedule_steps anchored on steps when unset)
    from entflow.evidence.records import fresh_config_hash
    from entflow.lab.setup import train_lab
    from support.lab_micro import micro_run_config

    cfg = micro_run_config(tmp_path, micro_policy, name="fresh", steps=2, schedule_steps=schedule)
    expected = fresh_config_hash(cfg)
    run = train_lab(cfg)
    written = yaml.safe_load((run / "config.yaml").read_text())
    assert written["schedule_steps"] == (schedule or 2)
    assert config_hash(written) == expected
