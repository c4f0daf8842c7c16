import itertools

import pytest
import torch

from mlcore.moe import LambdaNet, SparsemaxRouter, ld_mole_weights, sparsemax, sparsity_bound, sparsity_loss


def brute_force_projection(z: torch.Tensor) -> torch.Tensor:
    """argmin_{p ∈ Δ} ‖p − z‖² by trying every support S: p_S = z_S − τ, τ = (Σ z_S − 1)/|S|."""
    best, best_distance = None, float("inf")
    for size in range(1, len(z) + 1):
        for support in itertools.combinations(range(len(z)), size):
            idx = list(support)
            p = torch.zeros_like(z)
            p[idx] = z[idx] - (z[idx].sum() - 1) / size
            if bool((p[idx] >= 0).all()):
                distance = float((p - z).square().sum())
                if distance < best_distance:
                    best, best_distance = p, distance
    return best


def test_sparsemax_matches_a_brute_force_simplex_projection():
    torch.manual_seed(0)
    z = torch.randn(40, 5, dtype=torch.float64) * 2
    p = sparsemax(z)
    torch.testing.assert_close(p.sum(-1), torch.ones(40, dtype=torch.float64))
    for row, got in zip(z, p):
        torch.testing.assert_close(got, brute_force_projection(row))


def test_sparsemax_works_along_any_dimension():
    z = torch.randn(3, 6, 2)
    torch.testing.assert_close(sparsemax(z, dim=1), sparsemax(z.transpose(1, 2)).transpose(1, 2))


def test_a_very_negative_lambda_gives_uniform_weights_and_lambda_near_one_gives_one_hot():
    torch.manual_seed(1)
    u = torch.randn(8, 6)
    uniform = ld_mole_weights(u, torch.full((8,), -1e6))
    torch.testing.assert_close(uniform, torch.full((8, 6), 1 / 6), atol=1e-4, rtol=0)
    one_hot = ld_mole_weights(u, torch.full((8,), 1 - 1e-6))
    assert torch.equal(one_hot, torch.nn.functional.one_hot(u.argmax(-1), 6).float())


def test_at_lambda_equal_to_the_bound_at_most_k_experts_are_active():
    # Exact in binary: b_2 = 1 − (2 + 1 − 2·0.5) = −1, so z = u/2 = (1, .5, .25, 0) and expert 3 sits on the edge.
    u = torch.tensor([[2.0, 1.0, 0.5, 0.0]])
    lam = sparsity_bound(u, 2)
    assert lam.tolist() == [-1.0]
    assert int((ld_mole_weights(u, lam) > 0).sum()) == 2
    assert int((ld_mole_weights(u, lam - 0.01) > 0).sum()) == 3


@pytest.mark.parametrize("k", [1, 2, 3])
def test_lambda_just_above_the_bound_keeps_k_experts_and_just_below_adds_one(k):
    torch.manual_seed(k)
    u = torch.randn(200, 8, dtype=torch.float64)
    bound = sparsity_bound(u, k)
    assert bool(((ld_mole_weights(u, bound + 1e-9) > 0).sum(-1) <= k).all())
    assert bool(((ld_mole_weights(u, bound - 1e-6) > 0).sum(-1) > k).all())


def test_the_sparsity_loss_is_the_mean_gap_below_the_bound_and_trains_lambda_only():
    u = torch.tensor([[2.0, 1.0, 0.5, 0.0], [1.0, 1.0, 1.0, 1.0]], requires_grad=True)
    lam = torch.tensor([-1.5, 0.5], requires_grad=True)
    # bounds: −1 and 1 − (2 − 2·1) = 1; gaps 0.5 and 0.5
    loss = sparsity_loss(u, lam, k=2)
    assert loss.item() == pytest.approx(0.5)
    loss.backward()
    assert lam.grad.tolist() == [-0.5, -0.5]
    assert u.grad is None


def test_lambda_net_is_one_network_with_a_head_per_width_and_starts_sparse():
    net = LambdaNet([16, 32], hidden=64)
    lam16, lam32 = net(torch.randn(5, 16)), net(torch.randn(5, 32))
    assert lam16.shape == lam32.shape == (5,)
    assert bool((lam16 < 0.99).all())
    assert net.out.bias.item() == -2.5
    with pytest.raises(ValueError, match="no head for width 8"):
        net(torch.randn(2, 8))


def test_the_sparsemax_router_never_leaves_a_token_without_an_expert():
    torch.manual_seed(2)
    net = LambdaNet([16])
    router = SparsemaxRouter(16, 8, net)
    with torch.no_grad():
        router.weight.mul_(20)
    for bias in (-30.0, 10.0):  # λ ≈ −29: spread routing; λ ≈ 0.99: nearly one-hot
        with torch.no_grad():
            net.out.bias.fill_(bias)
        routing = router(torch.randn(300, 16))
        active = routing.active_mask()
        assert bool((active.sum(-1) >= 1).all())
        torch.testing.assert_close(routing.gate_weights.sum(-1), torch.ones(300))
        assert bool((routing.gate_weights[~active] == 0).all())
        assert routing.lam is not None and routing.lam.shape == (300,)


def test_the_sparsemax_router_varies_the_expert_count_per_token():
    torch.manual_seed(3)
    router = SparsemaxRouter(16, 8, LambdaNet([16]))
    with torch.no_grad():
        router.lambda_net.out.bias.fill_(-1.0)
    counts = router(torch.randn(400, 16)).active_mask().sum(-1)
    assert len(set(counts.tolist())) > 1


def test_gradients_flow_through_sparsemax_into_router_and_lambda_net():
    torch.manual_seed(4)
    router = SparsemaxRouter(16, 6, LambdaNet([16]))
    with torch.no_grad():
        router.lambda_net.out.bias.fill_(-4.0)
    routing = router(torch.randn(32, 16))
    (routing.gate_weights * torch.randn_like(routing.gate_weights)).sum().backward()
    assert bool(router.weight.grad.abs().sum() > 0)
    assert bool(router.lambda_net.out.weight.grad.abs().sum() > 0)


def test_the_sparsemax_jacobian_matches_finite_differences():
    torch.manual_seed(5)
    z = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(sparsemax, (z,))
