"""The KV cache keyword against the installed transformers (``.ci/real-range`` runs this at both
ends of the `[real]` extra's range): newer releases take the cache as ``cache`` and deprecate
``past_key_values``; entflow's shared-prompt forward and its ``generate`` pass whichever the
model's forward names (:func:`entflow.trainer.shared_prompts.cache_kwarg`)."""

from __future__ import annotations

import inspect
import warnings

import torch

from entflow.hf.models import chat_prompt, prepare_tokenizer
from entflow.trainer.rollout import generate
from entflow.trainer.shared_prompts import cache_kwarg, shared_response_forward
from support.real_tiny import save_tiny_model


def test_shared_prompts_pass_the_cache_by_the_installed_name(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = save_tiny_model(tmp_path / "tiny")
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tok = prepare_tokenizer(AutoTokenizer.from_pretrained(path), model)
    named = inspect.signature(type(model).forward).parameters
    assert cache_kwarg(model) == ("cache" if "cache" in named else "past_key_values")
    prompts = [chat_prompt(tok, q) for q in ("Calculate 3 + 4.", "What is 12 - 5?")]
    with warnings.catch_warnings():  # a deprecated keyword warns (FutureWarning): fail on it
        warnings.filterwarnings("error", message=".*past_key_values.*", category=FutureWarning)
        torch.manual_seed(0)
        gen = generate(model, tok, prompts, 6, n=3, share_prompts=True, output_logits=True)
        enc = tok(prompts, return_tensors="pt", padding=True)
        ids = enc["input_ids"].repeat_interleave(3, 0)
        mask = enc["attention_mask"].repeat_interleave(3, 0)
        logits = shared_response_forward(model, ids, mask, gen.response_ids)
    assert logits.shape[:2] == gen.response_ids.shape
