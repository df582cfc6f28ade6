"""``entflow reproduce --claims``: trains exactly the runs the selected claims need (the trainer is
replaced by a recorder: no training), on the claims' pre-registered seeds by default, and writes
claims.json with id, verdict, mean, ci_low, ci_high, n; unknown ids and design seeds are refused."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from entflow.cli.main import main

# per (run, seed): the entropy retention the fake runs report
RETENTION = {"grpo": 0.3, "clip_cov": 0.5, "kl_cov": 0.35}
SHIFT = {0: 0.0, 1: 0.02, 2: -0.01, 3: 0.03, 4: 0.01}


@pytest.fixture
def recorder(monkeypatch):
    """Replace training by a recorder; each fake run's facts depend on its run type and seed."""
    from entflow.analysis import report
    from entflow.evidence import reproduce as rep
    from entflow.settings import lab, side_by_side

    trained: list[tuple[str, int]] = []

    def fake_run_compare(configs, jobs=2, resume=False, overwrite=False, progress=True, on_done=None):
        trained.extend((c.group, c.seed) for c in configs)
        return [f"{c.group}/{c.seed}" for c in configs]

    def fake_facts(run_dir, summary):
        group, seed = str(run_dir).split("/")
        s = int(seed)
        retention = RETENTION.get(group, 0.4) * (1 + SHIFT.get(s, 0.0) * (group != "grpo"))
        return {"entropy_retention": retention, "dH_clipped_low_mean": -s}

    def fake_train_side_by_side(configs, train, jobs, resume=False, overwrite=False, progress=True, on_done=None):
        return fake_run_compare(configs)  # a real setting's runs (the `real` kind trains through it)

    monkeypatch.setattr(lab, "train_lab_runs", fake_run_compare)
    monkeypatch.setattr(side_by_side, "train_side_by_side", fake_train_side_by_side)
    monkeypatch.setattr(report, "summarize_run", lambda d: {})
    monkeypatch.setattr(report, "write_report", lambda dirs, out: None)
    monkeypatch.setattr(rep, "run_facts", fake_facts)
    return trained


def test_claims_select_their_runs_and_write_the_schema(tmp_path, recorder, capsys):
    code = main(["reproduce", "--claims", "003-clipcov-entropy,003-klcov-entropy", f"out_dir={tmp_path}"])
    assert code == 0, capsys.readouterr().err
    seeds = [0, 1, 2, 3, 4]  # the claims' pre-registered seeds
    assert sorted(recorder) == sorted((r, s) for r in ("grpo", "clip_cov", "kl_cov") for s in seeds)
    data = json.loads((tmp_path / "reproduce" / "claims.json").read_text())
    assert data["runs"] == ["grpo", "clip_cov", "kl_cov"] and data["seeds"] == seeds
    assert [r["id"] for r in data["claims"]] == ["003-clipcov-entropy", "003-klcov-entropy"]
    for row in data["claims"]:
        assert {"id", "verdict", "mean", "ci_low", "ci_high", "n"} <= set(row)
        assert row["seeds_as_registered"] and row["n"] == 5
    # independent check: paired differences clip_cov − grpo per seed, 95 % t interval
    diffs = [0.5 * (1 + SHIFT[s]) - 0.3 for s in seeds]
    mean = sum(diffs) / 5
    half = stats.t.ppf(0.975, 4) * stats.tstd(diffs) / math.sqrt(5)
    row = data["claims"][0]
    assert row["mean"] == pytest.approx(mean, rel=1e-12)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((mean - half, mean + half), rel=1e-10)
    assert row["verdict"] == "reproduced"
    assert not (tmp_path / "reproduce" / "audit.md").exists()  # no audit for a claim selection


def test_explicit_seeds_and_a_pending_claim(tmp_path, recorder, capsys, monkeypatch):
    import dataclasses

    from entflow.evidence import reproduce as rep

    pending = "park-clip-high-random"  # made pending here: a claim whose run does not exist yet
    reason = "no random-reward run exists"
    registry = rep.registry()
    claims = tuple(dataclasses.replace(c, pending=reason) if c.id == pending else c for c in registry.claims)
    monkeypatch.setattr(rep, "registry", lambda: dataclasses.replace(registry, claims=claims))
    args = ["reproduce", "--claims", f"park-clip-low,{pending}", "--seeds", "5,6,7", f"out_dir={tmp_path}"]
    assert main(args) == 0, capsys.readouterr().err
    assert sorted(recorder) == [("grpo", 5), ("grpo", 6), ("grpo", 7)]  # the pending claim trains nothing
    rows = {r["id"]: r for r in json.loads((tmp_path / "reproduce" / "claims.json").read_text())["claims"]}
    assert rows[pending]["verdict"] == "not run" and rows[pending]["mean"] is None
    assert "random-reward" in rows[pending]["reason"]
    assert rows["park-clip-low"]["n"] == 3 and rows["park-clip-low"]["mean"] == pytest.approx(-6)
    assert rows["park-clip-low"]["seeds_as_registered"] is False


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--claims", "003-clipcov-entropy,not-a-claim"], "config key 'claims': unknown claim ids ['not-a-claim']"),
        (["--claims", "003-collapse", "--runs", "grpo"], "config key 'claims'"),
        (["--claims", "003-collapse", "--seeds", "0,1,101"], "design seeds [101]"),
    ],
)
def test_bad_selection_is_refused_before_training(tmp_path, recorder, capsys, args, needle):
    assert main(["reproduce", *args, f"out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert needle in err, err
    if "unknown" in needle:
        assert "003-collapse" in err and "exploration" in err  # the known ids are listed
    assert recorder == [] and not (tmp_path / "reproduce").exists()


def test_the_full_run_defaults_to_the_registered_seeds_in_every_setting(tmp_path, recorder, capsys):
    """Without --claims or --seeds: the registered confirmation seeds (0–4); `--runs grpo` trains GRPO
    in each setting a claim needs it in (the demo, the regime and the real model); --quick takes the first three."""
    assert main(["reproduce", "--runs", "grpo", "--no-audit", f"out_dir={tmp_path}"]) == 0, capsys.readouterr().err
    assert sorted(recorder) == sorted(("grpo", s) for s in range(5) for _ in ("demo", "regime", "real"))
    data = json.loads((tmp_path / "reproduce" / "claims.json").read_text())
    assert data["seeds"] == [0, 1, 2, 3, 4] and sorted(data["runs"]) == ["grpo", "real/grpo", "regime/grpo"]
    assert set(data["settings"]) == {"demo", "regime", "real"} and data["settings"]["regime"]["steps"] == 120
    # a claim registered on other seeds is never judged on these: not run, and it says where it runs
    row = next(r for r in data["claims"] if r["id"] == "exploration-klcov")
    assert row["verdict"] == "not run" and "registered on seeds [10, 11" in row["reason"]
    recorder.clear()
    assert main(["reproduce", "--quick", "--runs", "grpo", "--no-audit", f"out_dir={tmp_path}"]) == 0
    assert sorted({s for _, s in recorder}) == [0, 1, 2]
    # the smoke run exercises every claim on its seeds: none is set aside for being registered on others
    data = json.loads((tmp_path / "reproduce-quick" / "claims.json").read_text())
    row = next(r for r in data["claims"] if r["id"] == "003-collapse")
    assert row["verdict"] != "not run" and row["n"] == 3
    assert not any("registered on seeds" in (r.get("reason") or "") for r in data["claims"])


def test_seeds_override_the_registered_seeds_of_any_set_of_claims(tmp_path, recorder, capsys):
    """Claims registered on different seeds run together on --seeds (without it: refused, naming --seeds)."""
    from entflow.evidence import reproduce as rep

    ids = ["sweep-clip-cov", "exploration-klcov"]
    registered = {c.id: tuple(c.seeds) for c in rep.registry().claims if c.id in ids}
    assert len(set(registered.values())) == 2  # the case of the bug: two different registrations
    assert main(["reproduce", "--claims", ",".join(ids), f"out_dir={tmp_path}"]) == 2
    assert "give --seeds" in capsys.readouterr().err and recorder == []
    args = ["reproduce", "--claims", ",".join(ids), "--seeds", "1,2,3", f"out_dir={tmp_path}"]
    assert main(args) == 0, capsys.readouterr().err
    assert {s for _, s in recorder} == {1, 2, 3}
    data = json.loads((tmp_path / "reproduce" / "claims.json").read_text())
    assert data["seeds"] == [1, 2, 3]
    assert [r["id"] for r in data["claims"]] == ["exploration-klcov", "sweep-clip-cov"]
    assert all(r["seeds_as_registered"] is False for r in data["claims"])
    assert sorted(recorder) == sorted((g, s) for g in {g for g, _ in recorder} for s in (1, 2, 3))


@pytest.mark.parametrize("seeds", [[5], [5, 6]])
def test_fewer_than_three_seeds_train_and_show_values_without_a_verdict(tmp_path, recorder, capsys, monkeypatch, seeds):
    """One or two seeds (say a seed run on another machine): the runs train, the claim's per-seed
    values are written, and the verdict is "not judged" (a verdict needs 3 seeds); in a family the
    row gets no p-value, so it counts as p = 1 in Holm's correction."""
    from entflow.evidence import reproduce as rep

    facts = rep.run_facts  # the recorder's fake facts, plus the probe retention real-v2-collapse reads
    monkeypatch.setattr(rep, "run_facts", lambda d, s: facts(d, s) | {"probe_entropy_retention": 0.5})
    args = ["reproduce", "--claims", "003-clipcov-entropy,real-v2-collapse", "--seeds", ",".join(map(str, seeds))]
    assert main([*args, "--no-audit", f"out_dir={tmp_path}"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"{len(seeds)} seed(s)" in out and "at least 3" in out
    line = next(x for x in out.splitlines() if "Clip-Cov" in x and "entropy" in x)
    assert "±" not in line and "not judged" in line  # the table shows no interval for it
    # the demo's clip_cov and grpo, and real_v2's grpo (its group is named grpo too), on these seeds only
    assert sorted(recorder) == sorted([("clip_cov", s) for s in seeds] + [("grpo", s) for s in seeds] * 2)
    rows = {r["id"]: r for r in json.loads((tmp_path / "reproduce" / "claims.json").read_text())["claims"]}
    row = rows["003-clipcov-entropy"]
    assert row["verdict"] == "not judged" and "at least 3" in row["reason"]
    assert row["n"] == len(seeds)
    assert row["values"] == pytest.approx([0.5 * (1 + SHIFT.get(s, 0.0)) - 0.3 for s in seeds], rel=1e-12)
    fam = rows["real-v2-collapse"]
    assert fam["verdict"] == fam["verdict_holm"] == "not judged" and fam["values"] == [0.5] * len(seeds)
    assert fam["p_value"] is None or math.isnan(fam["p_value"])
