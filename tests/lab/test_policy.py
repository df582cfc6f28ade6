"""Lab policy: character-level tokenizer, tiny causal LM, encode/decode (docs/design.md §10)."""

import pytest
import torch

from entflow.errors import ParameterError
from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer, count_parameters
from entflow.lab.tasks import LAB_ALPHABET, get_task
from entflow.trainer.tokens import GARBAGE_CHAR, decode_responses, encode_prompts, position_ids_from_mask, response_mask

TINY = PolicyConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(LAB_ALPHABET)


def test_tokenizer_round_trips_every_char(tok):
    assert len(tok) == 4 + len(LAB_ALPHABET)
    ids = set()
    for c in LAB_ALPHABET:
        enc = tok(c, add_special_tokens=False)["input_ids"]
        assert len(enc) == 1 and enc[0] != tok.unk_token_id, c
        assert tok.decode(enc) == c
        ids.add(enc[0])
    assert len(ids) == len(LAB_ALPHABET)
    text = "3 5 7>15:(3+7)*5-2="
    enc = tok(text, add_special_tokens=False)["input_ids"]
    assert len(enc) == len(text) and tok.decode(enc) == text
    assert tok("x", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]
    assert len({tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}) == 4


def test_encode_prompts_left_pads_and_prepends_bos(tok):
    enc = encode_prompts(tok, ["3 5 7>15:", "1 2>3:"])
    ids, mask = enc["input_ids"], enc["attention_mask"]
    assert ids.shape == (2, 10) and mask.shape == (2, 10)
    assert ids[0, 0] == tok.bos_token_id and mask[0].all()
    assert ids[1, :3].tolist() == [tok.pad_token_id] * 3 and mask[1, :3].sum() == 0
    assert ids[1, 3] == tok.bos_token_id and mask[1, 3:].all()
    assert tok.decode(ids[1, 4:]) == "1 2>3:"
    assert position_ids_from_mask(mask)[1].tolist() == [0, 0, 0, 0, 1, 2, 3, 4, 5, 6]
    with pytest.raises(ParameterError):
        encode_prompts(tok, "3 5>8:")


def test_decode_responses_cuts_at_eos_and_strips_pad(tok):
    c = {ch: tok.convert_tokens_to_ids(ch) for ch in "0123456789+*"}
    eos, pad, bos = tok.eos_token_id, tok.pad_token_id, tok.bos_token_id
    ids = torch.tensor(
        [
            [c["3"], c["*"], c["5"], eos, pad, pad],
            [c["1"], c["2"], eos, c["9"], c["9"], eos],  # everything after the first eos is dropped
            [c["7"], c["+"], c["8"], c["1"], c["2"], c["3"]],  # no eos: the whole row
            [eos, pad, pad, pad, pad, pad],  # empty response
            [c["3"], bos, c["5"], eos, pad, pad],  # a special token inside a response is garbage
        ]
    )
    assert decode_responses(tok, ids) == ["3*5", "12", "7+8123", "", "3" + GARBAGE_CHAR + "5"]
    m = response_mask(tok, ids)
    assert m.tolist()[0] == [1, 1, 1, 1, 0, 0]
    assert m.tolist()[1] == [1, 1, 1, 0, 0, 0]
    assert m[2].sum() == 6 and m[3].sum() == 1


def test_default_policy_size():
    tok = build_tokenizer(LAB_ALPHABET)
    for arch in ("llama", "qwen2"):
        model = build_policy(tok, PolicyConfig(arch=arch))
        n = count_parameters(model)
        assert 1_000_000 <= n <= 5_000_000, (arch, n)
        assert model.config.vocab_size == len(tok)
        g = model.generation_config
        assert g.pad_token_id == tok.pad_token_id and g.eos_token_id == tok.eos_token_id and g.do_sample


def test_build_policy_is_seeded_and_leaves_global_rng_alone(tok):
    torch.manual_seed(0)
    before = torch.rand(1)
    torch.manual_seed(0)
    a = build_policy(tok, TINY, seed=1)
    after = torch.rand(1)
    assert torch.equal(before, after)
    b = build_policy(tok, TINY, seed=1)
    c = build_policy(tok, TINY, seed=2)
    wa, wb, wc = (m.model.layers[0].mlp.up_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_policy_config_errors():
    with pytest.raises(ParameterError, match="num_heads"):
        PolicyConfig(hidden_size=30, num_heads=4).validate()
    with pytest.raises(ParameterError, match="arch"):
        PolicyConfig(arch="gpt9").validate()


def test_generate_left_padded_batch_matches_forward(tok):
    """Sampling with generate (left padding, KV cache, eos stops) sees the same logits as one
    forward pass over [prompt | response] — what the trainer relies on for logp."""
    task = get_task("countdown")
    model = build_policy(tok, TINY, seed=0).eval()
    prompts = [p.prompt for p in task.validation_set()[:4]] + ["1 2>3:"]
    enc = encode_prompts(tok, prompts)
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(
            **enc,
            num_return_sequences=3,
            max_new_tokens=task.max_response_len,
            output_logits=True,
            return_dict_in_generate=True,
        )
    L = enc["input_ids"].shape[1]
    resp = out.sequences[:, L:]
    assert resp.shape[0] == 15 and resp.shape[1] <= task.max_response_len
    texts = decode_responses(tok, resp)
    assert len(texts) == 15 and all(isinstance(t, str) for t in texts)
    mask = response_mask(tok, resp)
    am = torch.cat([enc["attention_mask"].repeat_interleave(3, 0), mask.long()], 1)
    with torch.no_grad():
        logits = model(input_ids=out.sequences, attention_mask=am, position_ids=position_ids_from_mask(am)).logits
    gen_logits = torch.stack(out.logits, 1)
    diff = (gen_logits - logits[:, L - 1 : -1]).abs().amax(-1)
    assert diff[mask.bool()].max() < 1e-4
