"""transformers' own sampler, as the tests' independent reference for entflow's generation."""

from __future__ import annotations

from typing import Any


def reference_sample(model: Any, tok: Any, enc: dict, temperature: float, max_new_tokens: int, **kw: Any) -> Any:
    """``model.generate`` sampling with the temperature as the only logits processor (``top_k=0``,
    ``top_p=1``), the tokenizer's pad and eos ids; ``kw`` go to ``generate`` (e.g.
    ``num_return_sequences``, ``output_logits``, ``return_dict_in_generate``)."""
    return model.generate(
        **enc,
        do_sample=True,
        temperature=temperature,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        **kw,
    )
