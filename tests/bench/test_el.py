from dataclasses import asdict

import pytest

from bench.el import TIERS, Config, frontier, frontier_width, train_one


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
