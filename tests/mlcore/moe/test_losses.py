import math

import pytest
import torch

from mlcore.moe import (
    PrototypeRouter,
    Routing,
    group_balance_loss,
    router_z_loss,
    routing_contrastive_loss,
    switch_load_balance_loss,
)


def routing(ids, probs, num_experts=None):
    ids = torch.tensor(ids)
    probs = torch.tensor(probs)
    weights = probs.gather(-1, ids)
    return Routing(ids, weights, probs.log(), probs, num_experts or probs.shape[1])


def test_switch_loss_by_hand():
    r = routing([[0], [0], [1], [2]], [[0.5, 0.3, 0.2], [0.6, 0.2, 0.2], [0.2, 0.7, 0.1], [0.1, 0.1, 0.8]])
    f = [2 / 4, 1 / 4, 1 / 4]
    p = [(0.5 + 0.6 + 0.2 + 0.1) / 4, (0.3 + 0.2 + 0.7 + 0.1) / 4, (0.2 + 0.2 + 0.1 + 0.8) / 4]
    assert switch_load_balance_loss(r).item() == pytest.approx(3 * sum(a * b for a, b in zip(f, p)))


def test_switch_loss_is_one_for_uniform_routing():
    r = routing([[0, 1], [2, 3]], [[0.25] * 4, [0.25] * 4])
    assert switch_load_balance_loss(r).item() == pytest.approx(1.0)


def test_switch_loss_counts_only_active_slots():
    r = routing([[0, 1], [2, 1]], [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    r.active = torch.tensor([[True, True], [True, False]])
    # f = (1/3, 1/3, 1/3), P = (0.25, 0.25, 0.5)
    assert switch_load_balance_loss(r).item() == pytest.approx(3 * (0.25 + 0.25 + 0.5) / 3)


def test_z_loss_by_hand():
    logits = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    expected = (math.log(2) ** 2 + math.log(math.e + math.e**2) ** 2) / 2
    assert router_z_loss(logits).item() == pytest.approx(expected)


def test_group_balance_loss_in_both_readings():
    probs = [[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]]
    r = routing([[0], [0], [2]], probs)
    f = [2 / 3, 0, 1 / 3]
    switch = 0.1 * 3 * (f[0] * (0.7 + 0.6 + 0.1) / 3 + f[2] * (0.1 + 0.1 + 0.8) / 3)
    paper = 0.1 * 3 * (f[0] * (0.7 + 0.6) / 3 + f[2] * 0.8 / 3)
    assert group_balance_loss(r).item() == pytest.approx(switch)
    assert group_balance_loss(r, variant="paper").item() == pytest.approx(paper)
    with pytest.raises(ValueError, match="'switch' or 'paper'"):
        group_balance_loss(r, variant="mean")


def test_routing_contrastive_loss_by_hand():
    prototypes = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    x = torch.tensor([[2.0, 0.0], [1.0, 1.0], [0.0, 3.0]])
    r = Routing(torch.tensor([[0], [0], [1]]), torch.ones(3, 1), torch.zeros(3, 3), torch.zeros(3, 3), 3)
    # m_0 = (1.5, 0.5), m_1 = (0, 3); expert 2 got nothing and is skipped everywhere.
    m = torch.tensor([[1.5, 0.5], [0.0, 3.0]])
    cos = torch.nn.functional.cosine_similarity(prototypes[:2].unsqueeze(1), m.unsqueeze(0), dim=-1) / 0.07
    expected = -(torch.log_softmax(cos, dim=-1).diagonal()).mean()
    assert routing_contrastive_loss(x, r, prototypes).item() == pytest.approx(expected.item(), rel=1e-5)


def test_routing_contrastive_loss_sends_gradient_to_prototypes_and_tokens_and_ignores_null_tokens():
    torch.manual_seed(0)
    router = PrototypeRouter(8, 4, top_k=1)
    x = torch.randn(64, 8, requires_grad=True)
    null = torch.arange(64) % 4 == 0
    r = router(x, null_mask=null)
    loss = routing_contrastive_loss(x, r, router.prototypes)
    loss.backward()
    assert bool(router.prototypes.grad.abs().sum() > 0)
    assert bool(x.grad[~null].abs().sum() > 0)
    assert bool((x.grad[null] == 0).all())


def test_routing_contrastive_loss_is_zero_with_a_single_populated_expert():
    prototypes = torch.randn(3, 2, requires_grad=True)
    r = Routing(torch.zeros(4, 1, dtype=torch.long), torch.ones(4, 1), torch.zeros(4, 3), torch.zeros(4, 3), 3)
    loss = routing_contrastive_loss(torch.randn(4, 2), r, prototypes)
    loss.backward()
    assert loss.item() == 0.0
