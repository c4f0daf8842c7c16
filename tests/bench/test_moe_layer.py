"""bench/moe_layer.py: the MoE-layer and trace-recording tables of `make bench-core`, at a tiny config."""

import pytest

from bench import moe_layer as bench


def test_the_table_compares_every_contender_at_a_tiny_config(monkeypatch):
    monkeypatch.setattr(bench, "CONFIG", {"tokens": 64, "hidden": 16, "intermediate": 24, "top_k": 2})
    monkeypatch.setattr(bench, "EXPERTS", (4,))
    monkeypatch.setattr(bench, "TIERS", {"quick": {"rounds": 1, "slow_rounds": 1}})
    markdown, data = bench.moe_layer_table("quick")
    (row,) = data["rows"]
    hf = {f"hf_{n}" for n in bench.hf_implementations()}
    assert set(row["ms"]) == {"moe_layer", "loop", "loop_fused", bench.FLOOR, *hf}
    faster_loop = min(row["ms"]["loop"], row["ms"]["loop_fused"])
    assert row["ceiling_gemms_vs_loop"] == pytest.approx(faster_loop / row["ms"][bench.FLOOR])
    for low, high in row["speedup_range"].values():
        assert 0 < low <= high
    assert row["speedup_vs_loop"] == pytest.approx(faster_loop / row["ms"]["moe_layer"])
    assert row["ceiling_vs_loop"] == pytest.approx(
        faster_loop * 1e-3 * max(data["peak_flops_before"], data["peak_flops_after"]) / row["flops_per_step"]
    )
    assert row["speedup_vs_best_hf"] == pytest.approx(row["ms"][row["best_hf"]] / row["ms"]["moe_layer"])
    assert row["fraction_of_peak"] > 0
    assert "| 4 |" in markdown and "no slower than transformers' best" in markdown


def test_the_trace_overhead_table_times_a_forward_with_and_without_recording(monkeypatch):
    monkeypatch.setattr(bench, "CONFIG", {"tokens": 64, "hidden": 16, "intermediate": 24, "top_k": 2})
    monkeypatch.setattr(bench, "EXPERTS", (4,))
    monkeypatch.setattr(bench, "TIERS", {"quick": {"rounds": 1, "slow_rounds": 1}})
    markdown, data = bench.trace_overhead_table("quick")
    assert set(data["ms"]) == {"plain", "recorded"}
    assert data["overhead"] == pytest.approx(data["ms"]["recorded"] / data["ms"]["plain"] - 1)
    assert "| plain | recorded | overhead |" in markdown
