from bench.compress_reference import (
    CARD_TRAINING_SEEDS,
    CARD_WINDOWS,
    TIERS,
    off_scale,
    per_training_seed,
    recipe,
    reference_claims,
)
from bench.verdicts import INCONCLUSIVE, NOT_REPRODUCED, REPRODUCED, TIE


def test_the_reference_model_is_one_domain_16_experts_top2_with_a_per_layer_balance_loss():
    spec = recipe(seed=2, steps=TIERS["full"].steps)
    assert spec.sources == ("shakespeare",) and spec.seed == 2
    assert (spec.num_experts, spec.top_k, spec.num_layers) == (16, 2, 4) and spec.balance_coef > 0
    full = TIERS["full"]
    assert len(full.training_seeds) >= CARD_TRAINING_SEEDS and full.eval_windows >= CARD_WINDOWS
    assert set(full.ratios) == {0.25, 0.5}


def test_costly_methods_run_once_after_every_training_seed_has_its_cheap_first_calibration():
    phases = TIERS["full"].phases()
    assert [seed for seed, _ in phases] == [0, 0, 1, 2]
    assert phases[1][1] == ("naee",) and all("naee" not in methods for _, methods in (phases[0], *phases[2:]))
    assert {"mone", "mone-global", "rs", "reap-global"} <= set(phases[0][1])


BASES = {seed: {"ppl_mean": 30.0, "windows": 512} for seed in range(3)}


def _rows(method, values, calibration_seeds=(0, 1), ratio=0.5):
    """One row per training seed × calibration seed; ``values[t]`` is training seed t's Δppl %, and the
    calibration seeds add ±0.1 around it."""
    return [
        {
            "method": method,
            "ratio": ratio,
            "training_seed": t,
            "seed": c,
            "delta_ppl_pct": value + (0.1 if c else -0.1),
            "seconds": 3.0,
        }
        for t, value in enumerate(values)
        for c in calibration_seeds
    ]


def test_a_verdict_pairs_the_training_seeds_and_follows_the_interval():
    rows = _rows("mone", (20.0, 22.0, 25.0)) + _rows("rs", (30.0, 32.5, 35.0)) + _rows("ean", (20.5, 21.0, 25.5))
    rows += _rows("frequency", (12.0, 13.5, 15.0))
    found = {v.baseline: v for v in reference_claims(rows, BASES, TIERS["full"]) if v.method == "mone"}
    assert found["rs"].pairs.n == 3 and found["rs"].interval[0] > 0 and found["rs"].verdict == REPRODUCED
    assert found["ean"].verdict == TIE  # the interval holds 0 and the seeds could see 5 points
    assert found["frequency"].verdict == NOT_REPRODUCED


def test_fewer_training_seeds_or_windows_than_the_card_leave_it_inconclusive():
    rows = _rows("mone", (20.0, 22.0, 25.0)) + _rows("rs", (30.0, 32.5, 35.0))
    short = {seed: {**base, "windows": 256} for seed, base in BASES.items()}
    assert "256 held-out windows" in off_scale(TIERS["full"], short)
    (v,) = [v for v in reference_claims(rows, short, TIERS["full"]) if v.baseline == "rs"]
    assert v.verdict == INCONCLUSIVE
    two = [r for r in rows if r["training_seed"] < 2]
    (v,) = [v for v in reference_claims(two, {0: BASES[0], 1: BASES[1]}, TIERS["full"]) if v.baseline == "rs"]
    assert v.verdict == INCONCLUSIVE and v.pairs.n == 2


def test_a_pair_averages_only_the_calibration_seeds_both_methods_finished():
    rows = _rows("mone", (20.0, 22.0, 25.0), calibration_seeds=(0, 1, 2))
    rows += _rows("naee", (30.0, 31.0, 33.0), calibration_seeds=(0,))
    alone, training = per_training_seed(rows, 0.5)
    assert training == [0, 1, 2] and alone[("mone", 0)]["calibration_seeds"] == 3
    paired, _ = per_training_seed(rows, 0.5, ("mone", "naee"))
    assert paired[("mone", 0)]["calibration_seeds"] == 1
    assert abs(paired[("mone", 0)]["delta_ppl_pct"] - 19.9) < 1e-9  # calibration seed 0 alone


def test_the_benchmark_module_has_the_entry_points_the_runner_calls():
    import bench.compress_reference as module

    assert callable(module.run) and callable(module.report_from_cache)
