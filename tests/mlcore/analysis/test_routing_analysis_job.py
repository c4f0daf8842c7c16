import json

import pytest
import torch

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.moe.traces import RoutingTrace, TraceMetadata

FAST = {"samples": 6, "seq_len": 64, "windows": "4,16", "multiples": "1,2,4", "resamples": 50, "seed": 0}


def run(raw, files=None, ctx=None):
    kind = get_kind("routing-analysis")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def _constant_trace(path, layers: int = 2):
    ids = torch.tensor([[1, 3]] * 120, dtype=torch.int32)
    trace = RoutingTrace(
        TraceMetadata(
            model="constant",
            layers=tuple(range(layers)),
            num_experts=(8,) * layers,
            top_k=(2,) * layers,
            shared_experts=(0,) * layers,
        ),
        expert_ids=[ids.clone() for _ in range(layers)],
        gate_weights=[torch.full((120, 2), 0.5) for _ in range(layers)],
        sequence_lengths=torch.tensor([40, 40, 40]),
    )
    trace.save(path)
    return path


def test_it_records_and_analyses_the_zoo_model_end_to_end():
    outcome, ctx = run({"model": "zoo:moe-lm-tiny", "dataset": "zoo:stdlib-docs"})
    assert outcome.status == "succeeded", outcome.traceback
    assert {"srp", "hit-rates", "srp-per-layer", "sch-per-layer", "consistency-vs-balance"} <= set(ctx.charts)
    report = json.loads(ctx.artifacts["report.json"].path.read_text())
    assert report["tokens"] == 6 * 64 and len(report["layers"]) == 4
    scalars = ctx.metrics.scalars
    assert 0 < scalars["srp_L4"] < 1
    for m in ("1", "2", "4"):
        assert scalars[f"lru_m{m}"] <= scalars[f"belady_m{m}"] + 1e-12
        assert scalars[f"sch_L16_m{m}"] <= scalars[f"belady_m{m}"] + 1e-12
    assert scalars["transfer_bytes_per_token"] > 0
    assert "Cache" in report["recommendation"]["sentence"]
    # The recorded trace is offered back as a file that reloads.
    assert RoutingTrace.load(ctx.artifacts["routing_trace.safetensors"].path).num_tokens == 6 * 64


def test_an_uploaded_constant_trace_has_srp_one_and_only_compulsory_misses(tmp_path):
    path = _constant_trace(tmp_path / "trace.safetensors")
    outcome, ctx = run({"expert_megabytes": 1.0}, {"trace": [path]})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["srp_L16"] == pytest.approx(1.0)
    # Two compulsory misses per sequence and layer out of 80 accesses.
    assert ctx.metrics.scalars["lru_m1"] == pytest.approx(78 / 80)
    assert ctx.metrics.scalars["recommended_multiple"] == 1


def test_a_damaged_trace_is_refused_with_a_clear_message(tmp_path):
    path = _constant_trace(tmp_path / "trace.safetensors")
    data = bytearray(path.read_bytes())
    header = data.index(b"moelab-routing-trace")
    data[header : header + 6] = b"xxxxxx"
    path.write_bytes(bytes(data))
    outcome, ctx = run({}, {"trace": [path]})
    assert outcome.status == "failed"
    assert "not a valid routing trace" in outcome.error and "format" in outcome.error
    assert not ctx.artifacts


def test_windows_longer_than_every_sequence_are_refused(tmp_path):
    path = _constant_trace(tmp_path / "trace.safetensors")
    outcome, _ = run({"windows": "64,256"}, {"trace": [path]})
    assert outcome.status == "failed" and "longest sequence (40 tokens)" in outcome.error


def test_a_job_without_model_or_trace_is_refused():
    outcome, _ = run({})
    assert outcome.status == "failed" and "upload a routing trace" in outcome.error


def test_a_cancelled_job_stops():
    ctx = InMemoryContext()
    ctx.cancel()
    outcome, _ = run({"model": "zoo:moe-lm-tiny"}, ctx=ctx)
    assert outcome.status == "cancelled"


def test_capacities_below_the_active_experts_fail_validation():
    from mlcore.jobs.spec import ValidationError

    with pytest.raises(ValidationError, match="multiples"):
        get_kind("routing-analysis").spec.clean({"multiples": "0.5,1"})
