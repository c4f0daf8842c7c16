"""Benchmark entry points: ``python -m bench NAME --tier quick|full``.

Each benchmark module defines ``run(tier: str, results: Path) -> None`` and writes
``bench/results/NAME.md`` and ``NAME.json``. Speeds are reported as ratios against a baseline
measured in the same run, because these machines are noisy.
"""

BENCHMARKS: dict[str, str] = {
    "core": "bench.core",
    "compress": "bench.compress",
    "compress-seeds": "bench.compress_seeds",
    "compress-reference": "bench.compress_reference",
    "analysis": "bench.analysis",
    "el": "bench.el",
    "distill": "bench.distill",
    "mixture": "bench.mixture",
    "routing": "bench.routing",
    "ld-mole": "bench.ld_mole",
    "graph": "bench.graph_ood",
    "watermark": "bench.watermark",
    "watermark-latency": "bench.watermark_latency",
    "watermark-embed": "bench.watermark_embed",
    "watermark-offset": "bench.watermark_offset",
    "watermark-forgery": "bench.watermark_forgery",
    "watermark-fold": "bench.watermark_fold",
    "video": "bench.video",
    "pointcloud": "bench.pointcloud",
    "pointcloud-encodings": "bench.pointcloud_encodings",
    "pointcloud-heldout": "bench.heldout_scenes.evaluate",
    "pointcloud-attributes": "bench.pointcloud_attributes",
    "pointcloud-density": "bench.pointcloud_density",
}
#: Benchmarks of the web platform: they need Django set up (``python -m bench`` does it before
#: importing them) and a migrated database of their own, PostgreSQL and Redis, which
#: ``scripts/bench.sh`` provides; so ``make bench`` runs them only by name (``make bench-platform``).
DJANGO_BENCHMARKS: dict[str, str] = {"platform": "bench.platform"}
#: Studies too large for ``make bench``'s 30 minutes, run only by name (``make bench-scale FULL=1``).
ON_DEMAND: dict[str, str] = {"scale": "bench.scale"}
