"""``make bench-watermark`` end to end on a tiny random bundle (the real run uses the zoo's molm-tiny)."""

import json
import sys

from bench import watermark as bench
from mlcore.watermark.pipeline import load_bundle
from tests.mlcore.watermark.tiny import write_bundle


def test_the_benchmark_writes_targets_the_lambda_curve_attacks_and_calibration(tmp_path, monkeypatch):
    folder = write_bundle(tmp_path / "bundle")
    tiny = bench.Tier(
        seeds=(0, 1), clean=200, watermarked=8, keys=2, averaging=(5,), query_images=2, query_budget=20,
        baseline_clean=50, lambdas=(0.0, 4.0), lambda_steps=2, lambda_images=8, attacks=("jpeg-50", "crop-0.7"),
    )  # fmt: skip
    monkeypatch.setitem(bench.TIERS, "quick", tiny)
    # The latency section (W2's) starts a portal and a worker; it has its own tests.
    monkeypatch.setitem(sys.modules, "bench.watermark_latency", None)
    monkeypatch.setattr(bench, "_bundle", lambda: load_bundle(folder))
    bench.run("quick", tmp_path / "results")
    markdown = (tmp_path / "results" / "watermark.md").read_text()
    for heading in (
        "## Targets",
        "## λ trade-off",
        "## False-positive calibration",
        "## Attacks",
        "## Verification latency",
    ):
        assert heading in markdown
    data = json.loads((tmp_path / "results" / "watermark.json").read_text())
    assert [p["lam"] for p in data["lambda_curve"]] == [0.0, 4.0]
    methods = {(r["method"], r["attack"]) for r in data["pooled"]}
    assert {("MOLM", "jpeg-50"), ("DWT-DCT", "jpeg-50"), ("MOLM", "forge-5"), ("MOLM", "query-nes")} <= methods
    assert all(r["seeds"] == 2 for r in data["pooled"] if r["attack"] == "jpeg-50")
    assert len(data["suites"]) == 2
