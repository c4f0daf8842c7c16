import numpy as np
import pytest

from mlcore.analysis.cache import POLICIES, capacity_for, compulsory_misses, simulate
from mlcore.analysis.reference import brute_force_hits
from mlcore.analysis.routing import LayerRouting, synthetic

MULTIPLES = [1, 1.5, 2, 3, 4]


def _trace(kind: str, seed: int, experts: int = 8, top_k: int = 2) -> LayerRouting:
    return synthetic(kind, tokens=240, num_experts=experts, top_k=top_k, sequence_length=60, seed=seed, stay=0.7)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kind", ["random", "sticky"])
def test_every_policy_equals_a_brute_force_simulator_at_every_capacity(policy: str, kind: str) -> None:
    routing = _trace(kind, seed=1)
    for result in simulate(routing, policy, MULTIPLES, lookahead=4):
        assert int(result.hits.sum()) == brute_force_hits(routing, policy, result.capacity, lookahead=4)


def test_padded_slots_are_not_accesses() -> None:
    ids = np.array([[0, -1], [0, 1], [2, -1], [1, 0]], dtype=np.int32)
    routing = LayerRouting(ids, np.array([4]), 3)
    (result,) = simulate(routing, "lru", [1])
    assert result.accesses.sum() == 6
    assert int(result.hits.sum()) == brute_force_hits(routing, "lru", 2, 1)


@pytest.mark.parametrize("seed", range(4))
def test_no_policy_beats_belady(seed: int) -> None:
    routing = _trace("sticky", seed=seed, experts=16, top_k=2)
    belady = [r.hit_rate for r in simulate(routing, "belady", MULTIPLES)]
    for policy in ("lru", "lfu", "sch"):
        for rate, best in zip([r.hit_rate for r in simulate(routing, policy, MULTIPLES, lookahead=16)], belady):
            assert rate <= best + 1e-12


@pytest.mark.parametrize("policy", POLICIES)
def test_a_cache_holding_every_expert_only_misses_compulsorily(policy: str) -> None:
    routing = _trace("random", seed=2, experts=6, top_k=2)
    results = simulate(routing, policy, [3, 4, 10])  # capacity 6 = every expert, then more than every expert
    assert [r.capacity for r in results] == [6, 8, 20]
    for result in results:
        assert int(result.accesses.sum() - result.hits.sum()) == compulsory_misses(routing)


def test_hit_rates_grow_with_capacity_for_belady() -> None:
    routing = _trace("sticky", seed=5, experts=16)
    rates = [r.hit_rate for r in simulate(routing, "belady", MULTIPLES)]
    assert rates == sorted(rates)


def test_capacity_never_drops_below_top_k() -> None:
    assert capacity_for(1.5, 2) == 3
    assert capacity_for(0.5, 4) == 4


def test_it_rejects_an_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown cache policy"):
        simulate(_trace("random", 0), "fifo", [1])
