import statistics
from dataclasses import asdict

import pytest

from bench.el import (
    TIERS,
    Config,
    cache_key,
    claims,
    frontier,
    frontier_width,
    needed_runs,
    next_width,
    seed_leverage,
    train_one,
)


@pytest.mark.parametrize(("activation", "granularity"), [(1 / 2, 1), (1 / 4, 2), (1 / 8, 4), (1 / 16, 8)])
def test_moe_configurations_match_the_dense_model_s_active_expert_flops(activation, granularity):
    dense, moe = Config(64, 1, 1), Config(64, activation, granularity)
    assert moe.top_k / moe.experts == activation
    assert 2 * moe.d / moe.d_expert == granularity
    expert_active = moe.top_k * 3 * moe.d * moe.d_expert
    assert expert_active == 3 * dense.d * dense.d_expert
    assert moe.params()[1] - dense.params()[1] == 2 * moe.d * moe.experts  # only the routers differ


def test_a_short_training_run_learns_and_reports_its_compute():
    import torch

    text = torch.tensor(list(b"to be or not to be, that is the question. " * 200))
    cfg = Config(32, 1 / 4, 1)
    row = train_one(cfg, 6.0 * cfg.params()[1] * 20 * 16 * 64, text, text, eval_windows=8)
    assert row["steps"] == 20
    assert row["flops"] == pytest.approx(6.0 * row["active_params"] * row["tokens"])
    assert row["loss"] < 4.5  # ln 256 ≈ 5.5 untrained: it learns which bytes the phrase uses


def _row(d: int, budget: str, loss: float, activation: float = 1, granularity: int = 1) -> dict:
    cfg = Config(d, activation, granularity)
    return {"config": asdict(cfg), "budget": budget, "loss": loss, "tokens": 20_000, "active_params": cfg.params()[1]}


def test_the_moes_train_at_the_best_dense_width_and_an_edge_winner_is_flagged_unbracketed():
    small = [_row(16, "1e11", 2.20), _row(24, "1e11", 2.24), _row(32, "1e11", 2.35)]
    large = [_row(16, "4e11", 1.95), _row(24, "4e11", 1.80), _row(32, "4e11", 1.86), _row(24, "4e11", 1.5, 1 / 8, 2)]
    assert frontier_width(small) == 16
    budgets = {f["budget"]: f for f in frontier(small + large)}
    assert budgets["1e11"]["best_width"] == 16 and not budgets["1e11"]["bracketed"]
    # The MoE run's lower loss does not move the dense frontier.
    assert budgets["4e11"]["best_width"] == 24 and budgets["4e11"]["bracketed"]
    assert budgets["4e11"]["tokens_per_param"] == pytest.approx(20_000 / Config(24, 1, 1).params()[1])


def test_the_quick_tier_is_a_subset_of_the_full_grid_so_it_reuses_its_cached_runs():
    quick, full = TIERS["quick"], TIERS["full"]
    assert quick["eval_windows"] == full["eval_windows"]
    for key in ("budget_steps", "dense_widths", "shapes"):
        assert set(quick[key]) <= set(full[key]), key


def _seeded(d: int, budget: str, loss: float, seed: int, activation: float = 1, granularity: int = 1) -> dict:
    cfg = Config(d, activation, granularity)
    total, active = cfg.params()
    flops = float(budget)
    return {
        "config": asdict(cfg),
        "name": cfg.name,
        "budget": budget,
        "seed": seed,
        "loss": loss,
        "flops": flops,
        "tokens": flops / (6 * active),
        "total_params": total,
        "active_params": active,
        "seconds": 10.0,
    }


@pytest.mark.parametrize(
    ("losses", "expected"),
    [
        ({16: 2.2, 24: 2.3, 32: 2.4}, 12),  # narrowest wins: step down the ladder
        ({16: 2.4, 24: 2.3, 32: 2.2}, 48),  # widest wins: step up
        ({16: 2.3, 24: 2.2, 32: 2.4}, None),  # already bracketed
        ({8: 2.2, 12: 2.3}, None),  # the ladder has nothing narrower than 8
    ],
)
def test_the_next_width_steps_past_an_edge_optimum_along_the_ladder(losses, expected):
    assert next_width(losses) == expected


def test_the_frontier_is_bracketed_on_the_mean_over_seeds_with_paired_gaps_to_both_neighbours():
    rows = [
        *(_seeded(12, "1e11", 2.30 + 0.01 * s, s) for s in range(3)),
        *(_seeded(16, "1e11", 2.20 + 0.01 * s, s) for s in range(3)),
        *(_seeded(24, "1e11", 2.25 + 0.01 * s + 0.005 * (s == 2), s) for s in range(3)),
        _seeded(32, "1e11", 2.40, 0),
    ]
    (point,) = frontier(rows)
    assert point["best_width"] == 16 and point["bracketed"]
    assert point["seeds"]["16"] == [0, 1, 2] and point["seeds"]["32"] == [0]
    narrower, wider = point["neighbours"]["narrower"], point["neighbours"]["wider"]
    assert (narrower["width"], wider["width"]) == (12, 24)
    assert narrower["mean"] == pytest.approx(0.10) and narrower["seeds"] == 3
    assert 0 < wider["ci95"][0] < wider["mean"] < wider["ci95"][1]


def test_a_seed_mean_can_move_the_optimum_off_the_width_the_moes_trained_at():
    rows = [
        _seeded(16, "1e11", 2.20, 0),
        _seeded(16, "1e11", 2.40, 1),
        _seeded(24, "1e11", 2.25, 0),
        _seeded(24, "1e11", 2.25, 1),
        _seeded(32, "1e11", 2.50, 0),
        _seeded(16, "1e11", 2.10, 0, 1 / 8, 2),
    ]
    (point,) = frontier(rows)
    assert point["best_width"] == 24 and point["moe_width"] == 16
    assert point["bracketed"]


def _spec(**overrides) -> dict:
    return {"dense_widths": (16, 24, 32), "shapes": ((1 / 8, 2), (1 / 8, 4)), "seeds": (0, 1, 2), **overrides}


def _names(needed) -> list[tuple[str, str, int]]:
    return [(cfg.name, budget, seed) for cfg, budget, seed in needed]


def test_an_edge_optimum_is_bracketed_before_any_moe_trains_at_its_width():
    rows = [_seeded(16, "1e11", 2.20, 0), _seeded(24, "1e11", 2.25, 0), _seeded(32, "1e11", 2.35, 0)]
    assert _names(needed_runs(rows, _spec(), ["1e11"])) == [("dense-d12", "1e11", 0)]


def test_the_plan_trains_the_verdict_pair_s_seeds_before_the_neighbours_seeds_and_then_stops():
    rows = [
        _seeded(16, "1e11", 2.30, 0),
        _seeded(24, "1e11", 2.20, 0),
        _seeded(32, "1e11", 2.35, 0),
        _seeded(24, "1e11", 2.15, 0, 1 / 8, 2),
        _seeded(24, "1e11", 2.10, 0, 1 / 8, 4),
    ]
    plan = _names(needed_runs(rows, _spec(), ["1e11"]))
    pair = [
        ("dense-d24", "1e11", 1),
        ("moe-d24-A1/8-G4", "1e11", 1),
        ("dense-d24", "1e11", 2),
        ("moe-d24-A1/8-G4", "1e11", 2),
    ]
    assert plan[:4] == pair
    assert set(plan[4:]) == {(f"dense-d{d}", "1e11", s) for d in (16, 32) for s in (1, 2)}
    done = rows + [_seeded(int(n.split("-d")[1].split("-")[0]), b, 2.2, s) for n, b, s in plan if n.startswith("dense")]
    done += [_seeded(24, "1e11", 2.1, s, 1 / 8, 4) for s in (1, 2)]
    assert needed_runs(done, _spec(), ["1e11"]) == []


def test_each_seed_s_el_is_read_off_that_seed_s_own_dense_law():
    rows = []
    for seed, scale in enumerate((1.0, 1.1, 0.9)):  # seeds shift the whole dense law: EL must not move
        for budget in ("1e11", "2e11", "4e11"):
            c = float(budget)
            rows.append(_seeded(16, budget, scale * 50 * c**-0.12, seed))
            # the MoE reaches the dense loss of twice its compute: EL = 2 under every seed
            rows.append(_seeded(16, budget, scale * 50 * (2 * c) ** -0.12, seed, 1 / 8, 2))
    leverage = {p["budget"]: p for p in seed_leverage(rows)}
    assert set(leverage) == {"1e11", "2e11", "4e11"}
    for point in leverage.values():
        assert point["seeds"] == 3
        assert point["geometric_mean"] == pytest.approx(2.0, rel=1e-6)
        assert all(el == pytest.approx(2.0, rel=1e-6) for el in point["EL_by_seed"].values())


def test_the_verdict_pairs_the_frontier_moe_with_the_mean_best_dense_width_over_common_seeds():
    rows = [_seeded(16, "1e11", 2.40, 0), _seeded(32, "1e11", 2.40, 0)]
    rows += [_seeded(24, "1e11", 2.20 + 0.001 * s, s) for s in range(3)]
    rows += [_seeded(24, "1e11", 2.10 + 0.001 * s, s, 1 / 8, 4) for s in range(2)]  # seed 2 not trained yet
    rows += [_seeded(24, "1e11", 2.30, 0, 1 / 8, 2)]
    (verdict,) = claims(rows)
    assert (verdict.method, verdict.baseline) == ("moe-d24-A1/8-G4", "dense-d24")
    assert verdict.pairs.n == 2 and verdict.pairs.mean == pytest.approx(0.10)
    assert verdict.claim.off_scale is None
    assert verdict.headroom == pytest.approx(statistics.fmean([2.20, 2.201]))


def test_seed_zero_keeps_the_cache_key_the_grid_was_trained_under():
    cfg = Config(16, 1 / 8, 4)
    assert cache_key(cfg, "1.01e+11", 128, 0) == "moe-d16-A1_8-G4_C1.01e+11_ev128"
    assert cache_key(cfg, "1.01e+11", 128, 2) == "moe-d16-A1_8-G4_C1.01e+11_ev128_s2"
