import numpy as np
import pytest
import torch

from mlcore.compress.calibrate import Calibration
from mlcore.compress.mone import mone_scores, phi_freq, phi_var, plan_mone
from mlcore.compress.plan import experts_to_keep, select
from mlcore.jobs import JobError
from mlcore.moe.stats import ExpertStatistics


def _calibration(seed: int = 0, layers: int = 2, experts: int = 4, hidden: int = 3, tokens: int = 50):
    """A calibration from known per-expert outputs and gates, plus the raw rows for hand computation."""
    rng = np.random.default_rng(seed)
    stats = ExpertStatistics(layers, experts, hidden)
    raw = {}
    for layer in range(layers):
        stats.count_tokens(layer, tokens)
        for expert in range(experts):
            n = int(rng.integers(2, tokens))
            outputs = rng.normal(expert, 0.2 * (expert + 1 + layer), size=(n, hidden))
            gates = rng.uniform(0.1, 0.9, size=n)
            # Two batches: the moments must merge exactly.
            stats.update(layer, expert, torch.tensor(outputs[: n // 2]), torch.tensor(gates[: n // 2]))
            stats.update(layer, expert, torch.tensor(outputs[n // 2 :]), torch.tensor(gates[n // 2 :]))
            raw[layer, expert] = (outputs, gates)
    gated = torch.zeros(layers, experts, dtype=torch.float64)
    return Calibration(list(range(layers)), 2, stats, gated), raw


def test_mone_scores_match_a_hand_computation():
    calibration, raw = _calibration()
    for (layer, expert), (outputs, gates) in raw.items():
        sigma = outputs.std(axis=0, ddof=1)
        expected_var = np.sqrt((sigma**2).sum())
        expected_freq = gates.sum() / 50
        assert phi_var(calibration)[layer, expert].item() == pytest.approx(expected_var, rel=1e-9)
        assert phi_freq(calibration)[layer, expert].item() == pytest.approx(expected_freq, rel=1e-9)
        assert mone_scores(calibration)[layer, expert].item() == pytest.approx(expected_var * expected_freq, rel=1e-9)


def test_the_variance_norm_option_uses_the_norm_of_the_variances():
    calibration, raw = _calibration()
    outputs, _ = raw[1, 2]
    expected = np.linalg.norm(outputs.var(axis=0, ddof=1))
    assert phi_var(calibration, variance_norm="var")[1, 2].item() == pytest.approx(expected, rel=1e-9)


def test_mone_keeps_the_top_p_per_layer_and_makes_mean_output_novices():
    calibration, raw = _calibration()
    plan = plan_mone(calibration, 2, scope="layer")
    scores = mone_scores(calibration)
    for layer in (0, 1):
        expected = sorted(np.argsort(-scores[layer].numpy())[:2].tolist())
        assert plan.keep[layer] == expected
        pruned = sorted(set(range(4)) - set(expected))
        assert sorted(plan.novices[layer]) == pruned
        for expert in pruned:
            expected_mu = raw[layer, expert][0].mean(axis=0)
            np.testing.assert_allclose(plan.novices[layer][expert].numpy(), expected_mu, rtol=1e-6)


def test_mone_zero_and_mone_delete_share_mone_s_ranking():
    calibration, _ = _calibration()
    mone, zero, delete = (
        plan_mone(calibration, 3, scope="layer", **kw) for kw in ({}, {"zero_novices": True}, {"delete": True})
    )
    assert mone.keep == zero.keep == delete.keep
    assert all(float(v.abs().sum()) == 0 for layer in zero.novices.values() for v in layer.values())
    assert delete.novices == {}


def test_global_scope_keeps_at_least_top_k_per_layer():
    scores = torch.tensor([[9.0, 8.0, 7.0, 6.0], [0.1, 0.2, 0.3, 0.4]])
    assert select(scores, 2, scope="global", top_k=2) == [[0, 1], [2, 3]]
    assert select(scores, 3, scope="global", top_k=2) == [[0, 1, 2, 3], [2, 3]]


def test_a_ratio_that_prunes_every_expert_is_refused():
    with pytest.raises(JobError, match="prune every expert"):
        experts_to_keep(8, 2, ratio=0.99)
    with pytest.raises(JobError, match="at least top_k"):
        experts_to_keep(8, 2, keep=1)
    assert experts_to_keep(16, 2, ratio=0.25) == 12
