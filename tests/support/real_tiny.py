"""A tiny in-process "real" model for the tests of entflow.hf (models, data, evaluate, setup):
a byte-level BPE tokenizer trained here on a few lines, with a ChatML chat template and
``<|im_end|>`` as the end of a turn, and a ~0.2 M-parameter Llama. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import torch

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "Calculate 3 + 4. The answer is 7.",
    "What is 12 - 5? It is 7, so \\boxed{7}.",
    "Please reason step by step, and put your final answer within \\boxed{}.",
    "0 1 2 3 4 5 6 7 8 9 + - * / = ( ) . , ? the a is of and",
]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS * 4, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        bos_token="<|im_start|>",
        chat_template=CHATML,
        clean_up_tokenization_spaces=False,
    )


def save_tiny_model(path: Path, seed: int = 0) -> Path:
    """Save a tiny Llama + tokenizer to ``path`` (save_pretrained layout) and return ``path``."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=256,
        tie_word_embeddings=True,
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
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
