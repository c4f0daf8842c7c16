"""Benchmark entry points: ``python -m mlcore.bench NAME --tier quick|full``.

Each benchmark module defines ``run(tier: str, results: Path) -> None`` and writes
``bench/results/NAME.md`` and ``NAME.json``. Speeds are reported as ratios against a baseline
measured in the same run, because these machines are noisy.
"""

BENCHMARKS: dict[str, str] = {
    "core": "mlcore.bench.core",
    "compress": "mlcore.bench.compress",
    "compress-seeds": "mlcore.bench.compress_seeds",
    "analysis": "mlcore.bench.analysis",
    "el": "mlcore.bench.el",
    "distill": "mlcore.bench.distill",
    "mixture": "mlcore.bench.mixture",
    "routing": "mlcore.bench.routing",
    "graph": "mlcore.bench.graph_ood",
    "watermark": "mlcore.bench.watermark",
    "watermark-latency": "mlcore.bench.watermark_latency",
    "video": "mlcore.bench.video",
    "pointcloud": "mlcore.bench.pointcloud",
}
