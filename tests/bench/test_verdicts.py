"""The verdict rule: its statistics against scipy, and cases that must give each verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from bench.verdicts import (
    INCONCLUSIVE,
    NOT_REPRODUCED,
    REPRODUCED,
    TIE,
    Claim,
    judge,
    mde,
    paired,
    seeds_needed,
    t_quantile,
    table,
)

METHOD = [0.71, 0.74, 0.69, 0.73, 0.75]
BASELINE = [0.62, 0.66, 0.64, 0.61, 0.67]


def test_t_quantiles_match_scipy() -> None:
    for df in (1, 2, 4, 9, 30):
        assert t_quantile(0.975, df) == pytest.approx(stats.t.ppf(0.975, df))
        assert t_quantile(0.8, df) == pytest.approx(stats.t.ppf(0.8, df))


def test_the_paired_interval_matches_scipys_paired_t_test() -> None:
    pairs = paired(METHOD, BASELINE, higher_is_better=True)
    expected = stats.ttest_rel(METHOD, BASELINE).confidence_interval(0.95)
    assert pairs.interval() == pytest.approx((expected.low, expected.high))
    assert pairs.mean == pytest.approx(np.mean(np.subtract(METHOD, BASELINE)))
    assert pairs.sd == pytest.approx(np.std(np.subtract(METHOD, BASELINE), ddof=1))


def test_lower_is_better_flips_the_sign_of_the_differences() -> None:
    pairs = paired([1.0, 2.0], [3.0, 5.0], higher_is_better=False)
    assert pairs.diffs == (2.0, 3.0)


def test_the_mde_has_about_80_percent_power_by_the_noncentral_t() -> None:
    # The formula is the usual approximation; the exact power of a two-sided paired t test at an
    # effect of one MDE comes from the noncentral t and should sit near 0.8.
    sd = 0.7
    for n in (5, 10, 30):
        effect = mde(sd, n)
        assert effect == pytest.approx((stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n))
        critical = stats.t.ppf(0.975, n - 1)
        power = stats.nct.sf(critical, n - 1, effect / (sd / math.sqrt(n)))
        assert 0.75 < power < 0.85


def test_with_three_seeds_the_mde_is_about_three_paired_standard_deviations() -> None:
    assert mde(1.0, 3) == pytest.approx(3.1, abs=0.05)


def test_seeds_needed_is_the_first_n_whose_mde_fits_the_effect() -> None:
    n = seeds_needed(1.0, 0.8)
    assert n is not None and mde(1.0, n) <= 0.8 < mde(1.0, n - 1)
    assert seeds_needed(1.0, 1e-6) is None


def test_a_paired_mismatch_is_refused() -> None:
    with pytest.raises(ValueError, match="same seeds"):
        paired([1.0, 2.0], [1.0], higher_is_better=True)


def test_a_claim_needs_a_positive_effect() -> None:
    with pytest.raises(ValueError, match="positive"):
        Claim("x", "accuracy", 0.0, "card §1")


CLAIM = Claim("method beats baseline", "accuracy", 0.05, "card §4", ceiling=1.0)


def test_a_powered_clear_win_is_reproduced() -> None:
    verdict = judge(CLAIM, ("m", METHOD), ("b", BASELINE))
    assert verdict.verdict == REPRODUCED
    assert verdict.mde < 0.05 and verdict.headroom == pytest.approx(1 - np.mean(BASELINE))


def test_a_powered_clear_loss_is_not_reproduced() -> None:
    verdict = judge(CLAIM, ("m", BASELINE), ("b", METHOD))
    assert verdict.verdict == NOT_REPRODUCED


def test_a_powered_interval_around_zero_is_a_tie() -> None:
    base = [0.60, 0.62, 0.61, 0.63, 0.60, 0.62]
    method = [b + d for b, d in zip(base, [0.004, -0.005, 0.003, -0.002, 0.001, -0.001], strict=True)]
    verdict = judge(CLAIM, ("m", method), ("b", base))
    assert verdict.verdict == TIE
    low, high = verdict.interval
    assert low < 0 < high


def test_a_baseline_at_the_ceiling_is_inconclusive_whatever_the_interval() -> None:
    base = [0.998, 0.999, 0.997, 0.998, 0.999]
    method = [0.95, 0.96, 0.955, 0.952, 0.958]  # clearly worse, but nothing could beat 0.998 by 0.05
    verdict = judge(CLAIM, ("m", method), ("b", base))
    assert verdict.verdict == INCONCLUSIVE
    assert any("headroom" in r for r in verdict.reasons)
    assert "below the ceiling" in verdict.settle


def test_too_few_seeds_for_the_spread_is_inconclusive_with_the_seeds_and_cost_that_settle_it() -> None:
    base = [0.60, 0.70, 0.50]
    method = [0.65, 0.62, 0.61]  # s_d large: MDE far above 0.05
    verdict = judge(CLAIM, ("m", method), ("b", base), seconds_per_run=60, runs_per_seed=2)
    assert verdict.verdict == INCONCLUSIVE
    needed = seeds_needed(verdict.pairs.sd, 0.05)
    assert needed is not None and f"{needed} paired seeds" in verdict.settle
    assert "min of runs" in verdict.settle or "h of runs" in verdict.settle


def test_off_the_cards_scale_is_inconclusive_even_when_powered() -> None:
    claim = Claim("x", "accuracy", 0.05, "card §4", ceiling=1.0, off_scale="majority task, not parity")
    verdict = judge(claim, ("m", METHOD), ("b", BASELINE))
    assert verdict.verdict == INCONCLUSIVE
    assert "card's scale" in verdict.settle


def test_one_seed_is_inconclusive() -> None:
    verdict = judge(CLAIM, ("m", [0.9]), ("b", [0.5]))
    assert verdict.verdict == INCONCLUSIVE and verdict.pairs.n == 1


def test_the_table_shows_mde_and_headroom_beside_the_verdict() -> None:
    lines = table([judge(CLAIM, ("m", METHOD), ("b", BASELINE))])
    assert "MDE" in lines[0] and "headroom" in lines[0]
    assert "**reproduced**" in lines[2]


def test_a_significant_reversal_is_not_reproduced_even_when_the_mde_exceeds_the_claim() -> None:
    base = [0.66, 0.62, 0.70, 0.64, 0.68]
    method = [0.50, 0.49, 0.52, 0.51, 0.47]  # the method loses by ~0.16 on every seed
    claim = Claim("x", "accuracy", 0.01, "card §4", ceiling=1.0)
    verdict = judge(claim, ("m", method), ("b", base))
    assert verdict.mde > claim.effect
    assert verdict.interval[1] < 0
    assert verdict.verdict == NOT_REPRODUCED


def test_an_underpowered_null_stays_inconclusive() -> None:
    base = [0.60, 0.70, 0.50, 0.65, 0.55]
    method = [0.62, 0.66, 0.53, 0.66, 0.52]
    claim = Claim("x", "accuracy", 0.01, "card §4", ceiling=1.0)
    verdict = judge(claim, ("m", method), ("b", base))
    assert verdict.interval[0] < 0 < verdict.interval[1]
    assert verdict.verdict == INCONCLUSIVE
