import json

import numpy as np
import pytest
import torch

from mlcore.analysis.routing import LayerRouting, synthetic
from mlcore.hf import HFModelError
from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.moe.traces import RoutingTrace
from tests.mlcore.analysis.trace_files import write_trace

FAST = {"samples": 6, "seq_len": 64, "windows": "4,16", "multiples": "1,2,4", "resamples": 50, "seed": 0}


def run(raw, files=None, ctx=None):
    kind = get_kind("routing-analysis")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def _constant_trace(path, layers: int = 2):
    """Every token picks experts 1 and 3; three sequences of 40 tokens."""
    ids = np.array([[1, 3]] * 120, dtype=np.int32)
    return write_trace(path, [LayerRouting(ids, np.array([40, 40, 40]), 8) for _ in range(layers)], "constant")


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
    # Per-layer heatmaps: one cell per layer and segment length (SRP) or capacity (SCH), values as in the report.
    cells = {(row["layer"], row["L"]): row["SRP"] for row in ctx.charts["srp-per-layer"]["data"]["values"]}
    assert set(cells) == {(str(layer), w) for layer in report["layers"] for w in (4, 16)}
    layer = report["layers"][1]
    assert cells[(str(layer), 16)] == next(r["srp"] for r in report["srp"][f"layer {layer}"] if r["window"] == 16)
    sch = {(row["layer"], row["m"]) for row in ctx.charts["sch-per-layer"]["data"]["values"]}
    assert sch == {(str(layer), m) for layer in report["layers"] for m in (1, 2, 4)}
    # The method card's model level, one cache of m × (4 layers × top-2) experts, is reported beside it.
    one_cache = [h for h in report["hit_rates"]["model (one cache)"] if h["policy"] == "lru"]
    assert [h["capacity"] for h in one_cache] == [8, 16, 32]
    assert any(line.startswith("one cache of ") for line in ctx.lines)
    assert "\nmodel (one cache),belady,0,2,16," in ctx.artifacts["hit_rates.csv"].path.read_text()
    assert "Cache" in report["recommendation"]["sentence"]
    # The recorded trace is offered back as a file that reloads, and to the team library.
    assert RoutingTrace.load(ctx.artifacts["routing_trace.safetensors"].path).num_tokens == 6 * 64
    (registered,) = ctx.registrations
    assert registered.kind == "routing-trace" and RoutingTrace.load(registered.path).num_tokens == 6 * 64
    assert registered.card["tokens"] == 6 * 64


def test_a_library_trace_folder_is_analysed_and_not_registered_again(tmp_path):
    item = tmp_path / "library-item"
    item.mkdir()
    _constant_trace(item / "routing_trace.safetensors")
    outcome, ctx = run({"trace_item": str(item)})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["srp_L16"] == pytest.approx(1.0)
    assert ctx.registrations == []


def test_a_library_item_without_a_trace_is_refused_by_name(tmp_path):
    outcome, _ = run({"trace_item": str(tmp_path)})
    assert outcome.status == "failed" and "holds no routing trace" in outcome.error


def test_an_uploaded_constant_trace_has_srp_one_and_only_compulsory_misses(tmp_path):
    path = _constant_trace(tmp_path / "trace.safetensors")
    outcome, ctx = run({"expert_megabytes": 1.0}, {"trace": [path]})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["srp_L16"] == pytest.approx(1.0)
    # Two compulsory misses per sequence and layer out of 80 accesses.
    assert ctx.metrics.scalars["lru_m1"] == pytest.approx(78 / 80)
    assert ctx.metrics.scalars["recommended_multiple"] == 1


def test_an_uploaded_trace_of_long_sequences_gets_every_default_segment_length_and_capacity(tmp_path):
    routings = [
        synthetic("sticky", tokens=1200, num_experts=16, top_k=2, sequence_length=300, seed=layer, stay=0.9)
        for layer in range(2)
    ]
    path = write_trace(tmp_path / "trace.safetensors", routings)
    outcome, ctx = run({"windows": "4,16,64,256", "multiples": "1,1.5,2,3,4"}, {"trace": [path]})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    srp = [scalars[f"srp_L{w}"] for w in (4, 16, 64, 256)]
    assert srp == sorted(srp, reverse=True) and 0 < srp[-1] < 1
    for m in ("1", "1.5", "2", "3", "4"):
        assert scalars[f"sch_L256_m{m}"] <= scalars[f"belady_m{m}"] + 1e-12
        assert scalars[f"lru_m{m}"] <= scalars[f"belady_m{m}"] + 1e-12
    # Without expert sizes the recommendation still names the cache size and says the bytes are unknown.
    assert "transfer_bytes_per_token" not in scalars
    report = json.loads(ctx.artifacts["report.json"].path.read_text())
    assert "transfer bytes unknown" in report["recommendation"]["sentence"]


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


def test_the_method_card_s_default_of_2048_sequences_of_512_tokens_is_the_largest_accepted():
    from mlcore.jobs.spec import ValidationError

    spec = get_kind("routing-analysis").spec
    assert spec.clean({"samples": 2048, "seq_len": 512})["samples"] == 2048
    with pytest.raises(ValidationError, match="may not exceed 1,048,576 tokens"):
        spec.clean({"samples": 2049, "seq_len": 512})


def test_recording_layer_by_layer_gives_the_same_trace_and_report_as_recording_whole():
    traces = {}
    for load in ("whole", "layer-by-layer"):
        outcome, ctx = run({"model": "zoo:moe-lm-tiny", "dataset": "zoo:stdlib-docs", "load": load})
        assert outcome.status == "succeeded", outcome.traceback
        assert any(line.startswith(f"loading {load}:") for line in ctx.lines)
        traces[load] = (RoutingTrace.load(ctx.artifacts["routing_trace.safetensors"].path), ctx.metrics.scalars)
    (whole, whole_scalars), (streamed, streamed_scalars) = traces["whole"], traces["layer-by-layer"]
    assert torch.equal(whole.sequence_lengths, streamed.sequence_lengths)
    assert all(torch.equal(a, b) for a, b in zip(whole.expert_ids, streamed.expert_ids, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(whole.gate_weights, streamed.gate_weights, strict=True))
    assert streamed_scalars["srp_L4"] == whole_scalars["srp_L4"]
    assert streamed_scalars["transfer_bytes_per_token"] == whole_scalars["transfer_bytes_per_token"]


def test_a_model_too_large_for_the_worker_is_refused_with_what_each_mode_needs():
    from mlcore.hf.memory import plan_load

    folder = zoo_model("moe-lm-tiny")
    between = needs_between(folder)
    with pytest.raises(HFModelError, match=r"whole and this worker has .*; layer by layer it needs"):
        plan_load(folder, "whole", device="cpu", tokens=64, batch_tokens=64, available=between)
    mode, needs = plan_load(folder, "auto", device="cpu", tokens=64, batch_tokens=64, available=between)
    assert mode == "layer-by-layer" and needs.layer_by_layer < needs.whole
    with pytest.raises(HFModelError, match="Even layer by layer"):
        plan_load(folder, "layer-by-layer", device="cpu", tokens=64, batch_tokens=64, available=1 << 10)


def zoo_model(name):
    from mlcore.catalog import materialize
    from mlcore.jobs.references import builtin_items

    return materialize(builtin_items()[name])


def needs_between(folder):
    """Free memory that holds the model layer by layer but not whole."""
    from mlcore.hf.memory import USABLE_SHARE, plan_load

    _, needs = plan_load(folder, "auto", device="cpu", tokens=64, batch_tokens=64, available=1 << 40)
    return int((needs.layer_by_layer + needs.whole) / 2 / USABLE_SHARE)


def test_a_job_that_holds_two_copies_of_the_weights_needs_them_twice_whole():
    from mlcore.hf.memory import memory_needs, plan_load

    folder = zoo_model("moe-lm-tiny")
    # float16 on disk, computed in float32: 4 bytes an element.
    weights = memory_needs(folder, load_bytes=4, activations=0, working=0).weights
    _, one = plan_load(folder, "auto", device="cpu", tokens=64, batch_tokens=64, available=1 << 40)
    _, two = plan_load(folder, "auto", device="cpu", tokens=64, batch_tokens=64, available=1 << 40, whole_copies=2)
    assert two.whole - one.whole == weights and two.layer_by_layer == one.layer_by_layer


class _DiesAfterTwoLayers(InMemoryContext):
    """A worker killed once the layer-by-layer recording has finished its second decoder layer."""

    def _on_progress(self) -> None:
        super()._on_progress()
        if self.stage.endswith("decoder layer 2 of 4"):
            raise SystemExit("killed")


def test_a_re_run_after_a_killed_recording_continues_from_its_last_finished_layer(tmp_path):
    kind = get_kind("routing-analysis")
    raw = {**FAST, "model": "zoo:moe-lm-tiny", "dataset": "zoo:stdlib-docs", "load": "layer-by-layer"}

    def attempt(ctx, resume_dir):
        ctx.resume_dir = resume_dir
        params, inputs = prepare(kind, raw, {}, resolver=LocalResolver(), workdir=ctx.workdir)
        return execute(kind, params, inputs, ctx, passthrough=(SystemExit,))

    with pytest.raises(SystemExit):
        attempt(_DiesAfterTwoLayers(), tmp_path / "resume")
    resumed, fresh = InMemoryContext(), InMemoryContext()
    assert attempt(resumed, tmp_path / "resume").status == "succeeded"
    assert attempt(fresh, None).status == "succeeded"
    assert "recording continues from decoder layer 3 of 4: an earlier attempt finished the rest" in resumed.lines
    traces = [RoutingTrace.load(c.artifacts["routing_trace.safetensors"].path) for c in (resumed, fresh)]
    assert all(torch.equal(a, b) for a, b in zip(traces[0].expert_ids, traces[1].expert_ids, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(traces[0].gate_weights, traces[1].gate_weights, strict=True))
    assert resumed.metrics.scalars["srp_L4"] == fresh.metrics.scalars["srp_L4"]
