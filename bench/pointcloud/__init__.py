"""``make bench-pointcloud``: Point-MoE against dense PTv3-lite on the SynMix multi-sensor benchmark
(Point-MoE, arXiv 2505.23926 v2, scaled down to CPU minutes).

Every configuration trains one PTv3-lite (channels 32-64-96, patch attention, grid pooling) jointly on
the seen datasets A–D (rooms through a depth camera and a panorama, streets through 64- and 32-beam
LiDARs, conflicting taxonomies) and is evaluated on held-out scans of A–D and of the zero-shot
datasets E (128-beam LiDAR, taller mount) and F (larger rooms, noisier camera):

- ``dense-active``: W_o → one gated MLP of width 2C — the same active compute as top-2 of 4 experts;
- ``dense-params``: W_o → one gated MLP of width 4C — the same total parameters as 4 experts;
- ``moe-proj``: Point-MoE, W_o → 4 gated-ReLU experts of width C, top-2, α = 0 (the paper's placement);
- ``moe-ffn``: Point-MoE on the FFN instead (W_o as in ``dense-active``), equal active compute;
- ``moe-proj-single`` / ``dense-active-single``: the same, trained with single-dataset batches;
- ``moe-proj-a1e-3`` / ``moe-proj-a1e-2``: Point-MoE with balance weight α = 10⁻³ (the released config)
  and 10⁻² (the card's α ablation);
- ``ppt-active``: the PPT-like oracle — ``dense-active`` whose block norms take per-dataset affine
  parameters chosen by dataset id (zero-shot E and F borrow C's and A's: same scene kind);
- ``moe-proj-bn`` / ``dense-active-bn``: BatchNorm instead of LayerNorm in the blocks (the card's
  norm ablation), whose running statistics overflow on outdoor scans.

Reported: per-dataset and zero-shot mIoU (mean ± std over seeds), expert usage by dataset (share of
points per top-1 expert, first and last MoE layer), inference points/s and peak memory (RSS of a fresh
process) at 100k and 1M points, and — full tier — a 10M-point scan finishing through chunking. Each
finished (configuration, seed) is a row of ``bench/cache/pointcloud.jsonl`` so an interrupted
full run resumes.

Tier ``paper`` is the card's own scale (C = 64, 10 blocks, ≤ 16k-point crops, 2,000 steps): about
3 hours a run on two CPU cores, so it runs on a GPU, several runs at once, within a wall-clock budget
that saves each unfinished run's state for the next call::

    python -m bench.pointcloud --tier paper --device cuda --jobs 9 --wall-minutes 8

It is never trained by ``make bench-pointcloud``; ``--report`` lists the runs that are cached.

Modules: ``tiers`` (configurations and tiers), ``cache`` (the compact cache and the state folder),
``measure`` (training, evaluation, throughput), ``report`` (``pointcloud.md``'s tables and prose),
``study`` (a tier's runs and :func:`run`), ``cli`` (``python -m bench.pointcloud``).
"""

from bench.pointcloud.cache import CACHE, _cached_runs, folder, store
from bench.pointcloud.cli import UNFINISHED, main, run_parallel
from bench.pointcloud.measure import load_scan, pregenerate_scans, run_config, throughput
from bench.pointcloud.report import (
    card_lines,
    nonfinite_lines,
    paper_lines,
    summarise,
    throughput_lines,
    usage_chart_png,
    usage_lines,
)
from bench.pointcloud.study import report_from_cache, run
from bench.pointcloud.tiers import CONFIGS, GPU_TIERS, MODELS, SEEN, TIERS, ZERO_SHOT, Tier

__all__ = [
    "CACHE",
    "CONFIGS",
    "GPU_TIERS",
    "MODELS",
    "SEEN",
    "TIERS",
    "UNFINISHED",
    "ZERO_SHOT",
    "Tier",
    "_cached_runs",
    "card_lines",
    "folder",
    "load_scan",
    "main",
    "nonfinite_lines",
    "paper_lines",
    "pregenerate_scans",
    "report_from_cache",
    "run",
    "run_config",
    "run_parallel",
    "store",
    "summarise",
    "throughput",
    "throughput_lines",
    "usage_chart_png",
    "usage_lines",
]
