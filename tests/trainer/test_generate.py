"""The one generation path (entflow.trainer.rollout.generate, entflow.trainer.evaluate.generate_in_batches):
its warpers sample exactly generate's own law, its recorded entropy is that of the warped law,
and batching, seeding and greedy repetition behave as documented."""

from __future__ import annotations

import pytest
import torch

from entflow.lab.policy import PolicyConfig, build_policy, build_tokenizer
from entflow.lab.tasks import get_task
from entflow.trainer.evaluate import generate_in_batches
from entflow.trainer.rollout import generate, response_logits
from entflow.trainer.tokens import encode_prompts
from support.hf_sampling import reference_sample

PROMPTS = ["1+2", "37+5", "9"]


@pytest.fixture(scope="module")
def tiny():
    task = get_task("arithmetic", validation_size=4)
    tok = build_tokenizer(task.alphabet)
    model = build_policy(tok, PolicyConfig(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64), seed=5)
    return model.eval(), tok


def test_sampling_is_token_for_token_generates_own(tiny):
    """Our explicit warpers (generate's own switched off) draw the same tokens as generate's
    temperature warper from the same seed: what keeps the lab's metrics bit-identical."""
    model, tok = tiny
    rows = [p for p in PROMPTS for _ in range(4)]
    torch.manual_seed(7)
    ours = generate(model, tok, rows, 8, temperature=0.7, output_logits=True)
    enc = encode_prompts(tok, rows)
    torch.manual_seed(7)
    out = reference_sample(model, tok, enc, 0.7, 8, output_logits=True, return_dict_in_generate=True)
    theirs = out.sequences[:, enc["input_ids"].shape[1] :]
    assert torch.equal(ours.response_ids[ours.mask > 0], theirs[ours.mask > 0])
    assert torch.equal(ours.logits, torch.stack(out.logits, dim=1))
    assert ours.response_ids.shape == ours.mask.shape and len(ours.texts) == len(rows)
    assert (ours.response_ids[ours.mask == 0] == tok.pad_token_id).all()


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.6, 0, 1.0), (1.3, 4, 1.0), (0.8, 0, 0.7)]
)
def test_recorded_entropy_is_the_entropy_of_the_warped_law(tiny, temperature, top_k, top_p):
    """Independent check in float64 from a full forward: softmax(logits / T), then keep the top_k
    tokens or the smallest set of tokens with mass ≥ top_p, renormalise, take −Σ p log p."""
    model, tok = tiny
    torch.manual_seed(3)
    gen = generate(model, tok, PROMPTS * 2, 6, temperature=temperature, top_k=top_k, top_p=top_p, record_entropy=True)
    with torch.no_grad():
        z = response_logits(model, gen.prompt_ids, gen.prompt_mask, gen.response_ids).double() / temperature
    p = torch.softmax(z, -1)
    if top_k:
        keep = z >= z.topk(top_k, -1).values[..., -1:]
    elif top_p < 1:
        sp, order = p.sort(-1, descending=True)
        before = sp.cumsum(-1) - sp  # mass strictly before each token, in descending order
        keep = torch.zeros_like(p, dtype=torch.bool).scatter(-1, order, before < top_p)
    else:
        keep = torch.ones_like(p, dtype=torch.bool)
    q = torch.where(keep, p, 0.0)
    q = q / q.sum(-1, keepdim=True)
    want = -(torch.special.xlogy(q, q)).sum(-1) * gen.mask
    assert torch.allclose(gen.entropy.double(), want, atol=2e-5, rtol=0), float((gen.entropy - want).abs().max())
    if top_k:
        assert float(gen.entropy.max()) <= torch.log(torch.tensor(float(top_k))) + 1e-5
    assert (gen.entropy[gen.mask == 0] == 0).all()


def test_in_batches_seeded_batch_invariant_and_rng_untouched(tiny):
    model, tok = tiny
    model.train()  # the mode is restored afterwards
    state = torch.get_rng_state()
    one = generate_in_batches(model, tok, PROMPTS, 1, 6, greedy=True, batch_size=64)
    many = generate_in_batches(model, tok, PROMPTS, 1, 6, greedy=True, batch_size=1)
    assert len(one) == 1 and len(many) == 3  # batch_size // n prompts per call
    # left padding: a prompt decodes the same alone as in a batch with longer ones
    assert one[0].texts == [g.texts[0] for g in many]
    a = generate_in_batches(model, tok, PROMPTS, 3, 6, temperature=1.0, batch_size=6, seed=11)
    b = generate_in_batches(model, tok, PROMPTS, 3, 6, temperature=1.0, batch_size=6, seed=11)
    assert [g.texts for g in a] == [g.texts for g in b] and [len(g.texts) for g in a] == [6, 3]
    assert torch.equal(torch.get_rng_state(), state)  # seeded runs fork the RNG
    assert model.training
    rep = generate_in_batches(model, tok, PROMPTS, 3, 6, greedy=True, batch_size=64)[0]
    assert rep.texts == [t for t in one[0].texts for _ in range(3)]
    assert torch.equal(rep.response_ids, one[0].response_ids.repeat_interleave(3, 0))
    # greedy decodes each prompt once: batch_size prompts per call, not batch_size // n
    greedy = generate_in_batches(model, tok, PROMPTS, 3, 6, greedy=True, batch_size=3)
    assert [len(g.texts) for g in greedy] == [9]  # one call of the 3 prompts, each row repeated 3 times
    assert greedy[0].texts == rep.texts
