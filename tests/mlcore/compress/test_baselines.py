import itertools

import torch
from transformers import AutoModelForCausalLM

from mlcore.compress.baselines import plan_ean, plan_frequency, plan_random, plan_reap, plan_routing_score
from mlcore.compress.calibrate import Calibration, calibrate
from mlcore.compress.hcsmoe import average_linkage, plan_hcsmoe
from mlcore.compress.methods import compressed_copy
from mlcore.compress.naee import _layer_output, expert_outputs, plan_naee
from mlcore.hf import adapt, tiny_config
from mlcore.moe.stats import ExpertStatistics


def _stats_calibration(counts, norms, gates) -> Calibration:
    """Statistics with chosen per-expert counts, output norms and gate weights (constant per expert)."""
    layers, experts = len(counts), len(counts[0])
    stats = ExpertStatistics(layers, experts, 2)
    gated = torch.zeros(layers, experts, dtype=torch.float64)
    for layer in range(layers):
        stats.count_tokens(layer, 100)
        for expert in range(experts):
            n = counts[layer][expert]
            outputs = torch.tensor([[norms[layer][expert], 0.0]] * n, dtype=torch.float64)
            stats.update(layer, expert, outputs, torch.full((n,), gates[layer][expert], dtype=torch.float64))
            gated[layer, expert] = n * gates[layer][expert] * norms[layer][expert]
    return Calibration(list(range(layers)), 1, stats, gated)


COUNTS = [[10, 40, 30, 20], [50, 5, 25, 20]]
NORMS = [[5.0, 1.0, 2.0, 1.0], [1.0, 1.0, 1.0, 9.0]]
GATES = [[0.9, 0.2, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5]]


def test_frequency_drops_the_least_selected_experts():
    plan = plan_frequency(_stats_calibration(COUNTS, NORMS, GATES), 2, scope="layer")
    assert plan.keep == {0: [1, 2], 1: [0, 2]}


def test_routing_score_uses_one_model_wide_threshold():
    # φ_freq = count·gate/100: layer 0 [.09 .08 .15 .10], layer 1 [.25 .025 .125 .10]; keep 4 of 8 model-wide.
    plan = plan_routing_score(_stats_calibration(COUNTS, NORMS, GATES), 2)
    assert plan.keep == {0: [2, 3], 1: [0, 2]}
    uneven = plan_routing_score(_stats_calibration(COUNTS, NORMS, [[0.01] * 4, [0.9] * 4]), 2)
    assert uneven.keep == {0: [1], 1: [0, 2, 3]}  # top_k = 1 stays in the starved layer


def test_ean_ranks_by_the_sum_of_output_norms():
    # Σ‖E(x)‖ = count·norm: layer 0 [50 40 60 20], layer 1 [50 5 25 180].
    plan = plan_ean(_stats_calibration(COUNTS, NORMS, GATES), 2, scope="layer")
    assert plan.keep == {0: [0, 2], 1: [0, 3]}


def test_reap_ranks_by_the_mean_router_weighted_norm_and_renormalises():
    # mean g·‖E(x)‖: layer 0 [4.5 .2 1.0 .5], layer 1 [.5 .5 .5 4.5] (ties broken by index).
    plan = plan_reap(_stats_calibration(COUNTS, NORMS, GATES), 2, scope="layer")
    assert plan.keep[0] == [0, 2] and 3 in plan.keep[1]
    assert plan.renormalize


def test_random_is_reproducible_by_seed_and_differs_across_seeds():
    calibration = _stats_calibration(COUNTS, NORMS, GATES)
    assert (
        plan_random(calibration, 2, scope="layer", seed=3).keep
        == plan_random(calibration, 2, scope="layer", seed=3).keep
    )
    keeps = {str(plan_random(calibration, 2, scope="layer", seed=s).keep) for s in range(10)}
    assert len(keeps) > 1


def test_average_linkage_groups_nearby_mean_outputs():
    points = torch.tensor([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.2, 5.0], [10.0, 0.0]])
    assert sorted(average_linkage(points, 3)) == [[0, 1], [2, 3], [4]]


def _tiny_model(experts: int = 6):
    torch.manual_seed(0)
    config = tiny_config("qwen3_moe", num_experts=experts, vocab_size=64)
    return AutoModelForCausalLM.from_config(config).eval()


def test_hc_smoe_merges_clusters_into_their_most_used_member():
    model = _tiny_model()
    adapter = adapt(model)
    windows = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(0))
    calibration = calibrate(adapter, windows, batch_size=2)
    plan = plan_hcsmoe(adapter, calibration, 4)
    for position, layer in enumerate(calibration.layers):
        counts = calibration.statistics.count[position]
        clusters = plan.clusters[layer]
        assert sorted(e for group in clusters.values() for e in group) == list(range(6))
        for kept, group in clusters.items():
            assert counts[kept] == counts[group].max()
            if len(group) > 1:
                weights = counts[group].double() / counts[group].sum()
                expected = (adapter.layer(layer).experts.down_proj.data[group].double() * weights[:, None, None]).sum(0)
                torch.testing.assert_close(plan.merged_weights[layer][kept][1].double(), expected, rtol=1e-5, atol=1e-6)
    _compressed, compressed_adapter = compressed_copy(model, plan)
    assert [info.num_experts for info in compressed_adapter.layers] == [4, 4]


def test_naee_picks_the_subset_with_the_smallest_layer_output_error():
    model = _tiny_model()
    adapter = adapt(model)
    windows = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    calibration = calibrate(adapter, windows, batch_size=2, keep_inputs=32)
    plan = plan_naee(adapter, calibration, 3)
    for layer in calibration.layers:
        info = adapter.layer(layer)
        hidden = calibration.layer_inputs[layer]
        with torch.no_grad():
            logits = info.router(hidden)[0].float()
            outputs = expert_outputs(info.experts, hidden, 6).float()
        reference = _layer_output(logits, outputs, top_k=2, renormalize=True)[0]

        def error(subset, logits=logits, outputs=outputs, reference=reference):
            keep = list(subset)
            out = _layer_output(logits[:, keep], outputs[keep], top_k=2, renormalize=True)[0]
            return (out - reference).square().sum().item()

        best = min(itertools.combinations(range(6), 3), key=error)
        assert plan.keep[layer] == list(best)
