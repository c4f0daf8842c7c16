import pytest
import torch

from mlcore.datamix import baselines
from mlcore.datamix.fastmix import FastMixConfig, fastmix, mixture_hypergradient
from mlcore.datamix.problem import train_on_mixture
from mlcore.datamix.sources import classification_problem, text_problem


def test_the_hypergradient_equals_autograd_through_the_softmax():
    g = torch.Generator().manual_seed(0)
    g_val, g_sources, z = torch.randn(7, generator=g), torch.randn(4, 7, generator=g), torch.randn(4, generator=g)
    z.requires_grad_(True)
    # L_val(w) to first order after one inner step of size η on Σ w_k L_k: −η Σ_k w_k ⟨g_val, g_k⟩.
    (-0.3 * torch.softmax(z, 0) @ (g_sources @ g_val)).backward()
    torch.testing.assert_close(mixture_hypergradient(g_val, g_sources, torch.softmax(z.detach(), 0), 0.3), z.grad)


def test_fastmix_pushes_a_pure_noise_source_clearly_below_uniform():
    problem = classification_problem(seed=0, per_source=500)
    result = fastmix(problem, FastMixConfig(steps=120, lr_z=0.1, interval=10), seed=0)
    weights = dict(zip(problem.sources, result.final, strict=True))
    assert weights["noise-50"] < 0.5 / problem.k
    assert weights["noise-50"] < weights["clean"]
    assert len(result.weights) == 13 and len(result.val_loss) == 12


def test_the_reference_outer_rate_barely_moves_the_weights():
    problem = classification_problem(seed=0, per_source=500)
    slow = fastmix(problem, FastMixConfig(steps=120, lr_z=0.01, interval=10), seed=0)
    assert max(abs(w - 1 / problem.k) for w in slow.final) < 0.05


def test_head_only_and_full_gradients_agree_in_direction_on_a_tiny_model():
    problem = classification_problem(seed=1, per_source=500)
    head = fastmix(problem, FastMixConfig(steps=60, lr_z=0.1, interval=10), seed=0).final
    full = fastmix(problem, FastMixConfig(steps=60, lr_z=0.1, interval=10, full_gradients=True), seed=0).final
    assert head != full
    noisy = problem.sources.index("noise-50")
    assert head[noisy] < 1 / problem.k and full[noisy] < 1 / problem.k


def test_a_mixture_of_only_noise_trains_a_worse_model_than_the_clean_source():
    problem = classification_problem(seed=0, per_source=500)
    _, clean = train_on_mixture(problem, [1, 0, 0, 0, 0, 0], steps=80, seed=0)
    _, noise = train_on_mixture(problem, [0, 0, 0, 1, 0, 0], steps=80, seed=0)
    assert clean["val_loss"] < noise["val_loss"]
    with pytest.raises(ValueError, match="non-negative"):
        train_on_mixture(problem, [1, 0], steps=1)


def test_the_simplex_grid_enumerates_every_point_once():
    grid = baselines.simplex_grid(3, 2)
    assert sorted(map(tuple, grid)) == sorted(
        [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (0.5, 0.5, 0.0), (0.5, 0.0, 0.5), (0.0, 0.5, 0.5)]
    )


def test_the_baselines_return_mixtures_and_their_cost():
    problem = classification_problem(seed=0, per_source=300)
    for found in (
        baselines.regmix_lite(problem, proxies=6, steps=10, seed=0),
        baselines.doremi_lite(problem, steps=20, seed=0),
        baselines.grid_oracle(problem, resolution=1, steps=10, seed=0),
    ):
        assert len(found.weights) == 6 and abs(sum(found.weights) - 1) < 1e-6 and found.cost_examples > 0


def test_a_text_source_shorter_than_the_context_is_refused():
    with pytest.raises(ValueError, match="bytes"):
        text_problem({"a": "x" * 100, "b": "tiny"}, "target " * 20, context=16)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_fastmix_and_doremi_train_their_proxies_on_the_problems_device():
    problem = classification_problem(seed=0)
    problem.device = "cuda"
    assert next(problem.proxy(0).parameters()).is_cuda
    result = fastmix(problem, FastMixConfig(steps=20, lr_z=0.01, interval=5), seed=0)
    assert abs(sum(result.final) - 1) < 1e-5
    assert abs(sum(baselines.doremi_lite(problem, steps=10).weights) - 1) < 1e-5
