import json

import pytest

from mlcore.analysis.runs import write_runs
from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from tests.mlcore.analysis.synthetic_el import TRUE, synthetic_runs

PROPOSAL = {"d_model": 256, "layers": 4, "experts": 32, "top_k": 4, "d_expert": 128, "tokens": 1e9, "seed": 0}


def run(raw, files=None, ctx=None):
    kind = get_kind("moe-planner")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {**PROPOSAL, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_fits_uploaded_runs_and_plans_a_configuration(tmp_path):
    path = tmp_path / "runs.csv"
    write_runs(synthetic_runs(noise=0.01), path)
    outcome, ctx = run({"constants": "fit-runs", "resamples": 30}, {"runs": [path]})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["fit/gamma"] == pytest.approx(TRUE.gamma, abs=0.01)
    assert ctx.metrics.scalars["holdout/full/rmse_log_el"] < ctx.metrics.scalars["holdout/naive/rmse_log_el"]
    scalars = ctx.metrics.scalars
    # A = 4/32 and G = 2·256/128 = 4; EL follows the fitted law, and the saving from it.
    assert scalars["activation_ratio"] == 0.125 and scalars["granularity"] == 4
    assert scalars["efficiency_leverage"] > 1
    assert scalars["compute_saving"] == pytest.approx(1 - 1 / scalars["efficiency_leverage"])
    assert scalars["total_params"] > scalars["active_params"]
    assert {"fit", "el-vs-activation", "el-vs-granularity", "el-vs-compute"} <= set(ctx.charts)
    plan = json.loads(ctx.artifacts["plan.json"].path.read_text())
    assert plan["constants"]["source"] == "fitted on runs.csv"
    assert scalars["orders_of_magnitude_outside_fit"] == 0  # 1.6e16 FLOPs lies inside the runs' 1e15–1e18


def test_user_constants_give_the_law_s_value():
    from mlcore.analysis.el import ELConstants, leverage

    outcome, ctx = run({"constants": "user", "a": 0.5, "d": 0.01, "beta": 0.2, "gamma": -0.05})
    assert outcome.status == "succeeded", outcome.traceback
    expected = leverage(0.125, 4, ctx.metrics.scalars["training_flops"], ELConstants(0.5, 0.01, 0.2, -0.05))[0]
    assert ctx.metrics.scalars["efficiency_leverage"] == pytest.approx(expected)


def test_offload_traffic_shrinks_with_the_cache_hit_rate():
    _, cold = run({"constants": "user", "a": 0.5, "cache_hit_rate": 0.0})
    _, warm = run({"constants": "user", "a": 0.5, "cache_hit_rate": 0.75})
    cold_bytes = cold.metrics.scalars["offload_bytes_per_token"]
    assert warm.metrics.scalars["offload_bytes_per_token"] == pytest.approx(cold_bytes / 4)
    assert cold_bytes == 4 * 4 * 3 * 256 * 128 * 2  # layers × k × one SwiGLU expert in bf16


def test_a_runs_table_with_a_bad_row_is_refused_naming_the_row(tmp_path):
    path = tmp_path / "runs.csv"
    write_runs(synthetic_runs(), path)
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace("moe", "sparse") if "moe" in lines[3] else lines[3].replace("dense", "sparse")
    path.write_text("\n".join(lines) + "\n")
    outcome, ctx = run({"constants": "fit-runs"}, {"runs": [path]})
    assert outcome.status == "failed"
    assert "Runs table: row 4: kind must be 'dense' or 'moe'" in outcome.error
    assert not ctx.artifacts


def test_fitting_without_a_runs_table_is_refused():
    outcome, _ = run({"constants": "fit-runs"})
    assert outcome.status == "failed" and "Upload a runs CSV" in outcome.error


@pytest.mark.parametrize("name", ["moe-planner", "routing-analysis"])
def test_each_spec_s_sample_passes_its_own_validation(name):
    spec = get_kind(name).spec
    assert spec.clean(spec.sample)
    assert spec.guide


def test_the_bundled_constants_are_labelled_as_a_toy_scale_fit():
    outcome, ctx = run({"constants": "bundled"})
    assert outcome.status == "succeeded", outcome.traceback
    assert "toy-scale" in ctx.charts["el-vs-compute"]["title"]
    assert any("bundled constants: bench-el mini-study" in line for line in ctx.lines)
    # The proposal trains with ~10^17 FLOPs, far beyond the toy study's ~10^11: the job says so.
    assert ctx.metrics.scalars["orders_of_magnitude_outside_fit"] > 4
    assert any(line.startswith("WARNING: C = ") for line in ctx.lines)


def test_bundled_constants_refuse_the_other_input_convention():
    outcome, _ = run({"constants": "bundled", "input": "activation"})
    assert outcome.status == "failed" and "input=sparsity" in outcome.error
