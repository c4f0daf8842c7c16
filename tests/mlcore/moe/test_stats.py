import pytest
import torch

from mlcore.moe import ExpertStatistics, MoELayer, collect_expert_statistics
from tests.mlcore.moe.reference import expert_output

f64 = torch.float64


def two_pass(outputs, gates, experts, num_experts, tokens):
    """Brute force in float64: mean, then squared deviations, per expert."""
    rows = []
    for e in range(num_experts):
        x = outputs[experts == e].double()
        g = gates[experts == e].double()
        n = len(x)
        mean = x.mean(0) if n else torch.zeros(outputs.shape[1], dtype=f64)
        var = ((x - mean) ** 2).sum(0) / (n - 1) if n >= 2 else torch.zeros(outputs.shape[1], dtype=f64)
        norm = x.norm(dim=1).mean() if n else torch.tensor(0.0, dtype=f64)
        rows.append((n, mean, var, g.sum() / tokens, norm))
    return rows


def assert_matches(stats, layer, rows):
    for e, (n, mean, var, freq, norm) in enumerate(rows):
        assert int(stats.count[layer, e]) == n
        torch.testing.assert_close(stats.mean[layer, e], mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(stats.variance()[layer, e], var, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(stats.gate_weighted_frequency()[layer, e], freq, rtol=1e-12, atol=1e-15)
        torch.testing.assert_close(stats.mean_output_norm()[layer, e], norm, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(stats.std_norm()[layer], torch.stack([r[2] for r in rows]).sum(-1).sqrt())


def data(seed, n=300, hidden=5, experts=6):
    g = torch.Generator().manual_seed(seed)
    # An offset far from zero makes naive sum-of-squares variance lose digits; Chan's update does not.
    outputs = torch.randn(n, hidden, generator=g, dtype=f64) * 0.5 + 1000.0
    ids = torch.randint(0, experts - 1, (n,), generator=g)  # the last expert stays empty
    gates = torch.rand(n, generator=g, dtype=f64)
    return outputs, ids, gates


@pytest.mark.parametrize("chunks", [[300], [1, 2, 97, 200], [150, 0, 149, 1]])
def test_streaming_updates_match_a_two_pass_computation_for_any_chunking(chunks):
    outputs, ids, gates = data(0)
    stats = ExpertStatistics(1, 6, 5)
    start = 0
    for size in chunks:
        stats.update_many(0, ids[start : start + size], outputs[start : start + size], gates[start : start + size])
        start += size
    stats.count_tokens(0, 150)
    assert_matches(stats, 0, two_pass(outputs, gates, ids, 6, 150))
    assert int(stats.count[0, 5]) == 0 and bool((stats.mean[0, 5] == 0).all())


def test_merging_collectors_of_different_sizes_is_exact():
    outputs, ids, gates = data(1, n=400)
    parts = [(0, 7), (7, 260), (260, 400)]
    shards = []
    for a, b in parts:
        shard = ExpertStatistics(2, 6, 5)
        for e in range(6):
            pick = ids[a:b] == e
            shard.update(1, e, outputs[a:b][pick], gates[a:b][pick])
        shard.count_tokens(1, b - a)
        shard.count_tokens(0, 1)
        shards.append(shard)
    merged = shards[0].merge(shards[1]).merge(shards[2])
    assert_matches(merged, 1, two_pass(outputs, gates, ids, 6, 400))
    assert merged.count[0].sum() == 0 and merged.tokens.tolist() == [3, 400]


def test_an_expert_with_one_token_has_zero_variance():
    stats = ExpertStatistics(1, 2, 3)
    stats.update(0, 1, torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([0.5]))
    assert stats.variance()[0, 1].tolist() == [0.0, 0.0, 0.0]
    assert stats.mean[0, 1].tolist() == [1.0, 2.0, 3.0]


def test_frequency_without_counted_tokens_says_what_to_do():
    stats = ExpertStatistics(1, 2, 3)
    with pytest.raises(ValueError, match="call count_tokens"):
        stats.gate_weighted_frequency()


def test_merging_mismatched_statistics_is_refused():
    with pytest.raises(ValueError, match="cannot merge"):
        ExpertStatistics(1, 2, 3).merge(ExpertStatistics(1, 3, 3))


def test_collecting_from_moe_layers_matches_per_token_expert_outputs():
    torch.manual_seed(3)
    model = torch.nn.Sequential(MoELayer(6, 10, 4, 2, dtype=f64), MoELayer(6, 10, 4, 2, dtype=f64))
    x = torch.randn(2, 9, 6, dtype=f64)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    with collect_expert_statistics(model) as collector:
        with collector.batch(mask):
            model(x)
        model(x[0])
    stats = collector.statistics
    assert stats.tokens.tolist() == [15 + 9, 15 + 9]
    assert model[0].observers == []

    # Brute force for layer 0: real tokens of the batch, then the second forward.
    flat = x.reshape(18, 6)[mask.reshape(-1).bool()]
    tokens = torch.cat([flat, x[0]])
    with torch.no_grad():
        _, routing = model[0](tokens, return_routing=True)
    pairs = [
        (t, int(e), float(g))
        for t in range(len(tokens))
        for e, g in zip(routing.expert_ids[t], routing.gate_weights[t])
    ]
    outputs = torch.stack([expert_output(model[0], e, tokens[t]) for t, e, _ in pairs])
    experts = torch.tensor([e for _, e, _ in pairs])
    gates = torch.tensor([g for *_, g in pairs], dtype=f64)
    assert_matches(stats, 0, two_pass(outputs.detach(), gates, experts, 4, 24))
