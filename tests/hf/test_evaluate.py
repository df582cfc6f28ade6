"""entflow.hf.evaluate: pass@k against brute-force enumeration, maj@k, standard errors, batched
left-padded generation (equal to one prompt at a time), the entropy of the samples (equal to a
separate forward pass), and ``run_eval``'s bad input failing before any work (the command,
``entflow eval --model ... --data ...``, is tested in tests/cli/test_cli_eval.py)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from entflow.errors import ConfigError, UnknownMethodError
from entflow.hf.evaluate import (
    SamplingConfig,
    generate_batched,
    majority_correct,
    mean_and_se,
    pass_at_k,
    run_eval,
)
from support.hf_sampling import reference_sample
from support.real_tiny import save_tiny_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def brute_force_pass_at_k(correct: list[bool], k: int) -> float:
    """Fraction of the k-subsets of the samples that contain a correct one."""
    subsets = list(itertools.combinations(range(len(correct)), k))
    return sum(any(correct[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", [1, 2, 4, 5, 7])
def test_pass_at_k_equals_brute_force(n):
    for c in range(n + 1):
        correct = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(correct, k), abs=1e-12)
    assert pass_at_k(n, 0, 1) == 0.0 and pass_at_k(n, n, 1) == 1.0


def test_pass_at_k_rejects_k_above_n():
    with pytest.raises(ConfigError, match="k"):
        pass_at_k(3, 1, 4)


def test_majority_vote():
    same = lambda a, b: a == b  # noqa: E731
    assert majority_correct(["7", "8", "7", None], [1, 0, 1, 0], same) == 1.0
    assert majority_correct(["8", "7", "8", "7"], [0, 1, 0, 1], same) == 0.0  # tie → first seen ("8")
    assert majority_correct([None, None], [0, 0], same) == 0.0  # nothing parseable
    assert majority_correct([None, "3", None], [0, 1, 0], same) == 1.0  # unparseable does not vote
    # grouping by a custom equivalence (math-verify groups 1/2 with 0.5)
    eq = lambda a, b: abs(float(a) - float(b)) < 1e-9  # noqa: E731
    assert majority_correct(["0.5", "0.50", "2"], [1, 1, 0], eq) == 1.0


def test_mean_and_se_matches_numpy():
    x = [0.0, 1.0, 1.0, 0.25, 0.5]
    m, se = mean_and_se(x)
    assert m == pytest.approx(np.mean(x))
    assert se == pytest.approx(np.std(x, ddof=1) / math.sqrt(len(x)))
    assert mean_and_se([1.0]) == (1.0, 0.0)


def test_batched_left_padded_generation_matches_one_at_a_time(tiny_dir):
    from entflow.hf.models import load_model

    model, tok = load_model(str(tiny_dir))
    prompts = ["<|im_start|>user\nCalculate 3 + 4.<|im_end|>\n<|im_start|>assistant\n", "What is 12 - 5?", "9"]
    s = SamplingConfig(max_new_tokens=6, batch_size=8)
    batched = generate_batched(model, tok, prompts, 1, s, greedy=True)
    single = [generate_batched(model, tok, [p], 1, s, greedy=True).texts[0] for p in prompts]
    assert batched.texts == single
    # sampling is reproducible from the seed and grouped per prompt
    a = generate_batched(model, tok, prompts, 3, s)
    b = generate_batched(model, tok, prompts, 3, s)
    assert a.texts == b.texts and len(a.texts) == 9


def test_sample_entropy_equals_forward_pass(tiny_dir):
    """The recorded entropy of each sampled token equals the entropy of softmax(logits / T) from
    a separate forward pass over [prompt | response] (the lab trainer's response_token_stats)."""
    from entflow.hf.models import load_model
    from entflow.trainer.rollout import response_token_stats
    from entflow.trainer.tokens import encode_prompts, response_mask

    model, tok = load_model(str(tiny_dir))
    prompts = ["Calculate 3 + 4.", "What is 12 - 5? It is"]
    T = 0.7
    s = SamplingConfig(temperature=T, max_new_tokens=5, seed=3)
    gen = generate_batched(model, tok, prompts, 2, s)
    # regenerate the same ids to get the tokens (same seed → same samples)
    enc = encode_prompts(tok, prompts)
    torch.manual_seed(3)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        seq = reference_sample(model, tok, enc, T, 5, num_return_sequences=2)
    resp = seq[:, enc["input_ids"].shape[1] :]
    mask = response_mask(tok, resp)
    ids = enc["input_ids"].repeat_interleave(2, 0)
    am = enc["attention_mask"].repeat_interleave(2, 0)
    with torch.no_grad():
        st = response_token_stats(model, ids, am, resp.masked_fill(mask == 0, tok.pad_token_id), T)
    expected = (st.entropy * mask).sum(-1)
    assert gen.lengths == [int(v) for v in mask.sum(-1)]
    assert torch.allclose(torch.tensor(gen.entropy), expected.float(), atol=1e-4)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _forbid_loading(monkeypatch):
    import entflow.hf.models

    def boom(*a, **k):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(entflow.hf.models, "load_model", boom)


def test_eval_bad_input_fails_before_work(tiny_dir, tmp_path, monkeypatch):
    _forbid_loading(monkeypatch)
    good = _jsonl(tmp_path / "g.jsonl", [{"prompt": "1+1?", "answer": "2"}] * 4)
    with pytest.raises(ConfigError, match="k=5 exceeds n_samples=4"):
        run_eval(str(tiny_dir), str(good), n=2, k=5, n_samples=4)
    with pytest.raises(ConfigError, match=r"'model'.*no/such/model"):
        run_eval("no/such/model/dir", str(good), n=2, k=1)
    with pytest.raises(UnknownMethodError, match="gsm_symbolc"):
        run_eval(str(tiny_dir), "gsm_symbolc", n=2, k=1)
    bad = _jsonl(tmp_path / "b.jsonl", [{"question": "1+1?", "answer": "2"}])
    with pytest.raises(ConfigError, match=r"'prompt'.*question"):
        run_eval(str(tiny_dir), str(bad), n=1, k=1)
    with pytest.raises(ConfigError, match="'n'"):
        run_eval(str(tiny_dir), str(good), n=5, k=1)
    with pytest.raises(UnknownMethodError, match="reward"):
        run_eval(str(tiny_dir), str(good), n=1, k=1, reward="bleu")
