"""Run TRL's own GRPO test file twice, offline: A with ``trl.GRPOTrainer``, B with the one-line swap to
``EntflowGRPOTrainer`` (docs/integrations.md, "TRL's GRPO tests, run against the adapter").

TRL's tests load tiny models and the ``zen`` prompt sets from the hub. Here they are stand-ins built
in-process: tiny random models of the classes the tests name (Qwen2, Qwen3, Qwen3-MoE, Llama, Mistral,
Gemma2, Cohere2, GLM-4-MoE, GPT-OSS; causal LMs and sequence classifiers), each with a byte-level BPE
tokenizer trained here and TRL's own chat template for that family, put in a Hugging Face cache
directory that ``HF_HUB_OFFLINE=1`` resolves; and the ``zen`` prompt sets (the Zen of Python, standard
and conversational), returned by ``datasets.load_dataset`` when this module is loaded as a pytest
plugin. TRL's test code is read from a checkout of TRL's repository and copied to a scratch directory;
nothing of it is kept here.

    python tests/support/trl_suite.py TRL_CHECKOUT WORKDIR [pytest args...]

prints the counts of A and B and every test whose outcome differs, and writes them to
``WORKDIR/trl_suite.json`` (with the date, machine, command, versions and TRL's commit) for
``python benchmarks/docs_tables.py --print trl-suite FILE`` to print. Vision models (the ``zen-image``
sets), models with remote code and GPU-only kernels have no stand-in; those tests fail or skip on
both sides alike.
"""

from __future__ import annotations

import codecs
import contextlib
import hashlib
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

SWAP = (
    "from trl import GRPOConfig, GRPOTrainer\n",
    "from entflow.integrations.trl import EntflowGRPOConfig as GRPOConfig, EntflowGRPOTrainer as GRPOTrainer\n",
)
with contextlib.redirect_stdout(io.StringIO()):  # importing `this` prints the Zen of Python
    import this
ZEN = [line for line in codecs.decode(this.s, "rot13").splitlines() if line.strip()][1:]


# --------------------------------------------------------------------------------------------
# the zen prompt sets (pytest plugin part)
# --------------------------------------------------------------------------------------------


def zen(config: str):
    """``DatasetDict`` of the zen prompts: ``train`` 17 rows, ``test`` 3 rows."""
    from datasets import Dataset, DatasetDict

    def rows(lines: list[str]) -> dict:
        if config == "standard_prompt_only":
            return {"prompt": lines}
        if config == "conversational_prompt_only":
            return {"prompt": [[{"role": "user", "content": line}] for line in lines]}
        raise FileNotFoundError(f"no offline stand-in for zen config {config!r}")

    return DatasetDict(train=Dataset.from_dict(rows(ZEN[:17])), test=Dataset.from_dict(rows(ZEN[17:19] + ZEN[:1])))


def patch_load_dataset() -> None:
    """``datasets.load_dataset`` answers ``trl-internal-testing/zen`` offline (before test modules import it)."""
    import datasets

    original = datasets.load_dataset

    def load_dataset(path, name=None, split=None, streaming=False, **kw):
        if path != "trl-internal-testing/zen":
            return original(path, name, split=split, streaming=streaming, **kw)
        sets = zen(name)
        if streaming:
            sets = {k: v.to_iterable_dataset() for k, v in sets.items()}
        return sets if split is None else sets[split]

    datasets.load_dataset = load_dataset


if os.environ.get("ENTFLOW_TRL_SUITE_PLUGIN") == "1":
    patch_load_dataset()


# --------------------------------------------------------------------------------------------
# model and tokenizer stand-ins
# --------------------------------------------------------------------------------------------

QWEN = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>"]
LLAMA = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
         "<|finetune_right_pad_id|>", "<|python_tag|>", "<|eom_id|>"]  # fmt: skip
MISTRAL_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)
# family → (TRL chat template file or a template, special tokens, eos, pad, bos)
TOKENIZERS = {
    "qwen2": ("qwen2_5.jinja", QWEN, "<|im_end|>", "<|endoftext|>", None),
    "qwen3": ("qwen3.jinja", QWEN, "<|im_end|>", "<|endoftext|>", None),
    "llama": ("llama3_2.jinja", LLAMA, "<|eot_id|>", "<|finetune_right_pad_id|>", "<|begin_of_text|>"),
    "mistral": (MISTRAL_TEMPLATE, ["<unk>", "<s>", "</s>", "[INST]", "[/INST]"], "</s>", "<unk>", "<s>"),
    "gemma": ("gemma.jinja", ["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"], "<end_of_turn>",
              "<pad>", "<bos>"),
    "cohere2": ("cohere2.jinja", ["<PAD>", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>",
                "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"],
                "<|END_OF_TURN_TOKEN|>", "<PAD>", "<BOS_TOKEN>"),
    "glm4moe": ("glm4moe.jinja", ["<|endoftext|>", "[gMASK]", "<sop>", "<|user|>", "<|assistant|>", "<|system|>",
                "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>"], "<|user|>", "<|endoftext|>",
                None),
    "gptoss": ("gptoss.jinja", ["<|endoftext|>", "<|startoftext|>", "<|start|>", "<|end|>", "<|message|>",
               "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>"], "<|return|>", "<|endoftext|>",
               "<|startoftext|>"),
}  # fmt: skip
SMALL = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
MOE = dict(num_experts_per_tok=2, moe_intermediate_size=16)
# repo name under trl-internal-testing → (config class, model class, tokenizer family, extra config)
MODELS = {
    "tiny-Qwen2ForCausalLM-2.5": ("Qwen2Config", "Qwen2ForCausalLM", "qwen2", {}),
    "tiny-Qwen2ForSequenceClassification-2.5": ("Qwen2Config", "Qwen2ForSequenceClassification", "qwen2",
                                                {"num_labels": 1}),
    "tiny-Qwen3ForCausalLM": ("Qwen3Config", "Qwen3ForCausalLM", "qwen3", {"head_dim": 8}),
    "tiny-Qwen3ForSequenceClassification": ("Qwen3Config", "Qwen3ForSequenceClassification", "qwen3",
                                            {"head_dim": 8, "num_labels": 1}),
    "tiny-Qwen3MoeForCausalLM": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "qwen3",
                                 {"head_dim": 8, "num_experts": 4, **MOE}),
    "tiny-LlamaForCausalLM-3.2": ("LlamaConfig", "LlamaForCausalLM", "llama", {}),
    "tiny-LlamaForSequenceClassification-3.2": ("LlamaConfig", "LlamaForSequenceClassification", "llama",
                                                {"num_labels": 1}),
    "tiny-MistralForCausalLM-0.2": ("MistralConfig", "MistralForCausalLM", "mistral", {}),
    "tiny-Gemma2ForCausalLM": ("Gemma2Config", "Gemma2ForCausalLM", "gemma", {"head_dim": 8}),
    "tiny-Cohere2ForCausalLM": ("Cohere2Config", "Cohere2ForCausalLM", "cohere2", {}),
    "tiny-Glm4MoeForCausalLM": ("Glm4MoeConfig", "Glm4MoeForCausalLM", "glm4moe",
                                {"head_dim": 8, "n_routed_experts": 4, "first_k_dense_replace": 1, "n_group": 1,
                                 "topk_group": 1, **MOE}),
    "tiny-GptOssForCausalLM": ("GptOssConfig", "GptOssForCausalLM", "gptoss",
                               {"head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2}),
}  # fmt: skip


def build_tokenizer(family: str):
    """A byte-level BPE tokenizer (600 entries, trained on the Zen of Python) with the family's chat template."""
    import trl
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    template, specials, eos, pad, bos = TOKENIZERS[family]
    specials = list(dict.fromkeys([*specials, eos, pad] + ([bos] if bos else [])))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([*ZEN * 3, "0 1 2 3 4 5 6 7 8 9 + - * / = ( ) . , ?"], trainer)
    if template.endswith(".jinja"):
        template = (Path(trl.__file__).parent / "chat_templates" / template).read_text()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, pad_token=pad, bos_token=bos, chat_template=template,
        clean_up_tokenization_spaces=False,
    )  # fmt: skip


def build_cache(cache: Path) -> None:
    """Every stand-in saved in the Hugging Face cache layout under ``cache`` (``HF_HUB_CACHE``)."""
    import torch
    import transformers

    for name, (cfg_name, model_name, family, extra) in MODELS.items():
        root = cache / f"models--trl-internal-testing--{name}"
        if (root / "refs" / "main").exists():
            continue
        tok = build_tokenizer(family)
        cfg = getattr(transformers, cfg_name)(
            vocab_size=len(tok), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
            bos_token_id=tok.bos_token_id, **SMALL, **extra,
        )  # fmt: skip
        torch.manual_seed(0)
        model = getattr(transformers, model_name)(cfg)
        if getattr(model, "generation_config", None) is not None:
            model.generation_config.pad_token_id = tok.pad_token_id
            model.generation_config.eos_token_id = tok.eos_token_id
        revision = hashlib.sha1(name.encode()).hexdigest()
        snapshot = root / "snapshots" / revision
        snapshot.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(snapshot)
        tok.save_pretrained(snapshot)
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(revision)


# --------------------------------------------------------------------------------------------
# A / B
# --------------------------------------------------------------------------------------------


def prepare(trl_checkout: Path, work: Path) -> tuple[Path, Path]:
    """Copy TRL's ``tests/`` to ``work``; write B (the one-line swap). Returns (A file, B file)."""
    import_utils = importlib.import_module("trl.import_utils")
    tests = work / "tests"
    if tests.exists():
        shutil.rmtree(tests)
    shutil.copytree(trl_checkout / "tests", tests)
    utils = tests / "testing_utils.py"
    text = utils.read_text()
    block = re.search(r"from trl\.import_utils import \((.*?)\)", text, flags=re.S)
    for name in re.findall(r"(is_\w+_available)", block.group(1) if block else ""):
        if not hasattr(import_utils, name):  # a name newer than the installed TRL: its feature is absent
            text = text.replace(f"    {name},\n", "", 1) + f"\n\ndef {name}():\n    return False\n"
    utils.write_text(text)
    a = tests / "test_grpo_trainer.py"
    source = a.read_text()
    if SWAP[0] not in source:
        raise SystemExit(f"{a} does not contain the line {SWAP[0]!r}")
    b = tests / "test_grpo_trainer_entflow.py"
    b.write_text(source.replace(SWAP[0], SWAP[1], 1))
    return a, b


def outcomes(log: str) -> dict[str, str]:
    """test id → PASSED / FAILED / SKIPPED / ERROR / XFAIL / XPASS from pytest's ``-rA`` summary."""
    found = {}
    for kind, test in re.findall(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS) (\S+)", log, flags=re.M):
        found[test.split("::", 1)[-1]] = kind  # a collection error names the file
    return found


def _summary_line(log: str) -> str:
    """pytest's final summary line, the log's last non-empty line ("" for an empty log)."""
    return log.strip().splitlines()[-1] if log.strip() else ""


def counts(log: str) -> dict[str, int]:
    """pytest's final summary line (``111 passed, 33 failed, 31 skipped in 1200.5s``) as counts."""
    last = _summary_line(log)
    found = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", last)}
    if "error" in found:
        found["errors"] = found.pop("error")
    return found


def wall_seconds(log: str) -> float | None:
    """The wall time pytest's final summary line reports (``… in 1423.20s (0:23:43)``), or None."""
    last = _summary_line(log)
    found = re.search(r" in ([\d.]+)s\b", last)
    return float(found.group(1)) if found else None


def record(trl_checkout: Path, argv: list[str], logs: dict[str, str]) -> dict:
    """The run as data: counts and per-test outcomes of both sides, and where and with what they ran."""
    import datetime
    import platform

    import transformers
    import trl

    from entflow.evidence.records import cpu_model

    def git(*args: str, cwd: Path) -> str:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else "unknown"

    repo = Path(__file__).resolve().parents[2]
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, one core per side (OMP_NUM_THREADS=1)",
        "command": "python tests/support/trl_suite.py TRL_CHECKOUT WORKDIR" + "".join(f" {a}" for a in argv[2:]),
        "versions": {
            "trl": trl.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "trl_commit": git("rev-parse", "HEAD", cwd=trl_checkout),
        "entflow_commit": git("rev-parse", "--short", "HEAD", cwd=repo),
        "sides": {
            side: {
                "trainer": trainer,
                "counts": counts(logs[side]),
                "seconds": wall_seconds(logs[side]),
                "outcomes": outcomes(logs[side]),
            }
            for side, trainer in (("A", "trl.GRPOTrainer"), ("B", "EntflowGRPOTrainer"))
        },
    }


def main(argv: list[str]) -> int:
    trl_checkout, work, extra = Path(argv[0]), Path(argv[1]), argv[2:]
    work.mkdir(parents=True, exist_ok=True)
    build_cache(work / "hf-cache")
    a, b = prepare(trl_checkout, work)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_CACHE": str(work / "hf-cache"),
           "ENTFLOW_TRL_SUITE_PLUGIN": "1", "PYTHONPATH": str(Path(__file__).parent), "CUDA_VISIBLE_DEVICES": "",
           "OMP_NUM_THREADS": "1"}  # fmt: skip
    cmd = [sys.executable, "-m", "pytest", "-p", "trl_suite", "-p", "no:cacheprovider", "-q", "-rA"]
    runs = {
        side: subprocess.Popen([*cmd, str(path), *extra], cwd=work, env=env, stdout=subprocess.PIPE, text=True)
        for side, path in (("A", a), ("B", b))
    }
    logs = {side: p.communicate()[0] for side, p in runs.items()}
    for side, log in logs.items():
        (work / f"{side}.log").write_text(log)
        print(side, log.strip().splitlines()[-1])
    a_out, b_out = outcomes(logs["A"]), outcomes(logs["B"])
    differ = sorted(t for t in a_out.keys() | b_out.keys() if a_out.get(t) != b_out.get(t))
    for t in differ:
        print(f"{a_out.get(t, 'SKIPPED')} with trl.GRPOTrainer, {b_out.get(t, 'SKIPPED')} with EntflowGRPOTrainer: {t}")
    result = work / "trl_suite.json"
    result.write_text(json.dumps(record(trl_checkout, argv, logs), indent=1) + "\n")
    print(f"wrote {result}")
    return 1 if any(a_out.get(t) == "PASSED" for t in differ) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
