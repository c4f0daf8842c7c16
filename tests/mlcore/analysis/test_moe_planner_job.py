import json
import math

import pytest

from mlcore.analysis.routing import synthetic
from mlcore.analysis.runs import write_runs
from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.jobs.spec import ValidationError
from tests.mlcore.analysis.synthetic_el import TRUE, synthetic_runs
from tests.mlcore.analysis.trace_files import write_trace

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
    scalars = ctx.metrics.scalars
    # Predictions for budgets and for (A, G) configurations left out of the fit: the law beats EL = 1/A.
    for by in ("budget", "configuration"):
        assert scalars[f"holdout-{by}/full/rmse_log_el"] < 0.05 < scalars[f"holdout-{by}/naive/rmse_log_el"]
    holdout = json.loads(ctx.artifacts["fit.json"].path.read_text())["holdout"]
    assert {s["variant"]: s["held_out_groups"] for s in holdout["configuration"]}["full"] == 25  # 5 A × 5 G
    # A = 4/32 and G = 2·256/128 = 4; EL follows the fitted law, and the saving from it.
    assert scalars["activation_ratio"] == 0.125 and scalars["granularity"] == 4
    assert scalars["efficiency_leverage"] > 1
    assert scalars["compute_saving"] == pytest.approx(1 - 1 / scalars["efficiency_leverage"])
    assert scalars["total_params"] > scalars["active_params"]
    # The loss-matched dense model: compute-optimal (D = 20·N, C = 6·N·D) for EL × the MoE's compute.
    dense_flops = scalars["efficiency_leverage"] * scalars["training_flops"]
    assert scalars["dense_equivalent_flops"] == pytest.approx(dense_flops)
    assert scalars["dense_equivalent_params"] == pytest.approx((dense_flops / 120) ** 0.5)
    assert {"fit", "el-vs-activation", "el-vs-granularity", "el-vs-compute"} <= set(ctx.charts)
    plan = json.loads(ctx.artifacts["plan.json"].path.read_text())
    assert plan["constants"]["source"] == "fitted on runs.csv"
    assert scalars["orders_of_magnitude_outside_fit"] == 0  # 1.6e16 FLOPs lies inside the runs' 1e15–1e18


def test_user_constants_give_the_law_s_value():
    from mlcore.analysis.el import ELConstants, leverage

    outcome, ctx = run({"constants": "user", "a": 0.5, "d": 0.01, "beta": 0.2, "gamma": -0.05})
    assert outcome.status == "succeeded", outcome.traceback
    constants = ELConstants(0.5, 0.01, 0.2, -0.05)
    scalars = ctx.metrics.scalars
    assert scalars["efficiency_leverage"] == pytest.approx(leverage(0.125, 4, scalars["training_flops"], constants)[0])
    # The law's best granularity, G* = exp(−β / 2γ) = e², and the expert width that reaches it at d_model = 256.
    assert scalars["best_granularity"] == pytest.approx(math.exp(2))
    assert scalars["best_granularity_d_expert"] == pytest.approx(512 / math.exp(2))
    assert scalars["efficiency_leverage_at_best_granularity"] > scalars["efficiency_leverage"]


def test_offload_traffic_shrinks_with_the_cache_hit_rate():
    _, cold = run({"constants": "user", "a": 0.5, "cache_hit_rate": 0.0})
    _, warm = run({"constants": "user", "a": 0.5, "cache_hit_rate": 0.75})
    cold_bytes = cold.metrics.scalars["offload_bytes_per_token"]
    assert warm.metrics.scalars["offload_bytes_per_token"] == pytest.approx(cold_bytes / 4)
    assert cold_bytes == 4 * 4 * 3 * 256 * 128 * 2  # layers × k × one SwiGLU expert in bf16


def _routing_report(tmp_path):
    """A real routing-analysis report.json, from a locally consistent trace uploaded to that kind."""
    routings = [
        synthetic("sticky", tokens=1600, num_experts=32, top_k=4, sequence_length=200, seed=layer, stay=0.85)
        for layer in range(2)
    ]
    trace = write_trace(tmp_path / "trace.safetensors", routings)
    kind, ctx = get_kind("routing-analysis"), InMemoryContext()
    raw = {"windows": "4,16,64", "multiples": "1,2,4", "resamples": 0, "seed": 0}
    params, inputs = prepare(kind, raw, {"trace": [trace]}, resolver=LocalResolver(), workdir=ctx.workdir)
    assert execute(kind, params, inputs, ctx).status == "succeeded"
    return ctx.artifacts["report.json"].path


def test_offloading_traffic_uses_the_lru_and_sch_hit_rates_of_a_routing_report(tmp_path):
    path = _routing_report(tmp_path)
    measured = {
        (h["policy"], h["window"], h["multiple"]): h["rate"] for h in json.loads(path.read_text())["hit_rates"]["model"]
    }
    outcome, ctx = run({"constants": "user", "a": 0.5, "cache_multiple": 3}, {"routing_report": [path]})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    # m = 3 lies halfway between the measured m = 2 and m = 4; SCH is read at the middle look-ahead, L = 16.
    lru = (measured[("lru", 0, 2)] + measured[("lru", 0, 4)]) / 2
    sch = (measured[("sch", 16, 2)] + measured[("sch", 16, 4)]) / 2
    assert scalars["offload_hit_rate"] == pytest.approx(lru)
    expert = 3 * 256 * 128 * 2  # one SwiGLU expert in bf16
    assert scalars["offload_bytes_per_token"] == pytest.approx(4 * 4 * (1 - lru) * expert)
    assert scalars["offload_bytes_per_token_sch"] == pytest.approx(4 * 4 * (1 - sch) * expert)
    assert scalars["offload_bytes_per_token_sch"] < scalars["offload_bytes_per_token"]
    assert scalars["cached_experts_per_layer"] == 12
    assert scalars["offload_device_bytes"] < scalars["weights_bytes_per_device"]
    curves = {row["policy"] for row in ctx.charts["offload-traffic"]["data"]["values"]}
    assert curves == {"LRU", "LFU", "BELADY", "SCH"}


def test_decode_speed_counts_weight_reads_and_expert_transfers():
    outcome, ctx = run(
        {"constants": "user", "a": 0.5, "cache_hit_rate": 0.5, "link_gb_per_s": 10, "memory_gb_per_s": 500}
    )
    assert outcome.status == "succeeded", outcome.traceback
    s = ctx.metrics.scalars
    read = s["active_bytes_per_token"] / 500e9
    assert s["decode_tokens_per_s_resident"] == pytest.approx(1 / read)
    assert s["offload_transfer_s_per_token"] == pytest.approx(s["offload_bytes_per_token"] / 10e9)
    assert s["decode_tokens_per_s_offloaded"] == pytest.approx(1 / (read + s["offload_transfer_s_per_token"]))
    assert s["flops_per_token"] == 2 * s["active_params"]


@pytest.mark.parametrize(
    ("content", "multiple", "message"),
    [
        ('{"scalars": {}}', 2, "not a routing-analysis report.json"),
        (None, 8, "measured cache capacities m = 1, 2, 4; pick a cache multiple within that range"),
    ],
)
def test_an_unusable_routing_report_is_refused(tmp_path, content, multiple, message):
    path = _routing_report(tmp_path)
    if content is not None:
        path = tmp_path / "other.json"
        path.write_text(content)
    outcome, ctx = run({"constants": "user", "a": 0.5, "cache_multiple": multiple}, {"routing_report": [path]})
    assert outcome.status == "failed"
    assert outcome.error.startswith("Routing report: ") and message in outcome.error
    assert not ctx.artifacts


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


def test_fitting_without_a_runs_table_is_refused_before_the_job_runs():
    with pytest.raises(ValidationError) as refused:
        run({"constants": "fit-runs"})
    assert refused.value.errors == [("runs", "constants=fit-runs fits the law to your runs: upload the runs table.")]


def test_an_uploaded_runs_table_is_fitted_with_the_default_constants(tmp_path):
    path = tmp_path / "my-runs.csv"
    write_runs(synthetic_runs(noise=0.01), path)
    outcome, with_runs = run({"resamples": 20}, {"runs": [path]})
    assert outcome.status == "succeeded", outcome.traceback
    assert with_runs.metrics.scalars["fit/gamma"] == pytest.approx(TRUE.gamma, abs=0.01)
    assert json.loads(with_runs.artifacts["plan.json"].path.read_text())["constants"]["source"] == (
        "fitted on my-runs.csv"
    )
    _, without = run({})
    assert any("bundled constants" in line for line in without.lines)
    leverage = with_runs.metrics.scalars["efficiency_leverage"]
    assert leverage != pytest.approx(without.metrics.scalars["efficiency_leverage"])


@pytest.mark.parametrize("constants", ["bundled", "user"])
def test_a_runs_table_that_the_chosen_constants_would_not_read_is_refused(tmp_path, constants):
    path = tmp_path / "runs.csv"
    write_runs(synthetic_runs(), path)
    with pytest.raises(ValidationError) as refused:
        run({"constants": constants, "a": 0.5 if constants == "user" else 0}, {"runs": [path]})
    [(field, message)] = refused.value.errors
    assert field == "constants" and f"constants={constants} would not read it" in message


def test_law_constants_typed_for_another_source_are_refused():
    with pytest.raises(ValidationError) as refused:
        run({"constants": "bundled", "gamma": -0.1})
    message = "Used only with constants=user (now bundled); pick user or leave it at 0."
    assert refused.value.errors == [("gamma", message)]


def test_a_typed_hit_rate_beside_a_routing_report_is_refused(tmp_path):
    path = _routing_report(tmp_path)
    with pytest.raises(ValidationError, match="cache_hit_rate: The routing report's measured hit rates replace"):
        run({"constants": "user", "a": 0.5, "cache_hit_rate": 0.9}, {"routing_report": [path]})


def test_a_routing_report_from_another_model_shape_is_used_with_a_warning(tmp_path):
    path = _routing_report(tmp_path)  # 32 experts, top-4
    outcome, same = run({"constants": "user", "a": 0.5}, {"routing_report": [path]})
    assert outcome.status == "succeeded" and same.metrics.scalars["routing_report_shape_mismatch"] == 0
    outcome, other = run({"constants": "user", "a": 0.5, "experts": 64, "top_k": 2}, {"routing_report": [path]})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = other.metrics.scalars
    assert scalars["routing_report_shape_mismatch"] == 1
    assert (scalars["routing_report_experts"], scalars["routing_report_top_k"]) == (32, 4)
    assert any(line.startswith("WARNING: report.json measured a model with 32 experts, top-4") for line in other.lines)
    summary = get_kind("moe-planner").spec.summary_line(scalars)
    assert "Warning: the routing report is from a model with 32 experts, top-4, not the planned shape" in summary


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
