"""``python -m bench watermark-forgery``: the averaging forgers against the three ways of marking photos
with zoo:molm-photo's markers, beside how well each reads.

Issue #23. ``zoo:molm-photo`` lays each photo's mark at a secret phase of the tile grid, so the mean of
N marks at independent phases keeps little of their tile-periodic part, and the embed study's averaging
forger (bench/results/watermark-embed.md, "Forgery by averaging") succeeds rarely. But the extractor is
public (committed to this repository, and the portal reads with it), and its phase search
(:func:`mlcore.watermark.embed.find_phase`) finds the phase of a mark in a marked photo for anyone: a
forger who runs it on each of his N marked photos and moves each residual (or marked photo) back to
phase 0 before averaging faces a fixed grid again. A forger without any extractor (an operator's own,
kept secret) can line the marks up too: the marked photos' high-passes correlate where their marks'
tile-periodic parts do (:func:`bench.watermark_embed.correlation_aligner`).

``zoo:molm-photo-tiles`` (the same markers and extractor) marks on the fixed grid with per-tile keys
from the content (:mod:`mlcore.watermark.embed`, "Per-tile keys"): there is no phase to find, and the
mean of N marks is the key scrambled by N other photos' content. But a forger without the originals
pastes those photos' content too, which steers the reader's flips towards the stamp's;
``zoo:molm-photo-parity`` takes the flips from folded projections ("Folded projections"), whose parity
the pasted content does not steer.

All three are measured on the embed study's protocol and images: the bits read back through the portal's
path on its crops of the shipped photos (:func:`bench.watermark_embed.molm_rows`), and the three
forgers in one run (:func:`bench.watermark_embed.bundle_forgery`: the same ``FORGE_SIDE``-px sources,
clean targets and key, the same 1 % FPR threshold τ), so each plain forger's row is the baseline of
its aligned ones. The full tier is the embed study's scale (120 crops; 100 marked sources, 500 clean
targets) and is cached in ``bench/cache/watermark-forgery.jsonl`` (keyed by the markers' files, the
extractor's config and the embed path's code); the quick tier reads 16 crops and forges with N = 10 on
100 targets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.cache import Store
from bench.common import full_tier_cache, stamp, write_results
from bench.watermark_embed import (
    ALIGN_REACH,
    ATTACKS,
    FORGE_FPR,
    FORGE_SIDE,
    MUTUAL_ALIGNER,
    OFFSET_SEED,
    PUBLIC_ALIGNER,
    TARGET_PSNR,
    _cached,
    _folder_stamp,
    _path_stamp,
    crops,
    forgery,
    forgery_inputs,
    molm_rows,
)
from mlcore.zoo.molm_photo import PARITY_TILE_KEYS

NAME = "watermark-forgery"
#: The zoo items measured, by row label: the same markers and extractor, marked three ways.
MARKERS = {
    "zoo:molm-photo (secret phase + template search)": "molm-photo",
    "zoo:molm-photo-tiles (per-tile keys from the content)": "molm-photo-tiles",
    "zoo:molm-photo-parity (per-tile keys from folded projections; watermark-embed's default)": "molm-photo-parity",
}
TIERS = {
    "quick": {"crops": 16, "sources": 10, "targets": 100, "restamp_targets": 20},
    "full": {"crops": 120, "sources": 100, "targets": 500, "restamp_targets": 100},
}
#: Marked photos the re-marking forger reads the key from (a majority vote over their reads).
RESTAMP_READS = (1, 10)


def restamp(
    folder: Path, sources: list[Any], targets: list[Any], seed: int, tau: int, *, reads: tuple[int, ...] = RESTAMP_READS
) -> dict[str, Any]:
    """The forger who holds the markers: he reads the key from N marked photos with the extractor (a majority
    vote over their bits), marks his targets with it as ``watermark-embed`` does, and is scored at the
    averaging forgery's τ. The key and the sources' marks are :func:`forgery`'s (the same ``seed``)."""
    import numpy as np
    import torch

    from mlcore.watermark import image_io
    from mlcore.watermark.calibration import clopper_pearson, matched_bits
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.watermark.verification import decode, open_image

    bundle = load_bundle(folder)
    key = np.random.default_rng(seed).integers(0, 2, bundle.num_bits)
    offsets = np.random.default_rng(OFFSET_SEED + 1)

    def marked(pixels: Any, bits: Any) -> bytes:
        source = image_io.SourceImage(name="p.png", format="PNG", pixels=pixels)
        out = mark_image(
            bundle, source, torch.from_numpy(np.asarray(bits)).float(), target_psnr=TARGET_PSNR, offset_rng=offsets
        )
        return image_io.encode(out.image)

    def read(data: bytes) -> Any:
        return decode(bundle.extractor, [open_image(data)])[0]

    probabilities = np.stack([read(marked(pixels, key)) for pixels in sources[: max(reads)]])
    out: dict[str, Any] = {"targets": len(targets)}
    for n in reads:
        voted = (probabilities[:n].mean(0) > 0.5).astype(np.int64)
        scores = matched_bits(np.stack([read(marked(t, voted)) for t in targets]), key)
        hits = int((scores >= tau).sum())
        out[f"N={n}"] = {
            "key_bits_read": int((voted == key).sum()),
            "value": hits / len(targets),
            "ci": list(clopper_pearson(hits, len(targets))),
            "n": len(targets),
            "mean_matched_bits": float(scores.mean()),
        }
    return out


def _cell(r: dict[str, Any]) -> str:
    return f"{r['value']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]"


def worst_forgery(forged: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The forger and setting that forged most often."""
    return max(forged.items(), key=lambda item: item[1]["value"])


def reading_table(markers: dict[str, dict[str, Any]]) -> list[str]:
    first = next(iter(markers.values()))
    lines = [
        f"| markers | n | PSNR (dB) | {' | '.join(f'bits {a}' for a in ATTACKS)} | unmarked vs random key | "
        f"{' | '.join(f'detected {a}' for a in ATTACKS)} |",
        "|---|---|---|" + "---|" * (2 * len(ATTACKS) + 1),
    ]
    for label, measured in markers.items():
        r = measured["rows"]
        bits = " | ".join(f"{r[f'bits_{a}']:.3f}" for a in ATTACKS)
        found = " | ".join(f"{r[f'detected_{a}']:.2f}" for a in ATTACKS)
        null = r["bits_unmarked_random_key"]
        lines.append(f"| {label} | {r['n']} | {r['psnr']:.1f} | {bits} | {null:.3f} | {found} |")
    lines += [
        "",
        f"*Detected*: the share of files matched at the portal's bar for one key at its default FPR (0.1 %: "
        f"{first['rows']['portal_bits']} of {first['forgery']['key_bits']} bits).",
    ]
    return lines


def forgery_table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"τ = {result['tau']} of {result['key_bits']} bits (FPR of the forged key on clean crops: "
        f"{_cell(result['fpr_forged_key'])}); real marks matched at τ: {_cell(result['tpr_marked'])}.",
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
            f"| {n.removeprefix('N=')} | {originals.removesuffix(' originals')} | {_cell(plain)} | "
            f"{_cell(search)} | {_cell(mutual)} | {bits} |"
        )
    worst, rate = worst_forgery(forged)
    verdict = "met" if rate["ci"][1] <= 0.05 else ("missed" if rate["ci"][0] > 0.05 else "not settled")
    lines += ["", f"Worst forger: {worst}, {_cell(rate)} (target ≤ 0.05: {verdict})."]
    return lines


def report(markers: dict[str, dict[str, Any]], tier: str) -> str:
    first = next(iter(markers.values()))
    lines = [
        "# Watermark forgery against the photo markers, aligned or not",
        "",
        f"Written by `python -m bench watermark-forgery --tier {tier}` (bench/watermark_forgery.py); issue #23.",
        "",
        "The same markers and extractor (zoo:molm-photo's), marking photos three ways. **Secret phase**: each "
        "photo's mark at a fresh phase of the tile grid, which the reader finds by a template search. **Per-tile "
        "keys**: every tile of a fixed grid carries the key with the bits its own content picks flipped, and the "
        'reader undoes the flips it computes from the file it reads (mlcore/watermark/embed.py, "Per-tile keys"): '
        "a bit flips where a projection of the tile's colour is negative. **Folded**: the same, where the "
        f'projection lies in an odd period of {PARITY_TILE_KEYS["period"]} ("Folded projections"), so content a '
        "forger pastes with his stamp no longer steers the flips.",
        "",
        "## How well each reads",
        "",
        f"Crops (256-640 px a side, any aspect) of the photos scikit-image and scikit-learn ship, each marked with "
        f"a random key at {TARGET_PSNR:.0f} dB and read back through the portal's path as written and after each "
        "attack (the embed study's protocol and crops).",
        "",
        *reading_table(markers),
        "",
        "## Forgery",
        "",
        "The *plain* forger averages N marked photos as he finds them (the embed study's protocol); the *aligned* "
        "forgers first move each residual (or marked photo) to one phase: found with the public extractor's phase "
        "search, exactly as the portal does, or — with no extractor at all — at the shift (within "
        f"±{ALIGN_REACH} px) where the photo's high-pass correlates best with the first marked photo's.",
        "",
        f"One key; {first['forgery']['sources']} marked {FORGE_SIDE} × {FORGE_SIDE} crops of the shipped photos "
        f"(mark at {TARGET_PSNR:.0f} dB); the mean of N residuals (with the originals) or of N marked photos less "
        f"the mean of N clean photos of the forger's own (without) stamped on {first['forgery']['targets']} clean "
        f"crops. τ: the {FORGE_FPR:.0%} FPR threshold calibrated on the clean crops against the forged key and 9 "
        "random keys. Forged: the share of forged crops matched at τ (lower is better; target ≤ 0.05 for the "
        "default marker), 95 % interval in brackets. Crops of all shipped photos: the attacker's and the victims' "
        "crops may come from the same photos.",
    ]
    for label, measured in markers.items():
        lines += ["", f"### {label}", "", *forgery_table(measured["forgery"])]
    lines += [
        "",
        "## The forger who holds the markers",
        "",
        "Every marker above is public (committed to this repository), so a forger need not average: he reads the "
        "key from marked photos with the public extractor (a majority vote over N photos' bits), marks his own "
        f"photos with it as `watermark-embed` does, and is scored at the same τ (on the first "
        f"{first['restamp']['targets']} clean targets).",
        "",
        "| markers | N | key bits read right | forged |",
        "|---|---|---|---|",
    ]
    for label, measured in markers.items():
        r = measured["restamp"]
        for n in RESTAMP_READS:
            row = r[f"N={n}"]
            lines.append(f"| {label} | {n} | {row['key_bits_read']} of {first['forgery']['key_bits']} | {_cell(row)} |")
    lines += [
        "",
        "So resisting the averaging forgery protects a key only where the markers and extractor are not public: "
        "the platform refuses to mark under a team key with the zoo's weights in production unless the operator "
        "opts in (`MOELAB_ALLOW_PUBLIC_WATERMARK_WEIGHTS`), and the portal's verdicts on them say what they show.",
    ]
    cpu = sum(sum(part["cpu_seconds"] for part in m.values()) for m in markers.values())
    lines += ["", f"CPU: {cpu:.0f} s (one thread)."]
    return "\n".join(lines)


def run(tier: str, results: Path) -> None:
    """Each way of marking, read and forged on the embed study's images, key and phases."""
    import torch

    from mlcore.catalog import materialize
    from mlcore.jobs.references import builtin_items

    torch.set_num_threads(1)
    settings = TIERS[tier]
    cache = full_tier_cache(Store.named(NAME), tier)
    forgers = (PUBLIC_ALIGNER, MUTUAL_ALIGNER, ALIGN_REACH)
    inputs = forgery_inputs(settings["sources"], settings["targets"])
    images = crops(settings["crops"], seed=0)
    items = builtin_items()
    measured: dict[str, dict[str, Any]] = {}
    for label, name in MARKERS.items():
        folder = materialize(items[name])
        # The two items share their weights and manifest: the extractor's config tells them apart.
        config = (folder / "extractor" / "config.json").read_text()
        what = f"{_folder_stamp(folder)}/{stamp(config)}/{_path_stamp()}"
        measured[label] = {
            "rows": _cached(cache, f"rows/{what}/{stamp(settings['crops'])}", lambda f=folder: molm_rows(f, images, 0)),
            "forgery": _cached(
                cache,
                f"forgery/{what}/{stamp(({k: settings[k] for k in ('sources', 'targets')}, forgers))}",
                lambda f=folder: forgery(f, **inputs, seed=2, aligned=True),
            ),
        }
        tau, targets = measured[label]["forgery"]["tau"], inputs["targets"][: settings["restamp_targets"]]
        measured[label]["restamp"] = _cached(
            cache,
            f"restamp/{what}/{stamp((tau, len(targets), RESTAMP_READS))}",
            lambda f=folder, t=targets, tau=tau: restamp(f, inputs["sources"], t, 2, tau),
        )
    write_results(results, NAME, report(measured, tier), {"tier": tier, "settings": settings, "markers": measured})
