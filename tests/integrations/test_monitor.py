"""The live entropy-collapse monitors: EntropyMonitorCallback inside a real trl.GRPOTrainer run on CPU
(a tiny Llama learning to write "1"s collapses its entropy in ~30 steps), and the verl EntropyMonitor
on a verl-shaped metrics stream. Their values are checked against an independent re-analysis of the
same history, the warning fires once on collapse and never on a healthy run, and the TRL run's own
logs (trainer_state.json, TensorBoard) are read back by `entflow analyze`."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

pytest.importorskip("trl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from datasets import Dataset
from transformers.utils import logging as hf_logging
from trl import GRPOConfig, GRPOTrainer

from entflow.analysis.collapse import analyze_log, analyze_series
from entflow.analysis.collapse_monitor import MONITOR_KEYS
from entflow.analysis.log_readers import log_from_records
from entflow.cli.main import main
from entflow.errors import ParameterError
from entflow.integrations.trl import EntropyMonitorCallback
from entflow.integrations.verl.monitor import EntropyMonitor
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer

STEPS, EVAL_STEPS = 36, 4


def ones(completions, **kwargs):
    """Share of "1" characters: the policy collapses onto writing 1s and the reward saturates."""
    return [c.count("1") / max(len(c), 1) for c in completions]


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def trl_run(tmp_path_factory):
    """(trainer, callback, warnings, output dir) of a 36-step GRPO run with the callback attached."""
    tok = build_tokenizer("0123456789+-*() >:=")
    model = build_policy(tok, PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=0)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    data = Dataset.from_dict({"prompt": [f"{i} {i + 2}>{3 * i + 1}:" for i in range(8)]})
    out = tmp_path_factory.mktemp("trl_out")
    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=8,
        num_generations=8,
        max_completion_length=8,
        max_steps=STEPS,
        learning_rate=0.01,
        seed=0,
        use_cpu=True,
        report_to="tensorboard",
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=True,
        bf16=False,
        eval_strategy="steps",
        eval_steps=EVAL_STEPS,
        per_device_eval_batch_size=8,
    )
    torch.manual_seed(0)
    trainer = GRPOTrainer(
        model=str(path), reward_funcs=ones, args=args, train_dataset=data, eval_dataset=data, processing_class=tok
    )
    cb = EntropyMonitorCallback().attach(trainer)
    cap = Capture()
    hf_logger = hf_logging.get_logger("transformers.trainer")
    hf_logger.addHandler(cap)
    try:
        trainer.train()
    finally:
        hf_logger.removeHandler(cap)
    trainer.save_state()  # output_dir/trainer_state.json
    return trainer, cb, cap.messages, out


def test_callback_logs_values_of_an_independent_reanalysis(trl_run):
    trainer, cb, _, _ = trl_run
    hist = trainer.state.log_history
    refits = [i for i, r in enumerate(hist) if "entflow/law_ceiling" in r]
    assert cb.n_refits == STEPS // EVAL_STEPS  # one refit per evaluation
    assert [hist[i]["step"] for i in refits] == list(range(EVAL_STEPS, STEPS + 1, EVAL_STEPS))
    for i in refits:
        # the history as it stood when the callback ran: everything before this record, and its eval_* values
        before = [{k: v for k, v in r.items() if not k.startswith("entflow/")} for r in hist[: i + 1]]
        _, an = analyze_log(log_from_records(before))
        assert hist[i]["entflow/law_ceiling"] == pytest.approx(an.ceiling, rel=1e-12)
        assert hist[i]["entflow/entropy_retention"] == pytest.approx(an.entropy["retention"], rel=1e-12)
        if "entflow/pred_final" in hist[i]:
            assert hist[i]["entflow/pred_final"] == pytest.approx(an.prediction["final"], rel=1e-12)
    # and the same retention by hand from the logged entropies
    H = np.array([r["entropy"] for r in hist if "entropy" in r])
    assert hist[refits[-1]]["entflow/entropy_retention"] == pytest.approx(H[-7:].mean() / H[:1].mean(), rel=1e-12)


def test_callback_warns_once_on_collapse(trl_run):
    trainer, cb, warnings, _ = trl_run
    hist = trainer.state.log_history
    H = [r["entropy"] for r in hist if "entropy" in r]
    assert H[-1] < 0.2 * H[0]  # the run did collapse (the premise of this test)
    collapse_warnings = [m for m in warnings if m.startswith("entflow: entropy collapse")]
    assert len(collapse_warnings) == 1 and collapse_warnings[0] == cb.warning
    assert "kl_cov" in cb.warning and "retention" in cb.warning
    assert cb.analysis.collapse["verdict"] == "collapsed"


def test_trl_logs_read_back_by_entflow_analyze(trl_run, tmp_path):
    _, _, _, out = trl_run
    log, an = analyze_log(out)  # trainer_state.json first
    assert log.format == "trl-state"
    tb_dirs = {p.parent for p in out.rglob("events.out.tfevents*")}
    assert len(tb_dirs) == 1
    tb, an_tb = analyze_log(tb_dirs.pop())
    assert tb.format == "tensorboard"
    assert {f"eval/{k[5:]}" if k.startswith("eval_") else f"train/{k}" for k in an.source["keys"].values()} == set(
        an_tb.source["keys"].values()
    )
    assert an_tb.law.params["a"] == pytest.approx(an.law.params["a"], rel=1e-4)  # float32 in TensorBoard
    trainer = trl_run[0]
    for key in MONITOR_KEYS:  # attach() put the callback before TensorBoard's: the reporter wrote entflow/*
        logged = [(r["step"], r[key]) for r in trainer.state.log_history if key in r]
        steps, values = tb.series[f"train/{key}"]  # transformers' rewrite_logs prefixes non-eval keys
        assert steps.tolist() == [s for s, _ in logged]
        np.testing.assert_allclose(values, [v for _, v in logged], rtol=1e-6)
    assert main(["analyze", str(out), "--out", str(tmp_path / "a"), "--json"]) == 0
    assert (tmp_path / "a" / "analysis.json").is_file()


def verl_stream(n: int, collapse: bool):
    rng = np.random.default_rng(0)
    for s in range(1, n + 1):
        H = 0.2 + 1.3 * np.exp(-s / 15) if collapse else 1.5 - 0.001 * s
        R = -0.1 * np.exp(H) + 0.6 + rng.normal(0, 0.003) if collapse else 0.1 + 0.004 * s
        m = {"actor/entropy": float(H), "critic/score/mean": float(R), "actor/pg_clipfrac": 0.01}
        if s % 5 == 0:
            m["val-core/gsm8k/acc/mean@1"] = float(R)
        yield s, m


def test_verl_monitor(caplog):
    mon = EntropyMonitor(every=10)
    logged = []
    with caplog.at_level(logging.WARNING, logger="entflow.integrations.verl.monitor"):
        for s, m in verl_stream(100, collapse=True):
            logged.append(dict(mon.update(m, step=s)))
    refit = [d for d in logged if "entflow/law_ceiling" in d]
    assert len(refit) == 20  # every 5th step carries validation: refit there (10, 20 … included)
    # the values at step 100 equal analyze_series on the same arrays
    steps = np.arange(1, 101)
    H = np.array([d["actor/entropy"] for d in logged])
    R = np.array([d["critic/score/mean"] for d in logged])
    vs = steps[4::5]
    an = analyze_series(steps, H, R, val_steps=vs, val=R[4::5])
    assert logged[-1]["entflow/law_ceiling"] == pytest.approx(an.ceiling, rel=1e-12)
    assert logged[-1]["entflow/entropy_retention"] == pytest.approx(an.entropy["retention"], rel=1e-12)
    warnings = [r for r in caplog.records if "entropy collapse" in r.getMessage()]
    assert len(warnings) == 1 and mon.warning is not None
    # a healthy run (entropy retained, reward rising): values logged, no warning
    ok = EntropyMonitor(every=10)
    for s, m in verl_stream(100, collapse=False):
        ok.update(m, step=s)
    assert ok.warning is None and ok.analysis.collapse["verdict"] == "healthy"


def test_callback_every_n_logging_steps_without_evaluation():
    """Without evaluation the callback refits every `every` training logs, on the history so far."""
    from types import SimpleNamespace

    from transformers import TrainerControl, TrainerState

    cb = EntropyMonitorCallback(every=5)
    state, args = TrainerState(), SimpleNamespace(eval_strategy="no")
    for s, m in verl_stream(40, collapse=True):
        logs = {"loss": 0.0, "entropy": m["actor/entropy"], "reward": m["critic/score/mean"]}
        state.global_step = s
        state.log_history.append({**logs, "step": s})
        cb.on_log(args, state, TrainerControl(), logs=logs)
    cb.on_log(args, state, TrainerControl(), logs={"train_runtime": 1.0})  # the end summary: no refit
    refit = [r["step"] for r in state.log_history if "entflow/law_ceiling" in r]
    assert refit == list(range(5, 41, 5)) and cb.n_refits == 8
    clean = [{k: v for k, v in r.items() if not k.startswith("entflow/")} for r in state.log_history]
    _, an = analyze_log(log_from_records(clean))
    assert state.log_history[-1]["entflow/law_ceiling"] == pytest.approx(an.ceiling, rel=1e-12)


def test_monitor_parameters_are_checked():
    with pytest.raises(ParameterError, match="every"):
        EntropyMonitorCallback(every=0)
    with pytest.raises(ParameterError, match="every"):
        EntropyMonitor(every=-1)
