from dataclasses import asdict

from bench.distill import TIERS, Config, claims
from bench.verdicts import INCONCLUSIVE


def test_the_full_tier_covers_the_issues_grid_in_both_precisions_with_three_seeds():
    configs = set(TIERS["full"]["configs"])
    for seed in range(3):
        for bf16 in (False, True):
            for loss in ("fkl", "rkl", "skew-kl", "taid"):
                assert Config(loss, bf16=bf16, seed=seed) in configs
            for alpha in (-0.5, 0.0, 0.5):
                for lam in (0.1, 0.5, 0.9):
                    assert Config("amid", alpha, lam, bf16, seed) in configs
    assert len({c.name for c in configs}) == len(configs)  # one cache file per configuration


def test_the_claim_pairs_the_best_intermediate_alpha_with_the_better_end_by_seed():
    def row(alpha, seed, fkl):
        return {"config": asdict(Config("amid", alpha, 0.5, seed=seed)), "metrics": {"forward_kl": fkl}, "seconds": 10}

    rows = [row(a, s, base + 0.01 * s) for a, base in ((-1.0, 3.0), (0.0, 2.5), (1.0, 2.8)) for s in range(3)]
    (verdict,) = claims(rows)
    assert (verdict.method, verdict.baseline) == ("α = 0", "α = 1")
    assert verdict.pairs.diffs == (0.3, 0.3, 0.3) or all(abs(d - 0.3) < 1e-9 for d in verdict.pairs.diffs)
    # One learning rate for every loss is not the card's protocol: no verdict but "inconclusive".
    assert verdict.verdict == INCONCLUSIVE and "learning rate" in verdict.reasons[0]
