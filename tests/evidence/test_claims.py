"""The claim registry (src/entflow/evidence/claims.yaml): it loads, names only known runs and facts,
keeps the 0.1.0 verdict rules, rejects bad entries with a typed error naming the claim and the
field; pending claims and untrained runs give "not run"; the Bonferroni ``any_of`` rule; claim
families: the one-sided p-value and the Holm–Bonferroni correction against independent references."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest
import yaml
from scipy import stats

from entflow.errors import ConfigError
from entflow.evidence.claims import (
    DESIGN_SEEDS,
    HOLM_ALPHA,
    RUNS,
    holm,
    holm_verdict,
    interval_row,
    load_claims,
    one_sided_p,
    registry_path,
)
from entflow.evidence.facts import FACTS
from entflow.evidence.reproduce import (
    add_family_corrections,
    evaluate_claims,
    families_markdown,
    registry,
    runs_needed,
    select_claims,
)
from entflow.files import json_safe

CLAIMS = registry().claims

# the rules of the in-code claim list of 0.1.0 (id -> (rule, bound)), which the registry replaced
RULES_0_1_0 = {
    "003-collapse": ("at_most", 0.5),
    "003-saturate": ("at_least", 0.7),
    "003-law-fit": ("at_least", 0.8),
    "003-law-fit-demo": ("at_least", 0.8),
    "003-law-predict": ("at_most", 0.05),
    "003-clipcov-entropy": ("greater", 0.0),
    "003-klcov-entropy": ("greater", 0.0),
    "003-clipcov-passk": ("greater", 0.0),
    "003-klcov-passk": ("greater", 0.0),
    "dapo-clip-higher": ("greater", 0.0),
    "002-positive-only": ("less", 0.0),
    "002-negative-only-entropy": ("greater", 0.0),
    "002-negative-only-passk": ("at_least", -0.03),
    "002-pos-adv-reweight": ("greater", 0.0),
    "000-steer-entropy": ("greater", 0.0),
    "000-steer-acc": ("at_least", -0.03),
    "000-quadrant-uplift": ("greater", 0.0),
    "000-quadrant-suppress": ("less", 0.0),
    "001-opefo-entropy": ("greater", 0.0),
    "001-lambda-positive": ("greater", 0.0),
    "001-lambda-small": ("at_most", 0.05),
    "004-position": ("greater", 0.0),
    "004-ppl": ("at_most", 0.05),
    "002-adaptive": ("at_most", 0.15),
}


def _registry() -> dict:
    return yaml.safe_load(registry_path().read_text())


def test_registry_loads_with_known_runs_and_facts():
    claims = load_claims(known_facts=FACTS)
    assert [c.id for c in claims] == [c.id for c in CLAIMS] and len({c.id for c in claims}) == len(claims)
    for c in claims:
        assert not set(c.seeds) & DESIGN_SEEDS and len(c.seeds) >= 5, c.id
        if c.pending is None:
            assert set(c.runs) <= set(RUNS), c.id
            assert set(c.facts_read()) <= FACTS, c.id
        else:
            assert c.pending.strip(), c.id
    ids = {c.id for c in claims}
    new = {"yue-coverage", "park-clip-low", "park-clip-high", "park-clip-low-random", "exploration"}
    assert new <= ids and sum(i.startswith("coverage-") for i in ids) == 10
    # the Park et al. claims on real rewards read facts that exist: they are live
    assert select_claims(["park-clip-low"])[0].pending is None


def test_registry_keeps_the_0_1_0_rules():
    got = {c.id: (c.rule, c.bound) for c in CLAIMS}
    assert {i: got[i] for i in RULES_0_1_0} == RULES_0_1_0
    assert [c.id for c in CLAIMS][: len(RULES_0_1_0)] == list(RULES_0_1_0)


def _write(tmp_path, entries):
    p = tmp_path / "claims.yaml"
    p.write_text(yaml.safe_dump({"claims": entries}, allow_unicode=True))
    return p


def _mutations():
    """(what is changed, field named in the error)."""

    def drop(key):
        return lambda e: e.pop(key)

    def put(key, value):
        return lambda e: e.__setitem__(key, value)

    return [
        (drop("criterion"), "criterion"),
        (put("colour", "red"), "colour"),
        (put("runs", ["clip_cov", "no_such_run"]), "runs"),
        (put("metric", {"name": "ratio", "fact": "entropy_retention", "run": "clip_cov"}), "metric"),
        (lambda e: e["metric"].__setitem__("fact", "entropy_vibes"), "metric"),
        (lambda e: e["metric"].__setitem__("baseline", "kl_cov"), "metric"),  # not among runs
        (put("criterion", {"kind": "bigger"}), "criterion"),
        (put("criterion", {"kind": "threshold"}), "criterion"),
        (put("criterion", {"kind": "no_worse", "margin": -0.1}), "criterion"),
        (put("criterion", {"kind": "threshold", "threshold": "high"}), "criterion"),
        (put("direction", "lower"), "direction"),  # "greater" claims the higher side
        (put("direction", "up"), "direction"),
        (put("seeds", [0, 1, 101]), "seeds"),
        (put("seeds", [0, 0, 1]), "seeds"),
        (put("status", "maybe later"), "status"),
        (put("pending", ""), "pending"),
        (put("statement", ""), "statement"),
        (put("family", "two words"), "family"),
        (put("family", 3), "family"),
        (put("superseded", " "), "superseded"),
        (put("superseded", True), "superseded"),
    ]


@pytest.mark.parametrize("mutate,fld", _mutations())
def test_bad_entry_names_claim_and_field(tmp_path, mutate, fld):
    good = next(e for e in _registry()["claims"] if e["id"] == "003-clipcov-entropy")
    load_claims(_write(tmp_path, [good]), known_facts=FACTS)  # the unchanged entry loads
    bad = copy.deepcopy(good)
    mutate(bad)
    with pytest.raises(ConfigError) as e:
        load_claims(_write(tmp_path, [bad]), known_facts=FACTS)
    assert e.value.key == f"claims[003-clipcov-entropy].{fld}", str(e.value)


def test_bad_registry_files(tmp_path):
    entries = _registry()["claims"]
    with pytest.raises(ConfigError) as e:
        load_claims(_write(tmp_path, [entries[0], entries[0]]), known_facts=FACTS)
    assert e.value.key == f"claims[{entries[0]['id']}].id" and "duplicate" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_claims(_write(tmp_path, [{**entries[0], "id": "no spaces please"}]), known_facts=FACTS)
    assert e.value.key == "claims[0].id"
    (tmp_path / "empty.yaml").write_text("claims: []\n")
    with pytest.raises(ConfigError, match="non-empty list") as e:
        load_claims(tmp_path / "empty.yaml", known_facts=FACTS)
    assert e.value.key == "claims"
    with pytest.raises(ConfigError) as e:
        load_claims(tmp_path / "absent.yaml", known_facts=FACTS)
    assert e.value.key == "claims"


def test_pending_claim_may_name_future_runs_and_facts(tmp_path):
    entry = next(e for e in _registry()["claims"] if e["id"] == "park-clip-low-random")
    entry |= {"runs": ["grpo_future"], "metric": {**entry["metric"], "run": "grpo_future"}}
    entry["pending"] = "no grpo_future run exists yet"
    assert "grpo_future" not in RUNS
    (c,) = load_claims(_write(tmp_path, [entry]), known_facts=FACTS)
    assert c.pending and c.runs == ("grpo_future",)
    entry.pop("pending")
    with pytest.raises(ConfigError) as e:
        load_claims(_write(tmp_path, [entry]), known_facts=FACTS)
    assert e.value.key == "claims[park-clip-low-random].runs"


@pytest.mark.parametrize(
    "crit,direction,rule,bound",
    [
        ({"kind": "threshold", "threshold": 0.7}, "higher", "at_least", 0.7),
        ({"kind": "threshold", "threshold": 0.7}, "lower", "at_most", 0.7),
        ({"kind": "no_worse", "margin": 0.03}, "higher", "at_least", -0.03),
        ({"kind": "no_worse", "margin": 0.05}, "lower", "at_most", 0.05),
        ({"kind": "less"}, "lower", "less", 0.0),
    ],
)
def test_criterion_reduces_to_a_verdict_rule(tmp_path, crit, direction, rule, bound):
    entry = next(e for e in _registry()["claims"] if e["id"] == "003-clipcov-entropy")
    (c,) = load_claims(_write(tmp_path, [{**entry, "criterion": crit, "direction": direction}]), known_facts=FACTS)
    assert (c.rule, c.bound) == (rule, bound)


def test_not_run_for_pending_claims_and_untrained_runs():
    high = (0.02, -0.03, 0.05)  # spans 0
    facts = {"grpo": {s: {"dH_clipped_low_mean": -0.1 - 0.01 * s, "dH_clipped_high_mean": high[s]} for s in (0, 1, 2)}}
    pending = "no such run yet"
    claims = [dataclasses.replace(c, pending=pending) if c.id == "park-clip-high-random" else c for c in CLAIMS]
    rows = {r["id"]: r for r in evaluate_claims(facts, [0, 1, 2], claims)}
    for cid in ("park-clip-low-random", "exploration", "park-clip-high-random", "coverage-clip-cov"):
        assert rows[cid]["verdict"] == "not run" and rows[cid]["reason"], cid
        assert math.isnan(rows[cid]["mean"]) and rows[cid]["n"] == 0
    assert rows["park-clip-high-random"]["reason"] == pending  # a pending claim says why
    assert rows["park-clip-low-random"]["reason"] == "runs not trained: grpo_random_reward"
    assert rows["003-clipcov-entropy"]["verdict"] == "not run"
    assert rows["003-clipcov-entropy"]["reason"] == "runs not trained: clip_cov"
    low = rows["park-clip-low"]  # live: −0.1, −0.11, −0.12 → mean −0.11 ± t₂ · 0.01 / √3
    assert low["mean"] == pytest.approx(-0.11) and low["verdict"] == "reproduced"
    assert low["ci_high"] == pytest.approx(-0.11 + stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3), rel=1e-10)
    assert rows["park-clip-high"]["verdict"] == "inconclusive"
    assert rows["exploration"]["reason"].startswith("runs not trained: ")  # measurable, not pending
    json.dumps(json_safe(rows["park-clip-low-random"]), allow_nan=False)  # NaN → null in claims.json
    assert json_safe(rows["park-clip-low-random"])["mean"] is None


def _any_of(deltas: dict[tuple[str, str], list[float]]):
    """The ``exploration`` claim made live, on facts where (fact, run) − (fact, baseline) = delta."""
    claim = dataclasses.replace(select_claims(["exploration"])[0], pending=None)
    seeds = [0, 1, 2, 3, 4]
    facts = {claim.key(r): {s: {x: 0.5 for x in claim.metric["facts"]} for s in seeds} for r in claim.runs}
    for (x, run), vals in deltas.items():
        for s, v in zip(seeds, vals, strict=True):
            facts[claim.key(run)][s][x] = 0.5 + v
    return evaluate_claims(facts, seeds, [claim])[0]


def test_any_of_uses_bonferroni_and_reports_the_best_component():
    m = 12  # 6 (control, baseline) pairs × 2 facts
    vals = [0.10, 0.12, 0.08, 0.11, 0.09]  # mean 0.1, s = 0.01581
    row = _any_of({("hard_acc_best_window", "clip_cov"): vals})
    assert len(row["components"]) == m and row["level"] == pytest.approx(1 - 0.05 / m)
    half = stats.t.ppf(1 - 0.05 / (2 * m), 4) * stats.tstd(vals) / math.sqrt(5)
    assert row["best"] == {"fact": "hard_acc_best_window", "run": "clip_cov", "baseline": "grpo"}
    assert row["mean"] == pytest.approx(0.1) and row["ci_low"] == pytest.approx(0.1 - half, rel=1e-10)
    assert row["verdict"] == "reproduced"
    # the same effect, noisier: the 95 % interval would exclude 0 but the Bonferroni one does not
    noisy = [0.1, 0.2, 0.02, 0.14, 0.04]
    h95 = stats.t.ppf(0.975, 4) * stats.tstd(noisy) / math.sqrt(5)
    hbon = stats.t.ppf(1 - 0.05 / (2 * m), 4) * stats.tstd(noisy) / math.sqrt(5)
    assert 0.1 - h95 > 0 > 0.1 - hbon
    assert _any_of({("val_pass_at_256_final", "steer"): noisy})["verdict"] == "inconclusive"
    # every component clearly below: not reproduced
    below = {(x, r): [-0.2, -0.21, -0.19, -0.2, -0.2] for x in ("val_pass_at_256_final", "hard_acc_best_window")
             for r in ("clip_higher", "clip_cov", "kl_cov", "steer", "negative_only", "opefo_strict")}  # fmt: skip
    assert _any_of(below)["verdict"] == "not reproduced"


def test_runs_needed_is_the_union_of_live_claims():
    sel = select_claims(["003-clipcov-entropy", "001-opefo-entropy", "park-clip-low", "park-clip-low-random"])
    assert runs_needed(sel) == ["grpo", "clip_cov", "grpo_strict", "grpo_random_reward", "opefo_strict"]
    pending = dataclasses.replace(select_claims(["park-clip-low-random"])[0], pending="not yet")
    assert runs_needed([pending]) == []  # pending: nothing to train
    assert runs_needed(select_claims(["yue-coverage"])) == ["regime/grpo"]  # in the regime setting
    both = select_claims(["003-collapse", "exploration"])  # demo first, then the regime (registry order)
    assert runs_needed(both)[:2] == ["grpo", "regime/grpo"] and len(runs_needed(both)) == 9
    assert runs_needed(both, only=["grpo"]) == ["grpo", "regime/grpo"]
    with pytest.raises(ConfigError) as e:
        select_claims(["003-collapse", "003-colapse"])
    assert e.value.key == "claims" and "003-colapse" in str(e.value) and "003-collapse" in str(e.value)


def test_settings_are_registered_and_checked(tmp_path):
    """The registry names where each claim is measured; a claim's runs are keyed by setting, and a
    bad setting (unknown name, unknown preset, bad steps) fails to load naming the field."""
    from entflow.evidence.claims import load_settings

    settings = load_settings()
    assert (settings["demo"].config, settings["demo"].steps) == ("demo.yaml", 80)
    assert (settings["regime"].config, settings["regime"].steps) == ("regime.yaml", 120)
    regime = settings["regime"].base()
    assert regime["task"] == "countdown_routes" and regime["steps"] == 120 and "methods" not in regime
    by_id = {c.id: c for c in CLAIMS}
    assert by_id["exploration"].setting == "regime" and by_id["exploration"].key("grpo") == "regime/grpo"
    assert by_id["003-collapse"].setting == "demo" and by_id["003-collapse"].key("grpo") == "grpo"
    text = registry_path().read_text()
    spec = "regime: {config: regime.yaml, steps: 120}"
    for bad, key in [
        (text.replace("setting: regime", "setting: regiem", 1), "setting"),
        (text.replace(spec, "regime: {config: nope.yaml, steps: 120}"), "settings.regime"),
        (text.replace(spec, "regime: {config: regime.yaml, steps: 0}"), "settings.regime"),
    ]:
        path = tmp_path / "claims.yaml"
        path.write_text(bad)
        with pytest.raises(ConfigError) as e:
            load_claims(path, known_runs=list(RUNS), known_facts=FACTS)
        assert key in e.value.key, (key, str(e.value))


# ---------------------------------------------------------------------------- families (Holm)
def _holm_reference(p: list[float]) -> list[float]:
    """Holm (1979) from its definition, in float64, one claim at a time: claim i is rejected at
    level a when every claim with a smaller p (rank j = 1..r, ties in input order) has
    p_(j) <= a / (m - j + 1); the adjusted p is the smallest such a, max_j (m - j + 1) p_(j)."""
    m = len(p)
    ranked = sorted(range(m), key=lambda i: (p[i], i))
    out = [0.0] * m
    for r, i in enumerate(ranked):
        out[i] = min(1.0, max((m - j) * p[ranked[j]] for j in range(r + 1)))
    return out


def test_holm_on_a_hand_worked_family():
    # m = 4, p = 0.01, 0.04, 0.03, 0.005: sorted 0.005, 0.01, 0.03, 0.04 → ×4, ×3, ×2, ×1 = 0.02,
    # 0.03, 0.06, 0.04 → running max 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm([0.01, math.nan]) == pytest.approx([0.02, 1.0])  # no interval: counts as p = 1
    assert holm([0.02]) == [0.02]  # a family of one is its own p


def test_holm_matches_its_definition_on_random_families():
    import numpy as np

    rng = np.random.default_rng(0)
    for m in (2, 3, 6, 11):
        for _ in range(20):
            p = list(rng.uniform(0, 0.2, m) ** 2)
            p[rng.integers(m)] = p[0]  # a tie
            assert holm(p) == pytest.approx(_holm_reference(p), rel=1e-14, abs=0)


@pytest.mark.parametrize(
    "rule,side", [("greater", "greater"), ("at_least", "greater"), ("less", "less"), ("at_most", "less")]
)
def test_one_sided_p_is_scipys_one_sample_t_test(rule, side):
    import numpy as np

    rng = np.random.default_rng(1)
    bound = 0.0 if rule in ("greater", "less") else 0.3
    for _ in range(30):
        vals = list(rng.normal(bound + rng.normal(0, 0.2), 0.3, size=int(rng.integers(3, 9))))
        ref = stats.ttest_1samp(vals, bound, alternative=side).pvalue
        assert one_sided_p(vals, rule, bound) == pytest.approx(ref, rel=1e-10)
        # the interval's verdict and p < 0.025 are the same test (two-sided 95 % ⇔ one-sided 2.5 %)
        assert (interval_row(vals, rule, bound)["verdict"] == "reproduced") == (
            one_sided_p(vals, rule, bound) < HOLM_ALPHA
        )
    assert math.isnan(one_sided_p([0.4], rule, bound))  # one seed: no test
    assert one_sided_p([bound + 1] * 3, rule, bound) == (0.0 if side == "greater" else 1.0)  # s = 0


def test_holm_verdict_never_upgrades():
    assert holm_verdict("reproduced", 0.02) == "reproduced"
    assert holm_verdict("reproduced", 0.03) == "inconclusive"
    assert holm_verdict("not reproduced", 0.001) == "not reproduced"
    assert holm_verdict("inconclusive", 0.001) == "inconclusive"
    assert holm_verdict("not run", math.nan) == "not run"


def test_family_rows_get_raw_and_holm_verdicts(tmp_path):
    base = next(e for e in _registry()["claims"] if e["id"] == "003-clipcov-entropy")
    entries = []
    for i, run in enumerate(("clip_cov", "kl_cov", "clip_higher")):
        e = copy.deepcopy(base)
        e.update(id=f"fam-{i}", runs=[run, "grpo"], family="demo-family")
        e["metric"] = {**e["metric"], "run": run}
        entries.append(e)
    entries.append(copy.deepcopy(base))  # no family: untouched
    claims = load_claims(_write(tmp_path, entries), known_facts=FACTS)
    assert [c.family for c in claims] == ["demo-family"] * 3 + [None]
    diffs = {
        "clip_cov": [0.2, 0.21, 0.19, 0.2, 0.22],
        "kl_cov": [0.05, 0.09, 0.02, 0.07, 0.06],
        "clip_higher": [0.1, -0.2, 0.3, 0.0, 0.1],
    }
    facts = {"grpo": {s: {"entropy_retention": 0.3} for s in range(5)}}
    for run, d in diffs.items():
        facts[run] = {s: {"entropy_retention": 0.3 + d[s]} for s in range(5)}
    rows = evaluate_claims(facts, list(range(5)), claims)
    plain = copy.deepcopy(rows[3])
    add_family_corrections(rows, claims)
    assert rows[3] == plain and "verdict_holm" not in rows[3]  # a claim without a family is unchanged
    ps = [stats.ttest_1samp(rows[i]["values"], 0.0, alternative="greater").pvalue for i in range(3)]
    want = _holm_reference(ps)
    for i in range(3):
        assert rows[i]["family"] == "demo-family" and rows[i]["family_size"] == 3
        assert rows[i]["p_value"] == pytest.approx(ps[i], rel=1e-10)
        assert rows[i]["holm_p"] == pytest.approx(want[i], rel=1e-10)
        assert rows[i]["verdict_holm"] == holm_verdict(rows[i]["verdict"], want[i])
    assert [r["verdict"] for r in rows[:3]] == ["reproduced", "reproduced", "inconclusive"]
    md = families_markdown(rows)
    assert md.count("| demo-family (3) |") == 3 and "Holm" in md
    # a selection of one member is still corrected for the whole registered family (m = 3)
    one = evaluate_claims(facts, list(range(5)), claims[:1])
    add_family_corrections(one, claims)
    assert one[0]["holm_p"] == pytest.approx(min(1.0, 3 * ps[0]), rel=1e-10)


def test_only_the_real_v2_claims_form_a_family_and_other_rows_are_unchanged():
    families = {c.family for c in CLAIMS} - {None}
    assert families == {"real-v2"}
    members = {c.id for c in CLAIMS if c.family == "real-v2"}
    assert len(members) == 7 and all(m.startswith("real-v2-") for m in members)
    facts = {r: {s: {k: 0.5 + 0.01 * s for k in FACTS} for s in range(5)} for r in RUNS}
    rows = evaluate_claims(facts, list(range(5)))
    before = {r["id"]: json.dumps(json_safe(r), sort_keys=True) for r in rows if r["id"] not in members}
    add_family_corrections(rows)
    after = {r["id"]: json.dumps(json_safe(r), sort_keys=True) for r in rows if r["id"] not in members}
    assert after == before
    fam = [r for r in rows if r["id"] in members]
    assert len(fam) == 7 and all(r["family"] == "real-v2" and r["family_size"] == 7 for r in fam)
    assert families_markdown(rows).count("| real-v2 (7) |") == 7


def test_an_any_of_claim_cannot_join_a_family(tmp_path):
    entry = copy.deepcopy(next(e for e in _registry()["claims"] if e["metric"]["name"] == "any_of"))
    entry["family"] = "f"
    entry.pop("setting", None)  # a file without settings knows only the demo
    with pytest.raises(ConfigError) as e:
        load_claims(_write(tmp_path, [entry]), known_facts=FACTS)
    assert e.value.key == f"claims[{entry['id']}].family"


def test_the_v1_real_claims_are_superseded_and_say_why():
    superseded = {c.id: c.superseded for c in CLAIMS if c.superseded}
    v1 = ("grpo-learns", "collapse", "grpo-coverage", "clipcov-entropy", "klcov-entropy", "clipcov-passk")
    assert sorted(superseded) == sorted(f"real-{c}" for c in v1)
    assert all("real-v2" in why and "learning to stop" in why for why in superseded.values())
    assert not any(c.superseded for c in CLAIMS if c.id.startswith("real-v2-"))
