import numpy as np
import torch

from mlcore.watermark.calibration import (
    binomial_threshold,
    bit_accuracy,
    calibrate,
    clopper_pearson,
    matched_bits,
    rate_at,
)
from mlcore.watermark.quality import imperceptibility, psnr, ssim


def test_matched_bits_counts_agreement_with_the_key():
    probabilities = np.array([[0.9, 0.1, 0.6, 0.4], [0.2, 0.2, 0.2, 0.2]])
    key = np.array([1, 0, 0, 0])
    assert matched_bits(probabilities, key).tolist() == [3, 3]
    assert bit_accuracy(probabilities, key) == 0.75


def test_the_empirical_threshold_on_a_fair_null_matches_the_binomial_one():
    rng = np.random.default_rng(0)
    null = rng.binomial(48, 0.5, size=200_000)
    for fpr in (0.01, 0.001):
        threshold = calibrate(null, fpr, 48)
        assert abs(threshold.tau - binomial_threshold(48, fpr)) <= 1
        assert threshold.fpr <= fpr
        assert threshold.fpr_ci[0] <= threshold.fpr <= threshold.fpr_ci[1]


def test_a_biased_extractor_needs_a_higher_threshold_than_the_binomial_one():
    rng = np.random.default_rng(1)
    null = rng.binomial(48, 0.6, size=20_000)  # bits agree with keys more often than chance
    assert calibrate(null, 0.001, 48).tau > binomial_threshold(48, 0.001)


def test_clopper_pearson_brackets_the_rate_and_handles_the_edges():
    low, high = clopper_pearson(5, 100)
    assert low < 0.05 < high
    assert clopper_pearson(0, 50)[0] == 0.0 and clopper_pearson(50, 50)[1] == 1.0
    rate = rate_at(np.array([40, 41, 30, 20]), 40)
    assert rate.value == 0.5 and rate.n == 4


def test_psnr_and_ssim_rank_a_small_and_a_large_perturbation():
    torch.manual_seed(0)
    x = torch.rand(2, 3, 32, 32) * 2 - 1
    small, large = x + 0.01 * torch.randn_like(x), x + 0.3 * torch.randn_like(x)
    assert psnr(x, small) > psnr(x, large) + 20
    assert ssim(x, x).item() > 0.9999
    assert ssim(x, small) > ssim(x, large)
    assert imperceptibility(x, x).item() < 1e-4 < imperceptibility(x, large).item()
