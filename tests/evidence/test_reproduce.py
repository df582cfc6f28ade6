"""`entflow reproduce` and the clean audit: verdict rules, claim evaluation on known per-seed
facts, the audit's ranking rule, and both pipelines end to end on a micro policy."""

from __future__ import annotations

import json
import math

import pytest
import torch

from entflow.evidence.audit import AuditConfig, _rank, audit_markdown, audit_policy
from entflow.evidence.claims import RUNS
from entflow.evidence.claims import interval_verdict as verdict
from entflow.evidence.reproduce import claims_markdown, evaluate_claims, registry, reproduce
from support.lab_micro import TASK_PARAMS  # the micro_policy fixture is in conftest

CLAIMS = registry().claims


def test_verdict_rules():
    assert verdict("greater", 0.3, 0.2) == "reproduced"
    assert verdict("greater", 0.1, 0.2) == "inconclusive"
    assert verdict("greater", -0.3, 0.2) == "not reproduced"
    assert verdict("less", -0.3, 0.2) == "reproduced" and verdict("less", 0.3, 0.2) == "not reproduced"
    assert (
        verdict("at_least", 0.9, 0.05, 0.8) == "reproduced" and verdict("at_least", 0.7, 0.05, 0.8) == "not reproduced"
    )
    assert verdict("at_most", 0.3, 0.05, 0.4) == "reproduced" and verdict("at_most", 0.5, 0.05, 0.4) == "not reproduced"
    assert verdict("greater", 0.3, math.nan) == "inconclusive"  # one seed: no interval, no verdict


def test_claims_use_paired_differences_per_seed():
    keys = (
        "entropy_retention",
        "val_pass_at_k_final",
        "val_acc_best_window",
        "law_r2",
        "law_predict_final_abs_err",
        "gain_first_half_share",
        "opefo_lambda_mean",
        "target_rel_err",
    )
    facts = {r: {s: {k: 0.5 for k in keys} for s in (0, 1, 2)} for r in RUNS}
    for s, v in zip((0, 1, 2), (0.68, 0.7, 0.72), strict=True):  # clip_cov retention 0.18–0.22 above GRPO
        facts["clip_cov"][s]["entropy_retention"] = v
    rows = {r["id"]: r for r in evaluate_claims(facts, [0, 1, 2])}
    assert len(rows) == len(CLAIMS)
    row = rows["003-clipcov-entropy"]
    assert row["values"] == pytest.approx([0.18, 0.2, 0.22]) and row["mean"] == pytest.approx(0.2)
    assert row["half"] == pytest.approx(4.30265273 * 0.02 / math.sqrt(3), rel=1e-8)
    assert row["verdict"] == "reproduced"
    assert rows["003-klcov-entropy"]["verdict"] == "inconclusive"  # differences all 0: zero-width at 0
    assert rows["003-collapse"]["verdict"] == "reproduced"  # retention 0.5 ± 0 meets "≤ 0.5"
    facts["clip_cov"][2]["entropy_retention"] = 1.5  # one wild seed widens the interval over 0
    assert {r["id"]: r for r in evaluate_claims(facts, [0, 1, 2])}["003-clipcov-entropy"]["verdict"] == "inconclusive"
    md = claims_markdown(list(rows.values()))
    assert md.count("\n") == len(CLAIMS) + 2 and "+0.200 ± 0.050 (3)" in md


def test_audit_rank_ties_overlapping_intervals():
    rows = [
        {"variant": "v", "estimator": "a", "mean": 0.7, "half": 0.05},
        {"variant": "v", "estimator": "b", "mean": 0.6, "half": 0.08},  # overlaps a
        {"variant": "v", "estimator": "c", "mean": 0.1, "half": 0.02},
    ]
    _rank(rows, "v")
    assert [r["rank"] for r in rows] == [1, 1, 3]


def test_audit_and_reproduce_end_to_end(tmp_path, micro_policy, monkeypatch):
    from entflow.lab import tasks

    # the micro policy is almost never right; a reward that depends on the response's length gives
    # every group mixed rewards, so every step has a gradient to audit
    monkeypatch.setattr(tasks.CountdownTask, "reward", lambda self, problem, response: float(len(response) % 2))
    cfg = AuditConfig(steps=2, seeds=(0,), prompts_per_step=4, group_size=4, isolated_tokens=5, task_params=TASK_PARAMS)
    res = audit_policy(micro_policy, cfg)
    for variant in ("batch", "isolated", "tabular_head"):
        assert set(res["per_step"][variant]) == {"steer", "sampled_logit", "opefo", "tabular", "cov"}
    vals = [v for d in res["per_step"].values() for vs in d.values() for v in vs]
    assert vals and all(-1 <= v <= 1 for v in vals if math.isfinite(v))
    assert "paper 000 Table 1" in audit_markdown(res)
    assert "tabular head" in audit_markdown(res)
    # without cross-talk the tabular estimator is the exact first-order change of every row
    assert all(v > 0.99 for v in res["per_step"]["tabular_head"]["tabular"])

    base = {
        "policy_path": micro_policy,
        "task_params": TASK_PARAMS,
        "prompts_per_step": 4,
        "group_size": 4,
        "eval_every": 1,
        "eval_k": 1,
        "audit": False,
        "mini_batches": 2,
    }
    audit = AuditConfig(steps=1, seeds=(0, 1), prompts_per_step=4, group_size=4, isolated_tokens=3)
    audit.task_params = TASK_PARAMS
    runs = ["grpo", "grpo_strict", "opefo_strict"]
    out = reproduce({"demo": base}, ["steps=2"], [0, 1], tmp_path / "rep", jobs=1, runs=runs, audit_cfg=audit)
    data = json.loads((tmp_path / "rep" / "claims.json").read_text())
    assert [r["id"] for r in data["claims"]] == [c.id for c in CLAIMS]
    row = {r["id"]: r for r in out["claims"]}["001-opefo-entropy"]
    assert row["n"] == 2 and all(math.isfinite(v) for v in row["values"])
    assert math.isnan({r["id"]: r for r in out["claims"]}["000-steer-entropy"]["mean"])  # steer was not run
    # the Park et al. facts come from real run metrics (flow/dH_clipped_*): one finite value per seed
    park = {r["id"]: r for r in out["claims"]}["park-clip-low"]
    assert park["n"] == 2 and all(math.isfinite(v) for v in park["values"])
    import yaml

    strict = yaml.safe_load((tmp_path / "rep" / "opefo_strict-s0" / "config.yaml").read_text())
    assert strict["strict_on_policy"] and strict["method"] == "opefo"
    lines = [json.loads(x) for x in (tmp_path / "rep" / "opefo_strict-s0" / "metrics.jsonl").read_text().splitlines()]
    assert [r["update/optimizer_steps"] for r in lines if "update/optimizer_steps" in r] == [1.0, 1.0]  # one step each
    assert (tmp_path / "rep" / "claims.md").exists()
    # each run's compact record: in its folder and gathered under out/facts, the same bytes, holding
    # exactly the facts its claims were judged from
    from entflow.evidence.facts import run_facts
    from entflow.evidence.records import config_hash, read_record

    for run in runs:
        for seed in (0, 1):
            d = tmp_path / "rep" / f"{run}-s{seed}"
            gathered = tmp_path / "rep" / "facts" / "demo" / f"{run}-s{seed}.json"
            assert (d / "facts.json").read_bytes() == gathered.read_bytes()
            rec = read_record(gathered)
            assert (rec["setting"], rec["run"], rec["seed"]) == ("demo", run, seed)
            assert rec["config_sha256"] == config_hash(yaml.safe_load((d / "config.yaml").read_text()))
            fresh = run_facts(d)
            assert json.dumps(rec["facts"], sort_keys=True) == json.dumps(fresh, sort_keys=True)

    def retention(run: str, seed: int) -> float:
        return read_record(tmp_path / "rep" / "facts" / "demo" / f"{run}-s{seed}.json")["facts"]["entropy_retention"]

    # the claim recomputes from the records alone, to the bit
    assert row["values"] == [retention("opefo_strict", s) - retention("grpo_strict", s) for s in (0, 1)]
    # the audit ran from the warm start and from each seed's own GRPO-trained policy
    assert set(out["audit"]) == {"warm_start", "after_grpo", "config"}
    audit_md = (tmp_path / "rep" / "audit.md").read_text()
    assert "warm start" in audit_md and "GRPO-trained policy" in audit_md

    # the same reproduce again with the run folders gone (a later session, another machine): each
    # run's record under rep/facts matches its config, so nothing trains and every verdict is the same
    import shutil

    from entflow.evidence.reproduce import _setting_configs, recorded_facts

    for run in runs:
        for seed in (0, 1):
            shutil.rmtree(tmp_path / "rep" / f"{run}-s{seed}")
    again = reproduce({"demo": base}, ["steps=2"], [0, 1], tmp_path / "rep", jobs=1, runs=runs)
    assert not any((tmp_path / "rep" / f"{run}-s{seed}").exists() for run in runs for seed in (0, 1))
    assert json.dumps(again["claims"]) == json.dumps(out["claims"])
    # a record is taken only for the config that wrote it: another step count trains again
    same = _setting_configs("demo", base, runs, ["steps=2"], [0, 1], tmp_path / "rep")
    other = _setting_configs("demo", base, runs, ["steps=3"], [0, 1], tmp_path / "rep")
    assert len(recorded_facts(tmp_path / "rep" / "facts" / "demo", same)) == 6
    assert recorded_facts(tmp_path / "rep" / "facts" / "demo", other) == {}


def test_tabular_head_entropy_change_matches_a_hand_computed_update():
    """The tabular-head truth equals an explicit per-state update, computed without autograd:
    u_s ← u_s + lr · Σ_{t in s} (A_t / N) (e_{o_t} − π_s), token-mean GRPO loss, r ≡ 1; positions
    with the same prompt and response prefix share one row (float64, tolerance 1e-12)."""
    from types import SimpleNamespace

    from entflow.evidence.audit import tabular_head_entropy_change
    from entflow.methods import get_method

    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.tensor([[0, 5, 6], [0, 5, 6], [7, 8, 9]])
    prompt_mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1]])
    response_ids = torch.tensor([[1, 2, 3], [1, 4, 3], [2, 2, 0]])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 1], [1, 1, 0]])
    # rows 0 and 1 share their prompt and first response token: positions (0,0)/(1,0) and
    # (0,1)/(1,1) are the same two states
    logits = torch.randn(3, 3, 10, generator=g, dtype=torch.float64)
    logits[1, :2] = logits[0, :2]
    adv = torch.tensor([[0.7] * 3, [-0.4] * 3, [1.3] * 3], dtype=torch.float64)
    roll = SimpleNamespace(prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=response_ids, mask=mask)
    valid = mask > 0
    lr = 0.5
    change, state = tabular_head_entropy_change(logits, roll, adv, valid, get_method("grpo"), lr)
    got = change[state]

    def entropy(z):
        p = torch.softmax(z, -1)
        return float(-(p * torch.log(p)).sum())

    n = float(mask.sum())
    moves: dict[tuple, torch.Tensor] = {}
    first: dict[tuple, torch.Tensor] = {}
    for i, t in valid.nonzero().tolist():
        key = (tuple(prompt_ids[i][prompt_mask[i] > 0].tolist()), tuple(response_ids[i, :t].tolist()))
        z = first.setdefault(key, logits[i, t])
        step = -torch.softmax(z, -1)
        step[response_ids[i, t]] += 1
        moves[key] = moves.get(key, torch.zeros_like(z)) + lr * float(adv[i, t]) / n * step
    want = []
    for i, t in valid.nonzero().tolist():
        key = (tuple(prompt_ids[i][prompt_mask[i] > 0].tolist()), tuple(response_ids[i, :t].tolist()))
        want.append(entropy(first[key] + moves[key]) - entropy(first[key]))
    assert len(first) == 6  # 8 valid positions, two pairs share a state
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)
    assert got[0] == got[3] and got[1] == got[4]  # shared rows give the same truth


def test_a_run_cannot_change_the_warm_start(tmp_path, micro_policy, monkeypatch):
    """Every run starts from one warm start, resolved before a run's own settings apply, so a
    ``pretrain`` setting in RUNS would be silently ignored: it fails before any training."""
    from entflow.errors import ConfigError
    from entflow.evidence import reproduce as rep

    monkeypatch.setitem(rep.RUNS, "grpo_ls", ("grpo", {}, {"pretrain": {"label_smoothing": 0.1}}))
    with pytest.raises(ConfigError, match="pretrain"):
        reproduce({"demo": {"policy_path": micro_policy}}, ["steps=1"], [0], tmp_path / "rep", jobs=1, runs=["grpo_ls"])
    assert not (tmp_path / "rep" / "grpo_ls-s0").exists()


def test_reproduce_prints_and_writes_raw_and_holm_verdicts_of_a_family(tmp_path, monkeypatch, capsys):
    """Through the CLI, with training replaced by fixed facts: two claims made one family."""
    import dataclasses

    from entflow.analysis import report
    from entflow.cli.main import main
    from entflow.evidence import reproduce as rep
    from entflow.evidence.claims import holm, one_sided_p
    from entflow.settings import lab

    shift = {"clip_cov": [0.03, 0.01, 0.02, 0.0, 0.04], "kl_cov": [0.031, 0.01, 0.02, 0.0, 0.04]}
    monkeypatch.setattr(lab, "train_lab_runs", lambda configs, **kw: [f"{c.group}/{c.seed}" for c in configs])
    monkeypatch.setattr(report, "summarize_run", lambda d: {})
    monkeypatch.setattr(report, "write_report", lambda dirs, out: None)

    def facts(run_dir, summary):
        group, seed = str(run_dir).split("/")
        return {"entropy_retention": 0.3 + (shift[group][int(seed)] if group in shift else 0.0)}

    monkeypatch.setattr(rep, "run_facts", facts)
    fam = {"003-clipcov-entropy", "003-klcov-entropy"}
    base = rep.registry()
    claims = tuple(dataclasses.replace(c, family="covariance") if c.id in fam else c for c in base.claims)
    monkeypatch.setattr(rep, "registry", lambda: dataclasses.replace(base, claims=claims))
    assert main(["reproduce", "--claims", ",".join(sorted(fam)), f"out_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    rows = {r["id"]: r for r in json.loads((tmp_path / "reproduce" / "claims.json").read_text())["claims"]}
    ps = [one_sided_p(shift[r], "greater") for r in ("clip_cov", "kl_cov")]
    want = holm(ps)
    for cid, p, adj in zip(("003-clipcov-entropy", "003-klcov-entropy"), ps, want, strict=True):
        r = rows[cid]
        assert r["verdict"] == "reproduced" and r["verdict_holm"] == "inconclusive"  # p ≈ 0.024 each; Holm > 0.025
        assert (r["family"], r["family_size"]) == ("covariance", 2)
        assert r["p_value"] == pytest.approx(p, rel=1e-12) and r["holm_p"] == pytest.approx(adj, rel=1e-12)
    md = (tmp_path / "reproduce" / "claims.md").read_text()
    for text in (md, out):
        assert "Claim families (Holm" in text and text.count("| covariance (2) |") == 2
        assert "| reproduced | **inconclusive** |" in text
