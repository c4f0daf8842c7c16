from dataclasses import asdict, replace

from bench.distill import LRS, TIERS, Config, _configs, best_lrs, claims, peaked
from bench.verdicts import INCONCLUSIVE, NOT_REPRODUCED


def _row(cfg, *, val, test=None, spikes=0.0, nonfinite=0.0, steps=400):
    metrics = {
        "validation_forward_kl": val,
        "forward_kl": val if test is None else test,
        "grad_spikes_10x": spikes,
        "nonfinite_loss_steps": nonfinite,
        "nonfinite_grad_steps": 0.0,
    }
    return {"config": asdict(cfg), "metrics": metrics, "grad_norms": [1.0] * steps, "seconds": 10.0}


def test_every_loss_of_the_full_tier_runs_the_same_learning_rate_grid_spanning_the_cards_defaults():
    spec = TIERS["full"]
    assert spec["lrs"] == LRS and min(LRS) <= 1e-4 and max(LRS) >= 5e-3 and any(1e-4 < lr < 5e-3 for lr in LRS)
    first = _configs(spec, [])
    assert len(first) == len(spec["arms"]) * len(LRS)
    for arm in spec["arms"]:
        assert {c.lr for c in first if c.arm == arm} == set(LRS)
    assert len({c.name for c in first}) == len(first)  # one cache row per configuration
    assert spec["seeds"] >= 3 and spec["claim_seeds"] >= spec["seeds"]
    # The claim's grid: both ends and the card's intermediate α at λ = 0.5; the stability arms are peaked.
    assert {a.alpha for a in spec["arms"] if a.loss == "amid" and a.temperature == 1.0} == {-1.0, -0.5, 0.0, 0.5, 1.0}
    assert {a.loss for a in spec["arms"] if a.temperature != 1.0} == {"fkl", "rkl", "skew-kl", "taid", "amid"}


def test_the_stability_arms_run_in_fp16_with_the_log_floor_off():
    arm = peaked("rkl")
    assert (arm.precision, arm.floor, arm.temperature) == ("fp16", False, 0.25)
    assert arm.loss_config().log_floor is None
    assert Config("rkl").loss_config().log_floor is not None  # the default loss keeps its floor


def test_each_loss_takes_the_rate_with_the_lowest_validation_fkl_not_test_fkl():
    arm = Config("fkl")
    rows = [
        _row(replace(arm, lr=1e-4), val=3.0, test=1.0),
        _row(replace(arm, lr=7e-4), val=2.0, test=2.5),
        _row(replace(arm, lr=5e-3), val=float("nan"), test=0.5),  # a diverged run is never the best
    ]
    assert best_lrs(rows) == {arm: 7e-4}


def test_the_other_seeds_run_only_at_the_chosen_rate_once_the_grid_is_done():
    spec = {**TIERS["full"], "arms": (Config("fkl"),), "seeds": 3, "claim_seeds": 3}
    rows = [_row(Config("fkl", lr=lr), val=v) for lr, v in zip(LRS, (3.0, 1.0, 2.0, 4.0), strict=True)]
    later = _configs(spec, rows)[len(LRS) :]
    assert [(c.lr, c.seed) for c in later] == [(LRS[1], 1), (LRS[1], 2)]


def _grid_ends(rows):
    """Seed-0 runs at the grid's other rates, worse on validation: every arm's chosen rate (7e-4) is inside."""
    for cfg in {Config(**r["config"]) for r in rows if r["config"]["seed"] == 0}:
        rows += [_row(replace(cfg, lr=lr), val=9.0) for lr in (LRS[0], LRS[-1])]
    return rows


def test_the_alpha_claim_picks_alpha_on_validation_and_judges_it_on_the_test_split():
    rows = []
    for alpha, val, test in ((-1.0, 3.0, 3.0), (0.0, 2.5, 3.5), (0.5, 2.6, 2.0), (1.0, 2.8, 2.8)):
        for seed in range(3):
            cfg = Config("amid", alpha, 0.5, seed=seed, lr=LRS[1])
            rows.append(_row(cfg, val=val + 0.01 * seed, test=test + 0.01 * seed * (1 + alpha)))
    rows = _grid_ends(rows)
    (verdict,) = claims(rows)
    # α = 0 has the best validation FKL, so it is the method, although α = 0.5 is better on test.
    assert (verdict.method, verdict.baseline) == ("α = 0", "α = 1")
    assert all(d < 0 for d in verdict.pairs.diffs)
    assert verdict.verdict == NOT_REPRODUCED  # the interval lies wholly below 0: α = 1 is better


def _stability_rows(amid_spikes, baseline_spikes, nonfinite=0.0):
    rows = []
    for seed, (a, b) in enumerate(zip(amid_spikes, baseline_spikes, strict=True)):
        rows.append(_row(replace(peaked("amid", 0.5), seed=seed, lr=7e-4), val=5.0, spikes=a, nonfinite=nonfinite))
        rows.append(_row(replace(peaked("fkl"), seed=seed, lr=7e-4), val=3.0, spikes=b))
        rows.append(_row(replace(peaked("rkl"), seed=seed, lr=5e-3), val=9.0, spikes=b + 8))
    return rows


def test_the_stability_claim_fires_when_the_baselines_spike_and_amid_does_not():
    spikes, nonfinite = claims(_stability_rows([0, 0, 0, 0, 0], [20, 24, 22, 18, 21]))
    assert spikes.baseline == "fkl"  # the most stable baseline, not the spikiest
    assert all(d > 0 for d in spikes.pairs.diffs)  # AMiD has fewer spikes: the measure sees it
    assert spikes.verdict == "reproduced"
    # No run had a non-finite step: the best baseline is at the ceiling, nothing to be more stable than.
    assert nonfinite.verdict == INCONCLUSIVE and "ceiling" in nonfinite.reasons[0]


def test_the_stability_claim_counts_non_finite_steps_as_a_share_of_the_run():
    _, nonfinite = claims(_stability_rows([0, 0, 0], [0, 0, 0], nonfinite=40.0))
    assert nonfinite.pairs.diffs == (-10.0, -10.0, -10.0)  # AMiD: 40 of 400 steps non-finite, fkl none


def test_the_quick_tiers_claims_are_never_read_at_the_cards_scale():
    rows = []
    for alpha, fkl in ((-1.0, 3.0), (0.5, 2.9), (1.0, 2.0)):
        rows += [_row(Config("amid", alpha, 0.5, seed=s, lr=LRS[1]), val=fkl + 0.01 * s) for s in range(3)]
    rows = _grid_ends(rows)
    assert claims(rows)[0].verdict == NOT_REPRODUCED
    (quick,) = claims(rows, off_scale=TIERS["quick"]["off_scale"])
    assert quick.verdict == INCONCLUSIVE and "quick tier" in quick.reasons[0]


def test_an_alpha_claim_whose_arms_chose_the_grids_top_rate_is_not_judged_yet():
    rows = []
    for alpha, fkl in ((-1.0, 3.0), (0.5, 2.9), (1.0, 2.0)):
        rows += [_row(Config("amid", alpha, 0.5, seed=s, lr=LRS[-1]), val=fkl + 0.01 * s) for s in range(3)]
        rows += [_row(Config("amid", alpha, 0.5, lr=lr), val=9.0) for lr in LRS[:-1]]
    (verdict,) = claims(rows)
    # α = 1 wins on every seed, but both arms may do better still above the grid: the comparison is the edge's.
    assert all(d < 0 for d in verdict.pairs.diffs)
    assert verdict.verdict == INCONCLUSIVE and "the grid's top" in verdict.reasons[0]
