import pytest

from mlcore.analysis.consistency import ConsistencyReport, HitRate, recommend


def _report(rates: dict[float, float]) -> ConsistencyReport:
    report = ConsistencyReport(layers=[0, 1], num_experts=[16, 16], top_k=[2, 2], tokens=1000, sequences=10)
    report.hit_rates["model"] = [HitRate("lru", 0, m, round(2 * m), r, r, r) for m, r in rates.items()]
    report.hit_rates["model"] += [HitRate("sch", 16, m, round(2 * m), min(1, r + 0.1), r, r) for m, r in rates.items()]
    report.misses_per_token = {m: [2 * (1 - r)] * 2 for m, r in rates.items()}
    return report


def test_it_recommends_the_knee_of_a_bending_hit_rate_curve():
    advice = recommend(_report({1: 0.30, 1.5: 0.50, 2: 0.62, 3: 0.66, 4: 0.68}), [1000, 1000])
    assert advice.multiple == 2
    assert advice.experts_per_layer == [4, 4]
    assert advice.hit_rate == 0.62 and advice.sch_bound == pytest.approx(0.72)
    # Misses per token summed over layers, times the bytes of one expert.
    assert advice.transfer_bytes_per_token == pytest.approx(2 * 2 * 0.38 * 1000)
    assert "Cache 4 experts per layer (2× the active experts)" in advice.sentence()


def test_a_flat_curve_recommends_the_smallest_cache_and_unknown_sizes_say_so():
    advice = recommend(_report({1: 0.9, 2: 0.9, 4: 0.9}), None)
    assert advice.multiple == 1
    assert advice.transfer_bytes_per_token is None and "unknown" in advice.sentence()
