"""entflow's CPU rollout for verl (``rollout.name=entflow_cpu``) and run_cpu.sh's input checks.

The rollout server is tested as an object (no Ray): its greedy responses equal ``transformers``'
own greedy ``generate``, its log-probs equal log softmax(z / T) of a fresh forward, top-k = 1
sampling is greedy, and ``set_weights`` changes what it generates. The end-to-end run (verl's
``main_ppo`` with Ray) is the ``.ci/verl-cpu`` lane; one update of verl's actor is
``test_verl_actor.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl")
pytest.importorskip("transfer_queue", reason="verl's rollout stack (entflow[verl])")

from entflow.integrations.verl.cpu_rollout import CPURolloutServer
from support.verl_actor_run import tiny_llama

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "verl" / "run_cpu.sh"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return tiny_llama(tmp_path_factory.mktemp("tiny"))


def server(model_dir: str, response_length: int = 6) -> CPURolloutServer:
    from omegaconf import OmegaConf

    model_config = OmegaConf.create(
        {"_target_": "verl.workers.config.HFModelConfig", "path": model_dir, "trust_remote_code": False}
    )
    return CPURolloutServer(SimpleNamespace(response_length=response_length, seed=0), model_config, 0)


def generate(s: CPURolloutServer, prompt: list[int], **params):
    import asyncio

    return asyncio.run(s.generate("r", prompt_ids=prompt, sampling_params=params))


def test_greedy_equals_transformers_generate_and_log_probs_equal_a_forward(model_dir):
    s = server(model_dir)
    prompt = [5, 6, 7, 8]
    out = generate(s, prompt, temperature=0.0, logprobs=True)
    ref = s.model.generate(
        torch.tensor([prompt]), do_sample=False, max_new_tokens=6, eos_token_id=sorted(s._eos_ids()), pad_token_id=0
    )[0, len(prompt) :].tolist()
    assert out.token_ids == ref[: len(out.token_ids)] and len(out.token_ids) >= 1
    with torch.no_grad():
        z = s.model(input_ids=torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
    lp = torch.log_softmax(z, -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert out.log_probs == pytest.approx(lp.tolist(), abs=1e-5)
    assert out.stop_reason == "completed"


def test_top_k_one_is_greedy_and_temperature_scales_the_log_probs(model_dir):
    s = server(model_dir)
    greedy = generate(s, [9, 10, 11], temperature=0.0).token_ids
    assert generate(s, [9, 10, 11], temperature=1.3, top_k=1).token_ids == greedy
    out = generate(s, [9, 10, 11], temperature=2.0, logprobs=True)
    with torch.no_grad():
        z = s.model(input_ids=torch.tensor([[9, 10, 11, *out.token_ids]])).logits[0, 2:-1]
    lp = torch.log_softmax(z / 2.0, -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert out.log_probs == pytest.approx(lp.tolist(), abs=1e-5)


def test_set_weights_changes_the_policy_and_refuses_unknown_names(model_dir):
    s = server(model_dir)
    before = generate(s, [5, 6, 7], temperature=0.0).token_ids
    w = s.model.lm_head.weight.detach().clone()
    target = (before[0] + 1) % w.shape[0]
    w[target] += 100.0 * s.model.model(input_ids=torch.tensor([[5, 6, 7]])).last_hidden_state[0, -1].detach()
    assert s.set_weights({"lm_head.weight": w}, global_steps=3) == 1
    out = generate(s, [5, 6, 7], temperature=0.0)
    assert out.token_ids[0] == target and out.extra_fields["global_steps"] == 3
    with pytest.raises(KeyError, match="not_a_weight"):
        s.set_weights({"not_a_weight": w})


class _SharedDraws:
    """A DrawCounter behind a ``.next.remote(...)`` awaitable, as the Ray actor is called."""

    def __init__(self) -> None:
        from entflow.integrations.verl.cpu_rollout import DrawCounter

        counter = DrawCounter()

        async def remote(*args):
            return counter.next(*args)

        self.next = SimpleNamespace(remote=remote)


def test_sampling_depends_on_seed_weights_and_prompt_not_on_server_order_or_history(model_dir):
    """A response's draw is seeded by (rollout seed, weights version, prompt, k-th request for the
    prompt): a fresh server (a resumed run) draws what a server that generated before drew; requests
    spread over two servers sharing one counter, in another order, draw the same multiset."""
    import asyncio

    def draws(servers, order, version=2):
        for s in servers:
            s.weights_version = version

        async def go():
            return [
                (p, (await servers[i % len(servers)].generate("r", prompt_ids=p, sampling_params={})).token_ids)
                for i, p in enumerate(order)
            ]

        return asyncio.run(go())

    a, b = [5, 6, 7], [9, 10, 11, 12]
    used = server(model_dir, response_length=8)
    draws([used], [a, b, a], version=1)  # history at an older version: nothing carried over
    first = draws([used], [a, a, a, a, b, b])
    assert len({tuple(t) for p, t in first if p == a}) > 1  # four draws of one prompt differ
    assert draws([server(model_dir, response_length=8)], [a, a, a, a, b, b]) == first  # a fresh server
    shared = _SharedDraws()
    two = [server(model_dir, response_length=8), server(model_dir, response_length=8)]
    for s in two:
        s.draws = shared
    spread = draws(two, [b, a, a, b, a, a])
    assert sorted(map(str, spread)) == sorted(map(str, first))
    assert draws([server(model_dir, response_length=8)], [a, a, a, a, b, b], version=3) != first
    assert generate(server(model_dir), a, temperature=0.0).token_ids  # greedy: no draw, no counter


def test_placement_asks_for_a_slot_where_the_cluster_declares_slots(monkeypatch):
    """verl builds each placement bundle as {"CPU": k, platform.ray_resource_name(): 1}: the cpu
    platform names ``entflow_cpu_slot`` where the Ray cluster declares it (a node then hosts as many
    actor workers as it has slots, as with GPUs), and plain ``CPU`` otherwise (or without Ray)."""
    import ray

    from entflow.integrations.verl import cpu

    platform = cpu._platform_class()()
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert platform.ray_resource_name() == "CPU"
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 2.0})
    assert platform.ray_resource_name() == "CPU"
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 16.0, "GPU": 2.0, cpu.SLOT: 2.0})
    assert platform.ray_resource_name() == cpu.SLOT
    assert platform.ray_resource_options(1 / 3) == {"num_cpus": 1 / 3}  # the worker itself asks for CPU only


def _run_cpu(tmp_path, **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(SCRIPT)], env=full, capture_output=True, text=True, timeout=300)


def test_run_cpu_refuses_bad_input_before_ray_starts(tmp_path):
    r = _run_cpu(tmp_path, METHOD="not_a_method", OUT=str(tmp_path / "out"))
    assert r.returncode == 2 and "METHOD=not_a_method" in r.stderr and "unknown method" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "out").exists()
    r = _run_cpu(tmp_path, METHOD="grpo", OUT=str(tmp_path / "missing" / "out"))
    assert r.returncode == 2 and "parent folder" in r.stderr and str(tmp_path / "missing") in r.stderr
    r = _run_cpu(tmp_path, METHOD="grpo", OUT="")
    assert r.returncode == 2 and "OUT is not set" in r.stderr
    r = _run_cpu(tmp_path, METHOD="grpo", NODES="3", OUT=str(tmp_path / "out"))
    assert r.returncode == 2 and "NODES=3: must be 1 or 2" in r.stderr and not (tmp_path / "out").exists()


def test_merge_joins_attempts_and_writes_verls_own_step_timings(tmp_path):
    """``cpu_prepare.py merge`` on two attempts of a real run's log (tests/fixtures/logs/verl): the
    later attempt's line wins for a step logged twice, and timing.json holds verl's ``timing_s/*``
    of every step as logged."""
    import json

    lines = (ROOT / "tests" / "fixtures" / "logs" / "verl" / "verl.jsonl").read_text().splitlines()
    attempts = tmp_path / "attempts"
    attempts.mkdir()
    (attempts / "1.jsonl").write_text("\n".join(lines[:2]) + "\n")  # killed after step 2
    rerun = json.loads(lines[1])
    rerun["data"]["timing_s/step"] = 123.0  # the resumed attempt logs step 2 again: its line is kept
    (attempts / "2.jsonl").write_text(json.dumps(rerun) + "\n" + lines[2] + "\n")
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "verl" / "cpu_prepare.py"),
            "merge",
            str(tmp_path),
            "tiny",
            "kl_cov",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    merged = [json.loads(x) for x in (tmp_path / "verl.jsonl").read_text().splitlines()]
    assert [m["step"] for m in merged] == [1, 2, 3] and merged[1]["data"]["timing_s/step"] == 123.0
    timing = json.loads((tmp_path / "timing.json").read_text())
    assert (timing["model"], timing["method"]) == ("tiny", "kl_cov")
    for row, rec in zip(timing["steps"], merged, strict=True):
        assert row["step"] == rec["step"] and row["total"] == rec["data"]["timing_s/step"]
        for part in ("gen", "update_actor", "update_weights", "old_log_prob"):
            assert row[part] == rec["data"][f"timing_s/{part}"]
    assert timing["versions"]["verl"] and timing["machine"]["cores"] == os.cpu_count()
