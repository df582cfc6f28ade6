"""The one SGD step of the estimator audits (trainer/estimator_scores.py): ``sgd_step`` moves every
tensor with a gradient by −lr·grad and leaves the others, and ``entropy_change_of_step`` is the
entropy after that step minus the entropy before it, for free logit rows (the tabular experiment and
the clean audit's tabular head) and for a network's parameters (the clean audit's batch and
per-token steps)."""

from __future__ import annotations

import torch

from entflow.core.token_stats import entropy_from_logits
from entflow.trainer.estimator_scores import entropy_change_of_step, sgd_step
from entflow.trainer.tabular import tabular_experiment


def test_sgd_step_moves_only_tensors_with_a_gradient():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0], requires_grad=True)
    (a * torch.tensor([2.0, -1.0])).sum().backward()
    sgd_step([a, b], lr=0.5)
    assert a.tolist() == [0.0, 2.5] and b.tolist() == [3.0]


def test_the_entropy_change_of_free_logit_rows_is_the_step_computed_by_hand():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(5, 7, generator=g, dtype=torch.float64)
    target = torch.randint(0, 7, (5,), generator=g)
    u = z.clone().requires_grad_(True)
    loss = -torch.log_softmax(u, -1)[torch.arange(5), target].mean()
    (grad,) = torch.autograd.grad(loss, u, retain_graph=True)
    change = entropy_change_of_step([u], loss, lambda: entropy_from_logits(u), lr=0.3)
    assert torch.equal(change, entropy_from_logits(z - 0.3 * grad) - entropy_from_logits(z))


def test_a_network_step_measures_against_the_given_entropy_before():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 4).double()
    x = torch.randn(6, 3, dtype=torch.float64)

    def entropy() -> torch.Tensor:
        return entropy_from_logits(net(x))

    before = entropy().detach()
    loss = -torch.log_softmax(net(x), -1)[:, 0].mean()
    change = entropy_change_of_step(net.parameters(), loss, entropy, lr=0.1, before=before)
    assert change.shape == (6,) and float(change.abs().max()) > 0
    assert torch.allclose(before + change, entropy())  # the step stays in the parameters


def test_the_tabular_experiment_is_first_order_exact():
    small = tabular_experiment(states=64, vocab=8, lr=0.05, seed=1)
    error = (small.predicted["tabular"] - small.true_dH).abs().max() / small.true_dH.abs().max()
    assert float(error) < 0.05
