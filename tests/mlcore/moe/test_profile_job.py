import json

import pytest

from mlcore.jobs import InMemoryContext, ValidationError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare

TINY = {"hidden": 16, "intermediate": 24, "experts": 6, "top_k": 2, "tokens": 48, "repeats": 2, "seed": 0}


def run(raw, ctx=None):
    kind = get_kind("moe-profile")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, raw, {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"router": "sparsemax", "activation": "geglu"},
        {"router": "prototype", "shared_experts": 1, "activation": "relu"},
    ],
)
def test_it_profiles_a_tiny_layer_and_reports_through_every_channel(extra):
    outcome, ctx = run({**TINY, **extra})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert scalars["moe_layer_ms"] > 0 and scalars["loop_ms"] > 0
    assert scalars["speedup_vs_loop"] == pytest.approx(scalars["loop_ms"] / scalars["moe_layer_ms"])
    assert scalars["tokens_per_s"] == pytest.approx(48 / (scalars["moe_layer_ms"] / 1e3))
    assert scalars["fraction_of_peak"] > 0
    load = ctx.charts["expert_load"]["data"]["values"]
    assert len(load) == 6 and sum(v["slots"] for v in load) == scalars["experts_per_token"] * 48
    assert [v["implementation"] for v in ctx.charts["timing"]["data"]["values"]] == [
        "MoELayer (fused)",
        "per-expert loop",
    ]
    json.dumps(ctx.charts, allow_nan=False)
    rows = ctx.artifacts["moe_profile.csv"].path.read_text().splitlines()
    assert rows[0] == "implementation,ms_per_step,tokens_per_s,speedup_vs_loop" and len(rows) == 3
    assert ctx.progress_history[-1] == (1.0, "done")


def test_a_top_k_sigmoid_router_takes_exactly_k_slots():
    outcome, ctx = run({**TINY, "router": "topk-sigmoid", "top_k": 3})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["slots_per_token"] == ctx.metrics.scalars["experts_per_token"] == 3


def test_a_cancelled_job_stops_after_the_warm_up():
    ctx = InMemoryContext()
    ctx.cancel()
    outcome, ctx = run(TINY, ctx)
    assert outcome.status == "cancelled"
    assert "moe_layer_ms" not in ctx.metrics.scalars


def test_top_k_above_the_expert_count_is_refused():
    with pytest.raises(ValidationError, match="top_k: Must not exceed the number of experts"):
        run({**TINY, "top_k": 7})


def test_a_huge_layer_is_refused_before_it_runs():
    kind = get_kind("moe-profile")
    from mlcore.jobs import JobError
    from mlcore.jobs.runner import check_estimate

    params = kind.spec.clean({"hidden": 8192, "intermediate": 32768, "experts": 512, "seed": 0})
    with pytest.raises(JobError, match="Reduce its size"):
        check_estimate(kind, params, memory_limit=64 * 2**30)
