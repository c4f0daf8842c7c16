import pytest
import torch

from mlcore.moe import GroupRouter, TopKSigmoidRouter, TopKSoftmaxRouter, group_partition


def test_top_k_softmax_keeps_the_k_largest_probabilities_renormalised():
    torch.manual_seed(0)
    router = TopKSoftmaxRouter(8, 6, 2)
    x = torch.randn(20, 8)
    routing = router(x)
    probs = torch.softmax(x @ router.weight.T, dim=-1)
    expected_ids = probs.argsort(dim=-1, descending=True)[:, :2]
    assert torch.equal(routing.expert_ids, expected_ids)
    kept = probs.gather(-1, expected_ids)
    torch.testing.assert_close(routing.gate_weights, kept / kept.sum(-1, keepdim=True))
    torch.testing.assert_close(routing.gate_weights.sum(-1), torch.ones(20))


def test_top_k_softmax_without_renormalisation_keeps_the_raw_probabilities():
    torch.manual_seed(1)
    router = TopKSoftmaxRouter(8, 6, 3, renormalize=False)
    x = torch.randn(10, 8)
    routing = router(x)
    probs = torch.softmax(x @ router.weight.T, dim=-1)
    torch.testing.assert_close(routing.gate_weights, probs.topk(3, dim=-1).values)
    assert bool((routing.gate_weights.sum(-1) < 1).all())
    torch.testing.assert_close(routing.probs, probs)


def test_top_k_sigmoid_scores_each_expert_independently():
    torch.manual_seed(2)
    router = TopKSigmoidRouter(8, 5, 2)
    x = torch.randn(12, 8)
    routing = router(x)
    scores = torch.sigmoid(x @ router.weight.T)
    torch.testing.assert_close(routing.gate_weights, scores.topk(2, dim=-1).values)
    normalised = TopKSigmoidRouter(8, 5, 2, renormalize=True)
    normalised.load_state_dict(router.state_dict())
    torch.testing.assert_close(normalised(x).gate_weights.sum(-1), torch.ones(12))


def test_a_router_refuses_a_top_k_beyond_its_experts():
    with pytest.raises(ValueError, match="top_k must be between 1 and num_experts=4"):
        TopKSoftmaxRouter(8, 4, 5)


def test_a_plain_router_refuses_a_null_mask():
    with pytest.raises(ValueError, match="PrototypeRouter"):
        TopKSoftmaxRouter(4, 3, 1)(torch.randn(2, 4), null_mask=torch.tensor([True, False]))


def test_the_group_router_puts_each_token_in_its_most_probable_group_weighted_by_that_probability():
    torch.manual_seed(3)
    router = GroupRouter(8, 4)
    x = torch.randn(30, 8)
    routing = router(x)
    probs = torch.softmax(x @ router.weight.T, dim=-1)
    assert routing.top_k == 1
    assert torch.equal(routing.expert_ids[:, 0], probs.argmax(-1))
    torch.testing.assert_close(routing.gate_weights[:, 0], probs.max(-1).values)


def test_group_partition_sorts_tokens_stably_and_counts_empty_groups():
    router = GroupRouter(2, 4)
    with torch.no_grad():
        router.weight.copy_(torch.tensor([[1.0, 0], [0, 1], [-1, 0], [0, -5]]))
    x = torch.tensor([[0.0, 1], [1, 0], [0, 2], [3, 0], [-1, 0]])  # groups 1, 0, 1, 0, 2
    order, sizes = group_partition(router(x))
    assert order.tolist() == [1, 3, 0, 2, 4]
    assert sizes.tolist() == [2, 2, 1, 0]


def test_router_gradients_reach_the_gate_weights():
    torch.manual_seed(4)
    router = TopKSoftmaxRouter(8, 4, 2)
    router(torch.randn(6, 8)).gate_weights[:, 0].sum().backward()
    assert router.weight.grad is not None and bool(router.weight.grad.abs().sum() > 0)


def test_expert_choice_gives_each_expert_exactly_its_capacity_of_its_highest_scoring_tokens():
    from mlcore.moe.routers import ExpertChoiceRouter

    torch.manual_seed(4)
    router = ExpertChoiceRouter(8, 4, 2)
    x = torch.randn(30, 8)
    routing = router(x)
    capacity = router.capacity(30)
    assert capacity == 15  # ⌈2·30/4⌉
    assert routing.expert_counts().tolist() == [capacity] * 4
    scores = torch.softmax(x @ router.weight.T, dim=-1)
    for e in range(4):
        takers = routing.expert_ids.eq(e) & routing.active_mask()
        chosen = takers.any(-1).nonzero().reshape(-1)
        assert set(chosen.tolist()) == set(scores[:, e].topk(capacity).indices.tolist())
        torch.testing.assert_close(routing.gate_weights[takers], scores[chosen, e])
    # tokens get a varying number of experts; the padded slots carry no weight
    per_token = routing.active_mask().sum(-1)
    assert per_token.sum() == 4 * capacity and per_token.max() > per_token.min()
    assert (routing.gate_weights[~routing.active_mask()] == 0).all()


def test_an_expert_choice_routed_layer_sums_each_tokens_choosing_experts_weighted_by_score():
    from mlcore.moe import MoELayer
    from mlcore.moe.routers import ExpertChoiceRouter
    from tests.mlcore.moe.reference import expert_output

    torch.manual_seed(5)
    router = ExpertChoiceRouter(6, 3, 1, dtype=torch.float64)
    layer = MoELayer(6, 10, router=router, dtype=torch.float64)
    x = torch.randn(12, 6, dtype=torch.float64)
    y = layer(x)
    scores = torch.softmax(x @ router.weight.T, dim=-1)
    expected = torch.zeros_like(x)
    for e in range(3):
        for t in scores[:, e].topk(router.capacity(12)).indices.tolist():
            expected[t] += scores[t, e] * expert_output(layer, e, x[t])
    torch.testing.assert_close(y, expected)
    assert (y[expected.abs().sum(-1) == 0] == 0).all()  # a token no expert chose passes through as zero
    y.square().sum().backward()  # the router learns through the gate weights (there is no balance loss)
    assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def test_expert_race_keeps_exactly_t_times_k_pairs_the_global_top_of_the_sigmoid_score_matrix():
    from mlcore.moe import ExpertRaceRouter

    torch.manual_seed(6)
    router = ExpertRaceRouter(8, 5, 2)
    x = torch.randn(30, 8)
    routing = router(x)
    scores = torch.sigmoid(x @ router.weight.T)  # [T, E]
    active = routing.active_mask()
    assert int(active.sum()) == 30 * 2
    kept = torch.zeros_like(scores, dtype=torch.bool)
    kept[torch.arange(30).unsqueeze(-1).expand_as(routing.expert_ids)[active], routing.expert_ids[active]] = True
    # the kept pairs are the 60 largest entries of the whole matrix, wherever they sit
    threshold = scores.reshape(-1).topk(60).values.min()
    assert torch.equal(kept, scores >= threshold)
    # each pair's gate is its own score; padded slots carry no weight
    torch.testing.assert_close(routing.gate_weights[active], scores.gather(-1, routing.expert_ids)[active])
    assert (routing.gate_weights[~active] == 0).all()
    torch.testing.assert_close(routing.probs, scores)
    assert routing.expert_counts().sum() == 60 and routing.top_k == int(active.sum(-1).max())


def test_expert_race_lets_a_token_win_several_experts_while_others_win_none():
    from mlcore.moe import ExpertRaceRouter

    router = ExpertRaceRouter(4, 4, 1)
    with torch.no_grad():
        router.weight.copy_(torch.eye(4))  # logits = x
    x = torch.tensor([[5.0, 4.0, 3.0, 2.0], [-5.0, -5.0, -5.0, -5.0], [0.0, 0.0, 0.0, 0.0]])
    routing = router(x)
    per_token = routing.active_mask().sum(-1)
    # T·k = 3 pairs: all go to the first token's three highest scores, so tokens 2 and 3 get no expert
    assert per_token.tolist() == [3, 0, 0]
    assert routing.expert_ids[0].tolist() == [0, 1, 2]
    torch.testing.assert_close(routing.gate_weights[0], torch.sigmoid(torch.tensor([5.0, 4.0, 3.0])))
    assert (routing.gate_weights[1:] == 0).all()


def test_expert_race_gradients_reach_the_router_weights_through_the_gates():
    from mlcore.moe import ExpertRaceRouter, MoELayer
    from tests.mlcore.moe.reference import moe_reference

    torch.manual_seed(7)
    router = ExpertRaceRouter(6, 3, 2, dtype=torch.float64)
    layer = MoELayer(6, 10, router=router, dtype=torch.float64)
    x = torch.randn(12, 6, dtype=torch.float64)
    y, routing = layer(x, return_routing=True)
    torch.testing.assert_close(y, moe_reference(layer, x, routing.expert_ids, routing.gate_weights).to(y.dtype))
    y.square().sum().backward()  # no balance loss: the router learns only through the gate weights
    assert router.weight.grad is not None and router.weight.grad.abs().sum() > 0


def test_expert_race_refuses_a_null_mask_and_an_average_beyond_its_experts():
    from mlcore.moe import ExpertRaceRouter

    with pytest.raises(ValueError, match="PrototypeRouter"):
        ExpertRaceRouter(4, 3, 1)(torch.randn(2, 4), null_mask=torch.tensor([True, False]))
    with pytest.raises(ValueError, match="top_k must be between 1 and num_experts=3"):
        ExpertRaceRouter(4, 3, 4)
