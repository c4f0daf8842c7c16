"""``python -m bench watermark-forgery``: the averaging forgery against the shipped photo markers when
the forger lines the marks up first.

Issue #23. ``watermark-embed``'s default markers (``zoo:molm-photo``) lay each photo's mark at a secret
phase of the tile grid, so the mean of N marks at independent phases keeps little of their
tile-periodic part, and the embed study's averaging forger (bench/results/watermark-embed.md, "Forgery
by averaging") succeeds rarely. But the extractor is public (committed to this repository, and the
portal reads with it), and its phase search (:func:`mlcore.watermark.embed.find_phase`) finds the phase
of a mark in a marked photo for anyone: a forger who runs it on each of his N marked photos and moves
each residual (or marked photo) back to phase 0 before averaging faces a fixed grid again. A forger
without any extractor (an operator's own, kept secret) can line the marks up too: the marked photos'
high-passes correlate where their marks' tile-periodic parts do
(:func:`bench.watermark_embed.correlation_aligner`).

The three forgers run here in one run, on the embed study's protocol and images
(:func:`bench.watermark_embed.bundle_forgery`: the same ``FORGE_SIDE``-px sources, clean targets,
key and secret phases, the same 1 % FPR threshold τ), so the plain forger's rows are the baseline of
the aligned ones. The full tier is the embed study's scale (100 marked sources, 500 clean targets) and
is cached in ``bench/cache/watermark-forgery.jsonl`` (keyed by the markers' files and the embed
path's code); the quick tier forges with N = 10 on 100 targets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.cache import Store
from bench.common import full_tier_cache, stamp, write_results
from bench.watermark_embed import (
    ALIGN_REACH,
    FORGE_FPR,
    FORGE_SIDE,
    MUTUAL_ALIGNER,
    PUBLIC_ALIGNER,
    TARGET_PSNR,
    _cached,
    _folder_stamp,
    _path_stamp,
    forgery,
    forgery_inputs,
)

NAME = "watermark-forgery"
ROOT = Path(__file__).resolve().parents[1]
#: The shipped default markers of ``watermark-embed``.
MARKERS = ROOT / "mlcore" / "zoo" / "checkpoints" / "molm-photo"
TIERS = {"quick": {"sources": 10, "targets": 100}, "full": {"sources": 100, "targets": 500}}


def report(result: dict[str, Any], tier: str) -> str:
    def cell(r: dict[str, Any]) -> str:
        return f"{r['value']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]"

    lines = [
        "# Watermark forgery when the forger aligns the marks",
        "",
        f"Written by `python -m bench watermark-forgery --tier {tier}` (bench/watermark_forgery.py); issue #23.",
        "",
        "The shipped default markers of `watermark-embed` (zoo:molm-photo) lay each photo's mark at a secret phase "
        "of the tile grid. The *plain* forger averages N marked photos as he finds them (the embed study's "
        "protocol); the *aligned* forgers first move each residual (or marked photo) to one phase: found with the "
        "public extractor's phase search, exactly as the portal does, or — with no extractor at all — at the "
        f"shift (within ±{ALIGN_REACH} px) where the photo's high-pass correlates best with the first marked "
        "photo's.",
        "",
        f"One key; {result['sources']} marked {FORGE_SIDE} × {FORGE_SIDE} crops of the shipped photos (mark at "
        f"{TARGET_PSNR:.0f} dB); the mean of N residuals (with the originals) or of N marked photos less the mean "
        f"of N clean photos of the forger's own (without) stamped on {result['targets']} clean crops. τ = "
        f"{result['tau']} of {result['key_bits']} bits, the {FORGE_FPR:.0%} FPR threshold calibrated on the clean "
        f"crops against the forged key and 9 random keys (FPR of the forged key on clean crops: "
        f"{cell(result['fpr_forged_key'])}); real marks matched at τ: {cell(result['tpr_marked'])}. Forged: the "
        "share of forged crops matched at τ (lower is better; target ≤ 0.05 for the default marker), 95 % "
        "interval in brackets.",
        "",
        "| N | originals | plain forger | aligned by the public phase search | aligned by correlation "
        "| matched bits, plain / search / correlation |",
        "|---|---|---|---|---|---|",
    ]
    forged = result["forged"]
    for name, plain in forged.items():
        if ", aligned by " in name:
            continue
        search, mutual = forged[f"{name}, aligned by {PUBLIC_ALIGNER}"], forged[f"{name}, aligned by {MUTUAL_ALIGNER}"]
        n, originals = name.split(" ", 1)
        bits = " / ".join(f"{r['mean_matched_bits']:.1f}" for r in (plain, search, mutual))
        lines.append(
            f"| {n.removeprefix('N=')} | {originals.removesuffix(' originals')} | {cell(plain)} | "
            f"**{cell(search)}** | **{cell(mutual)}** | {bits} |"
        )
    lines += [
        "",
        "A secret phase per photo stops only a forger who does not look for it: the phase search the portal needs "
        "to read a mark tells anyone holding the public extractor where each mark lies, the marks' own "
        "correlation tells anyone who has a few marked photos, and aligned marks add up as on a fixed grid. "
        "Resisting this forger needs marks whose placement the forger cannot compute or observe — placed by the "
        "key and the content, say — which no shipped marker has.",
        "",
        f"CPU: {result['cpu_seconds']:.0f} s (one thread).",
    ]
    return "\n".join(lines)


def run(tier: str, results: Path) -> None:
    """The three forgers against the shipped markers, with the embed study's images, key and phases."""
    import torch

    torch.set_num_threads(1)
    settings = TIERS[tier]
    cache = full_tier_cache(Store.named(NAME), tier)
    forgers = (PUBLIC_ALIGNER, MUTUAL_ALIGNER, ALIGN_REACH)
    key = f"forgery/{_folder_stamp(MARKERS)}/{_path_stamp()}/{stamp((settings, forgers))}"
    inputs = forgery_inputs(settings["sources"], settings["targets"])
    result = _cached(cache, key, lambda: forgery(MARKERS, **inputs, seed=2, aligned=True))
    write_results(results, NAME, report(result, tier), {"tier": tier, "settings": settings, "result": result})
