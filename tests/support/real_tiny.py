"""A tiny in-process "real" model for the tests of entflow.hf (models, data, evaluate, setup):
a byte-level BPE tokenizer trained here on a few lines, with a ChatML chat template and
``<|im_end|>`` as the end of a turn, and a ~0.2 M-parameter Llama. Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

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
    """Save a tiny Llama (~0.2 M parameters, tied embeddings) + tokenizer to ``path`` (save_pretrained
    layout) and return ``path``."""
    from entflow.hf.models import save_tiny_llama

    return save_tiny_llama(path, build_tokenizer(), max_positions=256, tie_embeddings=True, seed=seed)


def save_grouped_llama(path: Path, hidden_size: int) -> Path:
    """A 2-layer Llama with 4 query and 2 key/value heads and tied embeddings, ``hidden_size`` wide
    (MLP twice that): big enough that the update's ``index_put_`` backward takes torch's
    multi-threaded path (rows × tokens × hidden ≥ torch's grain of 32768 elements)."""
    from entflow.hf.models import save_tiny_llama

    return save_tiny_llama(
        path,
        build_tokenizer(),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_heads=4,
        num_kv_heads=2,
        max_positions=256,
        tie_embeddings=True,
        seed=0,
    )


def parity_reward(completions, **kwargs) -> list[float]:
    """A reward that is deterministic and varied on a random model (so groups have a signal and
    pass@k is neither 0 nor 1): 1 if the response has an even number of characters."""
    return [float(len(c) % 2 == 0) for c in completions]


def tiny_run_overrides(out: Path, **keys) -> list[str]:
    """``key=value`` overrides of a two-step ``entflow train --model`` run on the tiny model: two
    prompts a step, 3 held-out problems evaluated every step with 2 samples, ``lr`` 1e-2 (so one
    step moves the policy), the ``parity`` reward (the ``parity`` fixture registers it) on one-digit
    sums; ``keys`` add to or replace these."""
    base = {
        "out_dir": str(out),
        "steps": 2,
        "prompts_per_step": 2,
        "val_size": 3,
        "eval_k": 2,
        "eval_every": 1,
        "lr": 1e-2,
        "reward": "parity",
        "progress": False,
        "task_params": "{max_terms: 2, max_digits: 1}",
    } | keys
    return [f"{k}={v}" for k, v in base.items()]
