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
