import numpy as np
import pytest

from mlcore.analysis.balance import global_balance, local_balance
from mlcore.analysis.reference import brute_force_srp
from mlcore.analysis.routing import LayerRouting, synthetic
from mlcore.analysis.srp import bootstrap_srp, srp_from_histogram, window_histograms


def _srp(routing: LayerRouting, window: int) -> float:
    return srp_from_histogram(window_histograms(routing, window).sum(axis=0), window)[0]


@pytest.mark.parametrize("window", [1, 4, 16])
def test_a_trace_whose_top_k_set_never_changes_has_srp_one(window: int) -> None:
    routing = synthetic("constant", tokens=200, num_experts=8, top_k=2, sequence_length=50)
    assert _srp(routing, window) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["random", "sticky"])
@pytest.mark.parametrize("window", [2, 5, 16])
def test_srp_equals_the_definition_computed_window_by_window(kind: str, window: int) -> None:
    routing = synthetic(kind, tokens=150, num_experts=8, top_k=2, sequence_length=40, seed=3)
    assert _srp(routing, window) == pytest.approx(brute_force_srp(routing, window))


def test_a_sticky_router_is_more_consistent_than_a_random_one() -> None:
    sticky = synthetic("sticky", tokens=2000, num_experts=16, top_k=2, sequence_length=200, stay=0.95)
    random = synthetic("random", tokens=2000, num_experts=16, top_k=2, sequence_length=200)
    assert _srp(sticky, 16) > _srp(random, 16) + 0.2


def test_sequences_shorter_than_the_window_contribute_no_windows() -> None:
    routing = LayerRouting(np.array([[0, 1]] * 5, dtype=np.int32), np.array([3, 2]), 4)
    assert window_histograms(routing, 4).sum() == 0
    assert window_histograms(routing, 3).sum() == 4  # one window, four experts


def test_the_bootstrap_interval_brackets_the_estimate_and_narrows_with_more_sequences() -> None:
    small = synthetic("sticky", tokens=800, num_experts=8, top_k=2, sequence_length=100, stay=0.8)
    large = synthetic("sticky", tokens=8000, num_experts=8, top_k=2, sequence_length=100, stay=0.8)
    a = bootstrap_srp(window_histograms(small, 8), 8, resamples=200)
    b = bootstrap_srp(window_histograms(large, 8), 8, resamples=200)
    assert a.ci_low <= a.srp <= a.ci_high
    assert b.ci_high - b.ci_low < a.ci_high - a.ci_low


def test_a_constant_router_is_locally_unbalanced_and_a_random_one_balanced() -> None:
    constant = synthetic("constant", tokens=1000, num_experts=8, top_k=2, sequence_length=100)
    random = synthetic("random", tokens=1000, num_experts=8, top_k=2, sequence_length=100)
    assert local_balance(random, 16) > 0.9 > 0.4 > local_balance(constant, 16)
    assert global_balance(random) > 0.99
