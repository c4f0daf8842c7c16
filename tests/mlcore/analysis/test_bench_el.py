import pytest

from mlcore.bench.el import Config, train_one


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
