from bench.distill import TIERS, Config, _claim


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


def test_the_claim_check_compares_intermediate_alphas_with_both_ends():
    def row(alpha, fkl):
        return {"method": f"amid α={alpha:g} λ=0.5", "precision": "fp32", "forward_kl": fkl}

    wins = _claim([row(-1, 3.0), row(0, 2.5), row(1, 2.8)])
    loses = _claim([row(-1, 3.0), row(0, 2.9), row(1, 2.8)])
    assert "**yes**" in wins[0] and "α = 0" in wins[0]
    assert "**no**" in loses[0]
