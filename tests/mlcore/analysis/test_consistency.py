import numpy as np
import pytest

from mlcore.analysis import consistency
from mlcore.analysis.cache import capacity_for, simulate
from mlcore.analysis.consistency import ONE_CACHE, analyse
from mlcore.analysis.reference import brute_force_hits, brute_force_srp
from mlcore.analysis.routing import concatenate, every_nth_sequence, synthetic


def _layers(tokens: int, seed: int = 0):
    return [
        synthetic("sticky", tokens=tokens, num_experts=8, top_k=2, sequence_length=40, seed=seed, stay=0.9),
        synthetic("random", tokens=tokens, num_experts=8, top_k=2, sequence_length=40, seed=seed + 1),
    ]


def test_the_model_level_srp_shares_one_threshold_across_layers():
    layers = _layers(240)
    report = analyse(layers, [0, 1], windows=[4, 8], multiples=[1, 2], resamples=0)
    for i, window in enumerate([4, 8]):
        model = report.srp["model"][i].srp
        assert model == pytest.approx(brute_force_srp(layers, window))
        per_layer = [report.srp[f"layer {layer}"][i].srp for layer in (0, 1)]
        assert per_layer == pytest.approx([brute_force_srp(r, window) for r in layers])
        assert min(per_layer) < model < max(per_layer)


def test_model_level_hit_rates_pool_every_layer_s_hits_and_accesses():
    layers = _layers(240)
    report = analyse(layers, [0, 1], windows=[4], multiples=[1.5], resamples=0)
    for policy in ("lru", "belady"):
        results = [simulate(r, policy, [1.5])[0] for r in layers]
        pooled = sum(int(r.hits.sum()) for r in results) / sum(int(r.accesses.sum()) for r in results)
        (model,) = [h for h in report.hit_rates["model"] if h.policy == policy]
        assert model.rate == pytest.approx(pooled) and model.capacity == 3


def test_hit_rate_intervals_bracket_the_estimate_and_narrow_with_more_sequences():
    small = analyse(_layers(400), [0, 1], windows=[4], multiples=[1, 2, 4], resamples=300, seed=1)
    large = analyse(_layers(4000), [0, 1], windows=[4], multiples=[1, 2, 4], resamples=300, seed=1)
    for report in (small, large):
        for rates in report.hit_rates.values():
            for h in rates:
                assert h.ci_low <= h.rate <= h.ci_high
    widths = [np.mean([h.ci_high - h.ci_low for h in r.hit_rates["model"]]) for r in (small, large)]
    assert 0 < widths[1] < widths[0] / 2  # ten times the sequences: about a third of the width


def test_without_resamples_the_intervals_collapse_to_the_estimate():
    report = analyse(_layers(240), [0, 1], windows=[4], multiples=[2], resamples=0)
    assert all(h.ci_low == h.rate == h.ci_high for h in report.hit_rates["model"])


def test_concatenated_layers_number_their_experts_one_after_another():
    layers = _layers(120)
    joined = concatenate(layers)
    assert joined.num_experts == 16 and joined.top_k == 4
    assert (joined.expert_ids[:, :2] == layers[0].expert_ids).all()
    assert (joined.expert_ids[:, 2:] == layers[1].expert_ids + 8).all()


def test_the_one_cache_model_level_replays_every_layer_through_one_cache_of_m_times_all_active_experts():
    layers = _layers(240)
    report = analyse(layers, [0, 1], windows=[4, 8], multiples=[1, 2], resamples=0)
    joined = concatenate(layers)
    rates = report.hit_rates[ONE_CACHE]
    assert {h.policy for h in rates} == {"lru", "lfu", "belady", "sch"} and len(rates) == (3 + 2) * 2
    for h in rates:
        assert h.capacity == capacity_for(h.multiple, 4)
        hits = brute_force_hits(joined, h.policy, h.capacity, max(h.window, 1))
        assert h.rate == pytest.approx(hits / joined.events)
    assert report.one_cache_stride == 1


def test_a_large_one_cache_replay_keeps_every_nth_sequence(monkeypatch):
    layers = _layers(400)  # ten sequences of 40 tokens
    # 1,600 accesses × a largest capacity of 8 = 12,800 scans: ⌈12,800 / 5,000⌉ = every 3rd sequence.
    monkeypatch.setattr(consistency, "ONE_CACHE_BUDGET", 5000)
    report = analyse(layers, [0, 1], windows=[4], multiples=[1, 2], resamples=20)
    assert report.one_cache_stride == 3
    kept = every_nth_sequence(concatenate(layers), 3)
    assert kept.lengths.tolist() == [40] * 4  # sequences 0, 3, 6, 9
    (lru,) = [h for h in report.hit_rates[ONE_CACHE] if h.policy == "lru" and h.multiple == 2]
    assert lru.rate == pytest.approx(simulate(kept, "lru", [2])[0].hit_rate)
    assert lru.ci_low <= lru.rate <= lru.ci_high


def test_a_single_layer_has_no_separate_one_cache_level():
    report = analyse(_layers(120)[:1], [0], windows=[4], multiples=[1], resamples=0)
    assert ONE_CACHE not in report.hit_rates and report.one_cache_stride == 0
