import re

import numpy as np
import pytest

from mlcore.analysis.el import ELConstants, fit_dense_law, fit_law, leverage, transformed
from mlcore.analysis.el_holdout import holdout_scores
from mlcore.analysis.runs import RunsError, measured_leverage, parse_row, read_runs, write_runs
from tests.mlcore.analysis.synthetic_el import ACTIVATIONS, BUDGETS, TRUE, synthetic_grid, synthetic_runs


def test_the_transform_is_one_for_a_dense_model_and_saturates_at_x_max():
    assert transformed(1.0, 1.0, 1024) == pytest.approx(1.0)
    values = transformed(np.array([1, 4, 64, 1e6]), 1.0, 1024)
    assert np.all(np.diff(values) > 0) and values[-1] == pytest.approx(1024, rel=1e-2)


def test_leverage_rises_as_the_activation_ratio_falls_and_as_compute_grows():
    assert np.all(np.diff(leverage(np.array(ACTIVATIONS), 4, 1e17, TRUE)) > 0)
    assert np.all(np.diff(leverage(1 / 8, 4, np.array(BUDGETS), TRUE)) > 0)
    assert leverage(1.0, 4, 1e17, TRUE)[0] == pytest.approx(1.0)


def test_the_best_granularity_is_where_leverage_peaks():
    grid = np.exp(np.linspace(0, 4, 4001))
    peak = grid[np.argmax(leverage(1 / 8, grid, 1e17, TRUE))]
    assert TRUE.best_granularity == pytest.approx(np.exp(0.3 / 0.16))
    assert peak == pytest.approx(TRUE.best_granularity, rel=1e-2)
    assert ELConstants(a=0.5, beta=0.1, gamma=0.01).best_granularity is None


def test_the_fitter_recovers_known_parameters_from_noisy_syntheticsynthetic_runs():
    fit = fit_law(*synthetic_grid(noise=0.01), resamples=100)
    for name in ("a", "d", "beta", "gamma"):
        low, high = fit.intervals[name]
        # A 95% interval misses now and then; the truth must still lie within one width of it.
        assert low - (high - low) <= getattr(TRUE, name) <= high + (high - low), name
        assert low < getattr(fit.constants, name) < high
    assert fit.constants.beta == pytest.approx(0.3, abs=0.02)
    assert fit.constants.gamma == pytest.approx(-0.08, abs=0.01)
    assert fit.constants.best_granularity == pytest.approx(TRUE.best_granularity, rel=0.1)


def test_the_huber_fit_shrugs_off_a_few_wildsynthetic_runs():
    A, G, C, el = synthetic_grid(noise=0.005)
    el[::25] *= 20  # four corrupted runs
    robust = fit_law(A, G, C, el, resamples=0, delta=0.02)
    squares = fit_law(A, G, C, el, resamples=0, delta=1e6)
    assert abs(robust.constants.gamma - TRUE.gamma) < abs(squares.constants.gamma - TRUE.gamma)
    assert robust.constants.gamma == pytest.approx(TRUE.gamma, abs=0.01)


def test_feeding_the_activation_ratio_instead_of_sparsity_flips_the_exponent_sign():
    fit = fit_law(*synthetic_grid(noise=0.0), variant="activation-only", input="activation", resamples=0)
    assert fit.constants.a < 0
    assert fit_law(*synthetic_grid(noise=0.0), variant="activation-only", resamples=0).constants.a > 0


def test_measured_leverage_inverts_the_dense_law_and_the_full_law_predicts_held_out_budgets_best(tmp_path):
    path = tmp_path / "runs.csv"
    write_runs(synthetic_runs(), path)
    law, leverages = measured_leverage(read_runs(path))
    assert law.b == pytest.approx(0.05)
    first = leverages[0]
    assert first.el == pytest.approx(
        float(leverage(first.run.activation(), first.run.granularity, first.run.flops, TRUE)[0]), rel=1e-6
    )
    scores = {s.variant: s for s in holdout_scores(leverages, by="budget")}
    assert scores["full"].rmse_log_el < 1e-3
    assert scores["full"].rmse_log_el < scores["no-granularity"].rmse_log_el < scores["naive"].rmse_log_el
    assert scores["full"].best_g_hits == scores["full"].best_g_groups > 0


def test_the_dense_law_needs_two_budgets():
    with pytest.raises(ValueError, match="two or more"):
        fit_dense_law([1e15, 1e15], [3.0, 3.1])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "sparse"}, "kind must be"),
        ({"loss": "abc"}, "loss is 'abc'"),
        ({"top_k": "9"}, "1 ≤ top_k ≤ experts"),
        ({"active_params": "2e7"}, "exceeds total_params"),
        ({"experts": "2.5"}, "whole number"),
        ({"flops": "-1"}, "flops must be positive"),
    ],
)
def test_a_bad_row_is_reported_with_its_row_number(change, message):
    row = {
        "name": "r",
        "kind": "moe",
        "total_params": "8e6",
        "active_params": "1e6",
        "experts": "8",
        "top_k": "1",
        "shared_experts": "0",
        "granularity": "2",
        "tokens": "1e6",
        "flops": "6e12",
        "loss": "3.2",
    }
    with pytest.raises(RunsError, match=f"row 7: .*{re.escape(message)}"):
        parse_row({**row, **change}, 7)


def test_a_table_without_required_columns_is_refused(tmp_path):
    path = tmp_path / "runs.csv"
    path.write_text("name,kind,loss\na,dense,3\n")
    with pytest.raises(RunsError, match="lacks the column"):
        read_runs(path)


@pytest.mark.parametrize("delimiter", ["\t", ";"])
def test_a_tsv_or_semicolon_runs_table_reads_as_the_csv_does(tmp_path, delimiter):
    import csv

    path = tmp_path / "runs.csv"
    write_runs(synthetic_runs(), path)
    rows = list(csv.reader(path.read_text().splitlines()))
    other = tmp_path / "runs.txt"
    with other.open("w", newline="", encoding="utf-8-sig") as f:
        csv.writer(f, delimiter=delimiter, lineterminator="\r\n").writerows(rows)
    assert read_runs(other) == read_runs(path)
