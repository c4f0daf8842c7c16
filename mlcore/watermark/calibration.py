"""Empirical detection thresholds and rates with confidence intervals (method card, section 2 "Calibrate τ").

A verifier flags an image for key k when S, the number of decoded bits that match k, reaches τ.
The binomial null (S ~ Bin(M, ½)) assumes i.i.d. fair bits; a learned extractor's bits on clean
images are neither fair nor independent for a *fixed* key, so τ is calibrated on many
unwatermarked images scored against the keys actually in use:

    τ(f) = min { t : #{clean (image, key) pairs with S ≥ t} / #pairs ≤ f }

and TPR(f) = P[S(watermarked, own key) ≥ τ(f)]. Rates carry Clopper–Pearson 95 % intervals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def matched_bits(probabilities: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """S per row: decoded bits (probability > ½) equal to the key's bits. Shapes (n, M) and (n, M) or (M,)."""
    return ((probabilities > 0.5) == (np.broadcast_to(keys, probabilities.shape) > 0.5)).sum(axis=1)


def bit_accuracy(probabilities: np.ndarray, keys: np.ndarray) -> float:
    return (
        float(matched_bits(probabilities, keys).mean() / probabilities.shape[1]) if len(probabilities) else float("nan")
    )


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact binomial confidence interval for successes / trials."""
    from scipy.stats import beta

    if trials == 0:
        return (0.0, 1.0)
    a = (1 - level) / 2
    low = 0.0 if successes == 0 else float(beta.ppf(a, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(1 - a, successes + 1, trials - successes))
    return low, high


def binomial_threshold(num_bits: int, fpr: float) -> int:
    """The smallest τ with P[Bin(M, ½) ≥ τ] ≤ fpr (the analytic threshold, for comparison)."""
    from scipy.stats import binom

    for tau in range(num_bits + 2):
        if binom.sf(tau - 1, num_bits, 0.5) <= fpr:
            return tau
    return num_bits + 1


@dataclass(frozen=True)
class Threshold:
    fpr_target: float
    tau: int
    fpr: float  # measured on the calibration scores
    fpr_ci: tuple[float, float]
    negatives: int


def calibrate(null_scores: np.ndarray, fpr: float, num_bits: int) -> Threshold:
    """τ(f) on the null scores (clean image × key pairs); see the module docstring."""
    scores = np.asarray(null_scores)
    n = len(scores)
    tau = num_bits + 1
    for t in range(num_bits + 1):
        if (scores >= t).sum() <= fpr * n:
            tau = t
            break
    false = int((scores >= tau).sum())
    return Threshold(fpr_target=fpr, tau=tau, fpr=false / max(1, n), fpr_ci=clopper_pearson(false, n), negatives=n)


@dataclass(frozen=True)
class Rate:
    value: float
    ci: tuple[float, float]
    n: int


def rate_at(scores: np.ndarray, tau: int) -> Rate:
    """The share of ``scores`` ≥ τ, with its interval (a TPR on watermarked scores, an FPR on clean ones)."""
    hits = int((np.asarray(scores) >= tau).sum())
    return Rate(value=hits / max(1, len(scores)), ci=clopper_pearson(hits, len(scores)), n=len(scores))
