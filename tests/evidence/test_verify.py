"""`entflow reproduce --verify`: every committed claims JSON recomputes (exit 0); a hand-edited
value, mean, verdict or per-run fact makes it exit 1 naming the claim; a garbled or missing file
makes it exit 2 naming the file."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from entflow.cli.main import main
from entflow.errors import EvidenceError
from entflow.evidence.verify import PER_RUN, PER_SEED, same, verify

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


@pytest.fixture(scope="module")
def committed():
    return verify(RESULTS)


@pytest.fixture
def results_copy(tmp_path):
    """The committed results without the large run directories (the facts records stand for them)."""
    dest = tmp_path / "results"

    def run_dirs(folder: str, names: list[str]) -> list[str]:
        skip = {"gpu", "real-trl", "real-step", "real-design"}
        return [n for n in names if n in skip or (re.fullmatch(r".+-s\d+", n) and (Path(folder) / n).is_dir())]

    shutil.copytree(RESULTS, dest, ignore=run_dirs)
    return dest


def _edit(path: Path, claim_id: str, change) -> None:
    data = json.loads(path.read_text())
    row = next(r for r in data["claims"] if r["id"] == claim_id)
    change(row)
    path.write_text(json.dumps(data, indent=2))


def test_the_committed_results_recompute(committed):
    assert committed.ok, [(c.file, c.id, c.differences) for c in committed.differing]
    ids = {(c.file, c.id) for c in committed.checks}
    # every claims JSON with judged rows is read: the demo and regime confirmations, the real claims
    assert ("full_5seed_claims.json", "003-collapse") in ids
    assert ("regime/confirm_regime_claims.json", "exploration") in ids  # an any_of claim, with components
    assert ("real-claims/claims.json", "real-klcov-entropy") in ids
    # the real claims come from their committed per-run facts, the lab's from per-seed values
    sources = {c.id: c.source for c in committed.checks if c.file == "real-claims/claims.json"}
    assert len(sources) == 6 and set(sources.values()) == {PER_RUN}
    assert {c.source for c in committed.checks if c.file == "full_5seed_claims.json"} == {PER_SEED}
    # registry claims no committed file judges are listed, not silently passed
    from entflow.evidence.reproduce import registry

    assert set(committed.unpublished) == {c.id for c in registry().claims} - {c.id for c in committed.checks}


def test_cli_exit_0_on_the_committed_results(capsys):
    assert main(["reproduce", "--verify", str(RESULTS)]) == 0
    out = capsys.readouterr().out
    assert "real-klcov-entropy" in out and "per-run facts" in out and "recompute from the committed files" in out
    # the summary line says how many were recomputed from each source
    summary = next(line for line in out.splitlines() if "recompute from the committed files" in line)
    n_runs = sum(c.source == PER_RUN for c in verify(RESULTS).checks)
    assert f"{n_runs} from per-run facts" in summary and "from per-seed values only" in summary


@pytest.mark.parametrize(
    ("file", "claim", "change", "field"),
    [
        # a per-seed value is the source of the interval here: the published mean no longer follows
        ("full_5seed_claims.json", "003-saturate", lambda r: r["values"].__setitem__(2, r["values"][2] + 1e-6), "mean"),
        ("regime/sweep_followup_claims.json", "sweep-steer", lambda r: r.update(mean=r["mean"] * (1 + 1e-9)), "mean"),
        ("regime/confirm_regime_claims.json", "coverage-kl-cov", lambda r: r.update(verdict="inconclusive"), "verdict"),
        ("real-claims/claims.json", "real-collapse", lambda r: r.update(half=r["half"] + 0.01), "half"),
        ("full_5seed_claims.json", "003-collapse", lambda r: r.update(threshold=0.6), "rule"),
    ],
)
def test_a_hand_edited_number_or_verdict_exits_1_naming_the_claim(results_copy, capsys, file, claim, change, field):
    _edit(results_copy / file, claim, change)
    assert main(["reproduce", "--verify", str(results_copy)]) == 1
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("DIFFERS:"))
    assert f"DIFFERS: {claim} in {file}: {field}" in line
    assert sum(x.startswith("DIFFERS:") for x in out.splitlines()) == 1  # only that claim


def test_a_hand_edited_per_run_fact_exits_1_naming_the_claims_that_read_it(results_copy, capsys):
    path = results_copy / "facts" / "real" / "real" / "kl_cov-s3.json"
    rec = json.loads(path.read_text())
    rec["facts"]["entropy_final"] += 0.05  # no real claim reads it: nothing differs because of it
    rec["facts"]["entropy_retention"] += 0.05
    path.write_text(json.dumps(rec))
    assert main(["reproduce", "--verify", str(results_copy)]) == 1
    out = capsys.readouterr().out
    named = sorted(x.split()[1] for x in out.splitlines() if x.startswith("DIFFERS:"))
    assert named == ["real-klcov-entropy"]  # the one real claim that reads kl_cov's entropy retention
    assert "values[3]" in next(x for x in out.splitlines() if x.startswith("DIFFERS:"))


def test_a_garbled_file_exits_2_naming_it(results_copy, capsys):
    bad = results_copy / "regime" / "followup_klcov_claims.json"
    bad.write_text(bad.read_text()[:-40])  # cut short: not JSON any more
    assert main(["reproduce", "--verify", str(results_copy)]) == 2
    err = capsys.readouterr().err
    assert "followup_klcov_claims.json" in err and "not valid JSON" in err


def test_bad_input_is_a_typed_error_naming_file_and_field(results_copy, tmp_path):
    _edit(results_copy / "reproduce-claims.json", "004-ppl", lambda r: r.update(values="0.1, 0.2"))
    with pytest.raises(EvidenceError, match=r"reproduce-claims.json \[claims\[004-ppl\]\.values\]"):
        verify(results_copy)
    (results_copy / "reproduce-claims.json").unlink()
    rec = results_copy / "facts" / "real" / "real" / "grpo-s0.json"
    rec.write_text(json.dumps({**json.loads(rec.read_text()), "seed": "zero"}))
    with pytest.raises(EvidenceError, match=r"grpo-s0.json \[seed\]"):
        verify(results_copy)
    (results_copy / "facts" / "real" / "source.json").write_text('{"claims_json": "../../nowhere.json"}')
    with pytest.raises(EvidenceError, match=r"source.json \[claims_json\]: points to .*nowhere.json"):
        verify(results_copy)
    with pytest.raises(EvidenceError, match="not a folder"):
        verify(tmp_path / "absent")


def test_tolerance_is_relative_1e_12():
    assert same(1.0, 1.0 + 5e-13) and not same(1.0, 1.0 + 5e-12)
    assert same(None, math.nan) and not same(None, 0.0) and same(0.0, 0.0) and not same(0.0, 1e-300)


def test_a_family_publishes_raw_and_holm_verdicts_and_verify_recomputes_them(tmp_path, capsys):
    import copy

    import yaml

    from entflow.evidence.claims import load_claims, registry_path
    from entflow.evidence.facts import FACTS
    from entflow.evidence.reproduce import add_family_corrections, evaluate_claims
    from entflow.files import write_json

    base = next(e for e in yaml.safe_load(registry_path().read_text())["claims"] if e["id"] == "003-klcov-entropy")
    entries = []
    for i, run in enumerate(("kl_cov", "clip_cov")):
        e = copy.deepcopy(base)
        e.update(id=f"fam-{i}", runs=[run, "grpo"], family="f")
        e["metric"] = {**e["metric"], "run": run}
        entries.append(e)
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump({"claims": entries}))
    claims = load_claims(tmp_path / "claims.yaml", known_facts=FACTS)
    facts = {"grpo": {s: {"entropy_retention": 0.3} for s in range(5)}}
    facts["kl_cov"] = {s: {"entropy_retention": 0.3 + d} for s, d in enumerate([0.031, 0.01, 0.02, 0.0, 0.04])}
    facts["clip_cov"] = {s: {"entropy_retention": 0.3 + d} for s, d in enumerate([0.03, 0.01, 0.02, 0.0, 0.04])}
    rows = add_family_corrections(evaluate_claims(facts, list(range(5)), claims), claims)
    assert [r["verdict"] for r in rows] == ["reproduced", "reproduced"]
    # each p ≈ 0.0237 < 0.025 alone; Holm doubles the smaller, and the larger takes that running max
    assert [r["verdict_holm"] for r in rows] == ["inconclusive", "inconclusive"]
    assert rows[1]["holm_p"] == pytest.approx(2 * rows[1]["p_value"], rel=1e-12) and rows[1]["holm_p"] > 0.025
    root = tmp_path / "results"
    write_json(root / "fam_claims.json", {"claims": rows, "seeds": list(range(5))})
    assert verify(root, claims).ok
    _edit(root / "fam_claims.json", "fam-1", lambda r: r.update(verdict_holm="reproduced"))
    bad = verify(root, claims).differing
    assert [(c.id, c.differences) for c in bad] == [("fam-1", ["verdict_holm: 'reproduced' → 'inconclusive'"])]
    _edit(root / "fam_claims.json", "fam-1", lambda r: r.update(verdict_holm="inconclusive", holm_p=r["p_value"]))
    assert [c.id for c in verify(root, claims).differing] == ["fam-1"]
