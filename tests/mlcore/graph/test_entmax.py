import pytest
import torch

from mlcore.moe.entmax import entmax, entmax15, entmax_bisect
from mlcore.moe.sparsemax import sparsemax


def logits(rows: int = 6, width: int = 7, scale: float = 2.0) -> torch.Tensor:
    return torch.randn(rows, width, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * scale


def test_entmax15_by_sorting_matches_bisection_and_lies_on_the_simplex():
    z = logits()
    exact, bisected = entmax15(z), entmax_bisect(z, 1.5, n_iter=80)
    torch.testing.assert_close(exact, bisected, atol=1e-9, rtol=0)
    torch.testing.assert_close(exact.sum(-1), torch.ones(len(z), dtype=z.dtype))
    assert (exact >= 0).all()


@pytest.mark.parametrize("alpha", [1.38, 1.5, 2.0])
def test_it_gives_exact_zeros_to_logits_far_below_the_rest(alpha):
    z = torch.tensor([[3.0, 2.5, -4.0, -6.0]], dtype=torch.float64)
    p = entmax(z, alpha)
    assert p[0, 2] == 0 and p[0, 3] == 0
    assert p[0, 0] > p[0, 1] > 0


def test_alpha_two_is_sparsemax_and_alpha_near_one_approaches_softmax():
    z = logits()
    torch.testing.assert_close(entmax_bisect(z, 2.0), sparsemax(z), atol=1e-9, rtol=0)
    torch.testing.assert_close(entmax_bisect(z, 1.001), torch.softmax(z, -1), atol=2e-3, rtol=0)
    torch.testing.assert_close(entmax(z, 1.0), torch.softmax(z, -1))


def test_sparsity_grows_with_alpha():
    z = logits(rows=50)
    zeros = [int((entmax(z, a) == 0).sum()) for a in (1.2, 1.38, 1.5, 2.0)]
    assert zeros == sorted(zeros) and zeros[-1] > zeros[0]


@pytest.mark.parametrize("solver", [entmax15, lambda z: entmax_bisect(z, 1.38, n_iter=80)])
def test_its_gradient_matches_finite_differences(solver):
    z = logits(rows=3, width=5).requires_grad_()
    assert torch.autograd.gradcheck(solver, (z,), atol=1e-6)


def test_logits_outside_the_support_get_no_gradient():
    z = torch.tensor([[3.0, 2.5, -4.0]], requires_grad=True)
    (entmax(z, 1.38) * torch.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    assert z.grad[0, 2] == 0 and z.grad[0, :2].abs().sum() > 0


def test_it_works_along_any_dimension():
    z = logits(rows=4, width=5)
    torch.testing.assert_close(entmax15(z.t(), dim=0), entmax15(z).t())


def test_alpha_below_one_is_refused():
    with pytest.raises(ValueError, match="α"):
        entmax(torch.zeros(1, 3), 0.5)
