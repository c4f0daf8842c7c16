"""A tier's runs (trained when missing, except the GPU tiers) and ``pointcloud.md`` / ``.json``."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.common import report_excerpt, write_results, written_at
from bench.pointcloud.cache import _cached_runs
from bench.pointcloud.measure import run_config, throughput
from bench.pointcloud.report import (
    card_lines,
    claims,
    nonfinite_lines,
    paper_lines,
    summarise,
    throughput_lines,
    usage_chart_png,
    usage_lines,
)
from bench.pointcloud.tiers import GPU_TIERS, TIERS

#: What the CPU tiers keep smaller than the card's offline plan (card §4: C = 64, ~10 blocks, 8–16k-point
#: crops, 2–3k steps).
OFF_SCALE = "C = 32, 6 blocks, 2,048-point crops; the card: C = 64, ~10 blocks, 8–16k-point crops, 2–3k steps"


def _runs(tier: str) -> list[dict[str, Any]]:
    spec = TIERS[tier]
    runs = []
    for seed in range(spec.seeds):
        for config in spec.configs:
            print(f"[pointcloud] {tier} {config} seed {seed}", flush=True)
            if (done := run_config(config, seed, spec, tier)) is not None:
                runs.append(done)
    return runs


#: The studies of issue #22 whose tables this report repeats: (file, title, its sections to repeat).
REAL_SENSOR_STUDIES = (
    ("pointcloud-encodings", "Encoding invariance", ("Encoding invariance",)),
    ("pointcloud-attributes", "Attribute robustness", ("1. Robustness", "2. Robust, not blind")),
    ("pointcloud-heldout", "A held-out scene family", ("The zoo recipe, seeds", "The recipe beside other trainings")),
)


def real_sensor_lines(results: Path) -> list[str]:
    """The tables issue #22 asks for here, as their own studies last wrote them in ``results``: encoding
    invariance, attribute robustness and the held-out family (3 seeds), each two heading levels down."""
    out: list[str] = []
    for name, title, sections in REAL_SENSOR_STUDIES:
        kept = report_excerpt(results / f"{name}.md", sections, shift=2)
        if kept:
            written = written_at(results / f"{name}.json")
            # Reports written before the studies stamped them say when only in git's history.
            when = "" if written == "?" else f" (written {written})"
            out += ["", f"### {title}", "", f"From bench/results/{name}.md{when}.", "", *kept]
    if not out:
        return []
    return ["", "## Point clouds from real sensors (issue #22)", *out]


def report_from_cache(results: Path) -> None:
    """``python -m bench pointcloud --report``: ``pointcloud.md`` from the cached full and card runs, with the
    throughput rows the last full run recorded in ``pointcloud.json``; nothing trains or is timed."""
    import json

    previous = json.loads((results / "pointcloud.json").read_text())
    run("full", results, cached=True, speed=previous.get("throughput") or [], huge=previous.get("huge"))


def run(
    tier: str,
    results: Path,
    *,
    cached: bool = False,
    speed: list[dict[str, Any]] | None = None,
    huge: dict[str, Any] | None = None,
) -> None:
    spec = TIERS[tier]
    start = time.perf_counter()
    runs = _cached_runs(tier) if tier in GPU_TIERS or cached else _runs(tier)
    # The full study includes the card-scale runs (cached; ``--report`` lists the finished ones).
    card = (_cached_runs("card") if cached else _runs("card")) if tier == "full" else []
    card_md, card_table = card_lines(card) if card else ([], {})
    # ... and the runs at the card's own scale, trained on a GPU: only ever read from the cache here.
    at_scale = _cached_runs("paper") if tier == "full" else []
    paper_md, paper_table = paper_lines(at_scale) if at_scale else ([], {})
    paper = next((r for r in runs if r["config"] == "moe-proj" and r["seed"] == 0), None)
    chart = []
    png = results / "pointcloud-usage.png"
    if paper is not None and ((cached and png.is_file()) or usage_chart_png(paper, png)):
        chart = ["![Expert usage by dataset, moe-proj seed 0](pointcloud-usage.png)", ""]
    if speed is None:
        speed = [s for n in spec.throughput if (s := throughput(n)) is not None]
        huge = throughput(spec.huge, chunk=150_000, compare=False) if spec.huge else None
    lines, table = summarise(runs, spec.configs)
    md = [
        "# Point-MoE on SynMix",
        "",
        f"Tier **{tier}**: {spec.seeds} seed(s); each model trained {spec.steps} steps of {spec.batch_size} crops × "
        f"{spec.points} points on SynMix A–D ({spec.scenes} training scans per dataset), evaluated on "
        f"{spec.eval_scenes} validation scan(s) per dataset. mIoU over each dataset's own classes, "
        "predictions carried back to every input point. E and F are never trained on.",
        "",
        *lines,
        "",
        "Configurations: `dense-active` = W_o as one gated MLP of width 2C (= active compute of top-2 of 4 experts of "
        "width C); `dense-params` = width 4C (= total parameters of 4 experts); `moe-proj` = Point-MoE on W_o "
        "(4 experts, top-2, α = 0); `moe-ffn` = Point-MoE on the FFN; `-single` = single-dataset batches instead of "
        "mixed ones; `moe-proj-a1e-3` / `-a1e-2` = balance weight α = 10⁻³ (the released config) / 10⁻²; "
        "`ppt-active` = the PPT-like oracle: `dense-active` with per-dataset block-norm parameters chosen by the "
        "dataset id (E and F, never seen, use C's and A's: the first seen dataset of their scene kind); `-bn` = "
        "BatchNorm instead of LayerNorm in the blocks (the card's norm choice; trained before the switch, see the "
        "non-finite section). Every model has LayerNorm blocks unless it says `-bn`.",
        "",
        "## Expert usage by dataset",
        "",
        "Share of points whose top-1 expert is expert 0 / 1 / 2 / 3, first and last MoE layer. The router never "
        "sees the dataset: different rows for indoor (A, B, F) and outdoor (C, D, E) mean experts split by sensor.",
        "",
        *usage_lines([r for r in runs if r["seed"] == 0]),
        "",
        *chart,
        *card_md,
        *paper_md,
        *throughput_lines(speed + ([huge] if huge else [])),
        *nonfinite_lines(runs),
    ]
    from bench import verdicts as rule

    found = claims(runs, tier, OFF_SCALE)
    if card:
        found += claims(card, "card", OFF_SCALE)
    if at_scale:
        found += claims(at_scale, "paper", None)
    md += ["", *rule.section("Verdicts (computed from paired intervals)", found)]
    md += real_sensor_lines(results)
    data = {
        "tier": asdict(spec),
        "runs": runs,
        "table": table,
        "card": {"tier": asdict(TIERS["card"]), "runs": card, "table": card_table},
        "paper": {"tier": asdict(TIERS["paper"]), "runs": at_scale, "table": paper_table},
        "throughput": speed,
        "huge": huge,
        "seconds": round(time.perf_counter() - start, 1),
        "verdicts": rule.as_json(found),
    }
    write_results(results, "pointcloud", "\n".join(md), data)
