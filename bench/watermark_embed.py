"""The embed path on photos at their own resolution: fidelity, bits after JPEG-75 and a 0.5 resize,
the null (unmarked photos against random keys), post-hoc baselines, and the portal's read latency.

Photos: random crops (256-640 px a side, any aspect) of the photos scikit-image and scikit-learn ship
(``mlcore.data.images.photos``, those with a short side ≥ 256). Each crop is marked under a fresh
random 48-bit key at the target PSNR through ``mlcore.watermark.embed.mark_image``, written as a PNG
(``image_io.encode``), attacked, and read back through the portal's own path
(``verification.open_image`` + ``verification.decode``). Markers: the zoo's ``molm-tiny`` (adapters
*with* the content-independent bias shift: an ablation of the paper's markers), when present the same
markers with the extractor fine-tuned on residual-marked tiles (``var/zoo/molm-embed/markers``, written
by ``python -m mlcore.zoo train molm-embed``), and when present the paper's markers — no shift — trained
together with the extractor on residual-marked photos (``python -m mlcore.zoo train molm-residual``;
found in ``mlcore/zoo/checkpoints/molm-residual``, ``var/zoo/molm-residual/markers`` or the folder named
by ``$MOLM_RESIDUAL_MARKERS``); ``$MOLM_EMBED_EXTRA_ROWS`` (JSON, row label → folder) adds more. The
crops come from every shipped photo, the training split's included; each MOLM row also reports the
crops of held-out photos alone.

Forgery by averaging, for every MOLM row: ``forge_sources`` square crops (``FORGE_SIDE`` px, so the
marks of all photos align pixel for pixel and tile for tile: the attacker's best case) are marked under
*one* key; the mean of the first N ∈ ``FORGE_NS`` residuals (marked − original: an attacker holding the
originals) or of the marked photos minus the mean of N clean photos of his own (without the
originals) is added to ``forge_targets`` clean crops. The detection threshold τ is the 1 % FPR
threshold calibrated on those clean crops scored against the forged key and nine other random keys
(:func:`mlcore.watermark.calibration.calibrate`); the table gives the forger's success (the TPR of
the forged images at τ, lower is better) beside the TPR of the real marks at the same τ.

Baselines from ``invisible-watermark``: DWT-DCT and DWT-DCT-SVD (48 bits) and RivaGAN (32 bits, its
ONNX models ship inside the package), on the same crops and attacks.

Latency: a 4-megapixel JPEG through ``open_image`` + ``decode`` + a match against one key, in this
process (the worker's part of a portal check; ``bench.watermark_latency`` measures the HTTP path).
"""

from __future__ import annotations

import io
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bench.common import write_results

ROOT = Path(__file__).resolve().parents[1]
TIERS = {
    "quick": {"crops": 8, "latency_reps": 5, "forge_sources": 100, "forge_targets": 100},
    "full": {"crops": 120, "latency_reps": 30, "forge_sources": 100, "forge_targets": 500},
}
TARGET_PSNR = 38.0
ATTACKS = ("none", "jpeg-75", "resize-0.5")
#: Forgery: N marked photos averaged, square crops of this side, and the detection FPR.
FORGE_NS = (10, 100)
FORGE_SIDE = 320
FORGE_FPR = 0.01
ZOO_LABEL = "MOLM embed (zoo molm-tiny: adapters + bias shift, ablation)"
TUNED_LABEL = "MOLM embed (zoo markers with shift, extractor fine-tuned on residuals)"
JOINT_LABEL = "MOLM embed, markers and extractor trained on residuals (no shift)"


def named_crops(n: int, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """``n`` seeded crops (256-640 px a side, any aspect) of the shipped photos, with each one's photo name."""
    from mlcore.data.images import photos

    pool = [p for p in photos() if min(p.pixels.shape[:2]) >= 256]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        photo = pool[rng.integers(len(pool))]
        h, w = photo.pixels.shape[:2]
        ch, cw = (int(rng.integers(256, min(640, s) + 1)) for s in (h, w))
        top, left = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        out.append((photo.name, np.ascontiguousarray(photo.pixels[top : top + ch, left : left + cw])))
    return out


def crops(n: int, seed: int = 0) -> list[np.ndarray]:
    return [pixels for _, pixels in named_crops(n, seed)]


def square_crops(n: int, side: int, seed: int) -> list[np.ndarray]:
    """``n`` seeded ``side`` × ``side`` crops of the shipped photos (those with a short side ≥ ``side``)."""
    from mlcore.data.images import photos

    pool = [p.pixels for p in photos() if min(p.pixels.shape[:2]) >= side]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        pixels = pool[rng.integers(len(pool))]
        top, left = rng.integers(0, pixels.shape[0] - side + 1), rng.integers(0, pixels.shape[1] - side + 1)
        out.append(np.ascontiguousarray(pixels[top : top + side, left : left + side]))
    return out


def molm_folders() -> dict[str, Path]:
    """The MOLM markers folders to measure, by row label: the zoo's always, the trained ones when present."""
    import os

    folders = {ZOO_LABEL: ROOT / "mlcore" / "zoo" / "checkpoints" / "molm"}
    tuned = ROOT / "var" / "zoo" / "molm-embed" / "markers"
    # The recipes write their manifest last, once the trained models are exported.
    if (tuned / "manifest.json").is_file() and (tuned / "extractor" / "config.json").is_file():
        folders[TUNED_LABEL] = tuned
    joint = [
        ROOT / "mlcore" / "zoo" / "checkpoints" / "molm-residual",
        ROOT / "var" / "zoo" / "molm-residual" / "markers",
    ]
    if os.environ.get("MOLM_RESIDUAL_MARKERS"):
        joint.insert(0, Path(os.environ["MOLM_RESIDUAL_MARKERS"]))
    found = next(
        (f for f in joint if (f / "manifest.json").is_file() and (f / "markers" / "config.json").is_file()), None
    )
    if found is not None:
        folders[JOINT_LABEL] = found
    # More candidates to compare, e.g. a checkpoint from the middle of a run: {"row label": "folder", ...}.
    extra = json.loads(os.environ.get("MOLM_EMBED_EXTRA_ROWS") or "{}")
    folders.update({label: Path(folder) for label, folder in extra.items()})
    return folders


def attack(data: bytes, name: str) -> bytes:
    if name == "none":
        return data
    image = Image.open(io.BytesIO(data)).convert("RGB")
    buffer = io.BytesIO()
    if name == "jpeg-75":
        image.save(buffer, "JPEG", quality=75)
    else:
        image.resize((image.width // 2, image.height // 2), Image.Resampling.BICUBIC).save(buffer, "PNG")
    return buffer.getvalue()


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(((a.astype(np.float64) - b) ** 2).mean())
    return 10 * np.log10(255**2 / max(mse, 1e-10))


def molm_rows(folder: Path, images: list[np.ndarray], seed: int, *, held: list[bool] | None = None) -> dict[str, Any]:
    """PSNR and bits after each attack on ``images``; ``held`` flags the crops of held-out photos (reported apart)."""
    import torch

    from mlcore.watermark import image_io
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.watermark.verification import decode, open_image

    torch.set_num_threads(1)  # the machine is shared
    bundle = load_bundle(folder)
    rng = np.random.default_rng(seed)
    acc: dict[str, list[float]] = {a: [] for a in ATTACKS}
    null: list[float] = []
    psnrs, strengths = [], []
    for i, pixels in enumerate(images):
        key = torch.from_numpy(rng.integers(0, 2, bundle.num_bits)).float()
        source = image_io.SourceImage(name=f"{i}.png", format="PNG", pixels=pixels)
        marked = mark_image(bundle, source, key, target_psnr=TARGET_PSNR)
        data = image_io.encode(marked.image)
        psnrs.append(psnr(image_io.read(data).pixels, pixels))
        strengths.append(marked.strength)
        for name in ATTACKS:
            bits = decode(bundle.extractor, [open_image(attack(data, name))])[0] > 0.5
            acc[name].append(float((bits == (key.numpy() > 0.5)).mean()))
        clean = decode(bundle.extractor, [Image.fromarray(pixels)])[0] > 0.5
        null.append(float((clean == (rng.integers(0, 2, bundle.num_bits) > 0)).mean()))
    out: dict[str, Any] = {
        "n": len(images),
        "psnr": statistics.fmean(psnrs),
        "strength": statistics.fmean(strengths),
        **{f"bits_{a}": statistics.fmean(v) for a, v in acc.items()},
        "bits_unmarked_random_key": statistics.fmean(null),
    }
    if held is not None and any(held):
        out["held_out_photos"] = {
            "n": sum(held),
            **{f"bits_{a}": statistics.fmean(x for x, h in zip(v, held, strict=True) if h) for a, v in acc.items()},
        }
    return out


def forgery(
    folder: Path, sources: list[np.ndarray], own_clean: list[np.ndarray], targets: list[np.ndarray], seed: int
) -> dict[str, Any]:
    """The averaging forgery against one markers folder (see the module docstring); rates with 95 % intervals."""
    import torch

    from mlcore.watermark import image_io
    from mlcore.watermark.attacks import forge
    from mlcore.watermark.calibration import calibrate, matched_bits, rate_at
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.watermark.verification import decode, open_image

    bundle = load_bundle(folder)
    extractor = bundle.extractor
    rng = np.random.default_rng(seed)
    key = rng.integers(0, 2, bundle.num_bits)
    # Running sums at each N: the residuals (with the originals) and the marked photos (without).
    residual = np.zeros(sources[0].shape)
    marked_sum = np.zeros(sources[0].shape)
    patterns: dict[tuple[int, bool], np.ndarray] = {}
    own: list[np.ndarray] = []
    for i, pixels in enumerate(sources[: max(FORGE_NS)]):
        source = image_io.SourceImage(name=f"{i}.png", format="PNG", pixels=pixels)
        data = image_io.encode(mark_image(bundle, source, torch.from_numpy(key).float(), target_psnr=TARGET_PSNR).image)
        written = image_io.read(data).pixels.astype(np.float64)
        residual += written - pixels
        marked_sum += written
        own.append(decode(extractor, [open_image(data)])[0])
        if i + 1 in FORGE_NS:
            n = i + 1
            patterns[(n, True)] = residual / n
            clean_mean = np.mean([c.astype(np.float64) for c in own_clean[:n]], axis=0)
            patterns[(n, False)] = marked_sum / n - clean_mean

    def scores(images: list[np.ndarray]) -> np.ndarray:
        return matched_bits(decode(extractor, [Image.fromarray(x) for x in images]), key)

    clean = decode(extractor, [Image.fromarray(x) for x in targets])
    others = rng.integers(0, 2, (9, bundle.num_bits))
    null = np.concatenate([matched_bits(clean, k) for k in (key, *others)])
    threshold = calibrate(null, FORGE_FPR, bundle.num_bits)

    def rate(values: np.ndarray) -> dict[str, Any]:
        r = rate_at(values, threshold.tau)
        return {"value": r.value, "ci": list(r.ci), "n": r.n}

    out: dict[str, Any] = {
        "key_bits": bundle.num_bits,
        "sources": len(own),
        "targets": len(targets),
        "tau": threshold.tau,
        "fpr_calibrated": threshold.fpr,
        "negatives": threshold.negatives,
        "fpr_forged_key": rate(matched_bits(clean, key)),
        "tpr_marked": rate(matched_bits(np.array(own), key)),
        "forged": {},
    }
    for (n, originals), pattern in sorted(patterns.items(), key=lambda item: (item[0][0], not item[0][1])):
        name = f"N={n} {'with' if originals else 'without'} originals"
        forged_scores = scores([forge(t, pattern) for t in targets])
        out["forged"][name] = {
            **rate(forged_scores),
            "mean_matched_bits": float(forged_scores.mean()),
            "pattern_psnr": float(10 * np.log10(255**2 / max(float((pattern**2).mean()), 1e-10))),
        }
    return out


def baseline_rows(method: str, images: list[np.ndarray], seed: int) -> dict[str, Any]:
    from imwatermark import WatermarkDecoder, WatermarkEncoder

    num_bits = 32 if method == "rivaGan" else 48
    if method == "rivaGan":
        WatermarkEncoder.loadModel()
    rng = np.random.default_rng(seed)
    acc: dict[str, list[float]] = {a: [] for a in ATTACKS}
    psnrs = []
    for pixels in images:
        key = [int(b) for b in rng.integers(0, 2, num_bits)]
        encoder = WatermarkEncoder()
        encoder.set_watermark("bits", key)
        bgr = encoder.encode(np.ascontiguousarray(pixels[..., ::-1]), method)
        marked = np.clip(bgr[..., ::-1], 0, 255).astype(np.uint8)
        psnrs.append(psnr(marked, pixels))
        buffer = io.BytesIO()
        Image.fromarray(marked).save(buffer, "PNG")
        for name in ATTACKS:
            attacked = np.asarray(Image.open(io.BytesIO(attack(buffer.getvalue(), name))).convert("RGB"))
            if min(attacked.shape[:2]) < 256:  # the package refuses images under 256 px: read at 256+
                attacked = np.asarray(Image.fromarray(attacked).resize(pixels.shape[1::-1], Image.Resampling.BICUBIC))
            decoder = WatermarkDecoder("bits", num_bits)
            bits = np.asarray(decoder.decode(np.ascontiguousarray(attacked[..., ::-1]), method), dtype=float)
            acc[name].append(float((bits == np.asarray(key)).mean()))
    return {
        "n": len(images),
        "psnr": statistics.fmean(psnrs),
        "bits": num_bits,
        **{f"bits_{a}": statistics.fmean(v) for a, v in acc.items()},
    }


def latency(folder: Path, reps: int) -> dict[str, float]:
    from mlcore.watermark.calibration import matched_bits
    from mlcore.watermark.verification import cached_extractor, decode, open_image

    extractor = cached_extractor(folder)
    pixels = np.asarray(Image.fromarray(crops(1, seed=9)[0]).resize((2304, 1728), Image.Resampling.BICUBIC))
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    data = buffer.getvalue()
    key = np.random.default_rng(0).integers(0, 2, extractor.num_bits)
    decode(extractor, [open_image(data)])  # warm: the extractor and the tile bias load once per process
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        matched_bits(decode(extractor, [open_image(data)]), key)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return {
        "megapixels": 2304 * 1728 / 1e6,
        "p50_ms": statistics.median(times),
        "p95_ms": times[min(len(times) - 1, round(0.95 * (len(times) - 1)))],
        "reps": reps,
    }


def run(tier: str, results: Path) -> None:
    from mlcore.data.images import split_photos

    settings = TIERS[tier]
    named = named_crops(settings["crops"])
    images = [pixels for _, pixels in named]
    held_names = {p.name for p in split_photos("test")}
    held = [name in held_names for name, _ in named]
    folders = molm_folders()
    rows: dict[str, dict[str, Any]] = {
        label: molm_rows(folder, images, seed=1, held=held) for label, folder in folders.items()
    }
    sources = square_crops(settings["forge_sources"], FORGE_SIDE, seed=21)
    own_clean = square_crops(max(FORGE_NS), FORGE_SIDE, seed=22)
    targets = square_crops(settings["forge_targets"], FORGE_SIDE, seed=23)
    forgeries = {label: forgery(folder, sources, own_clean, targets, seed=2) for label, folder in folders.items()}
    for method, label in (("dwtDct", "DWT-DCT"), ("dwtDctSvd", "DWT-DCT-SVD"), ("rivaGan", "RivaGAN")):
        try:
            rows[label] = baseline_rows(method, images, seed=1)
        except Exception as exc:  # a baseline that cannot run is reported in its row, not fatal
            rows[label] = {"error": f"{type(exc).__name__}: {exc}"}
    lat = latency(list(folders.values())[-1], settings["latency_reps"])
    lines = [
        "# Watermark embed: the user's own photos at their own size",
        "",
        f"{len(images)} crops (256-640 px a side) of the photos scikit-image and scikit-learn ship; target PSNR "
        f"{TARGET_PSNR:.0f} dB for MOLM (the baselines' own strength); bit accuracy read through the portal's path. "
        "Targets: PSNR ≥ 38 dB with bit accuracy ≥ 0.95 after JPEG-75 and after a 0.5 resize.",
        "",
        "| method | n | PSNR (dB) | bits clean | bits JPEG-75 | bits resize 0.5 | unmarked vs random key |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        if "error" in r:
            lines.append(f"| {label} | — | could not run: {r['error']} | | | | |")
            continue
        null = r.get("bits_unmarked_random_key")
        lines.append(
            f"| {label} | {r['n']} | {r['psnr']:.1f} | {r['bits_none']:.3f} | {r['bits_jpeg-75']:.3f} | "
            f"{r['bits_resize-0.5']:.3f} | {'' if null is None else f'{null:.3f}'} |"
        )
    held_lines = [
        f"- {label}: n = {sub['n']}, bits clean {sub['bits_none']:.3f}, JPEG-75 {sub['bits_jpeg-75']:.3f}, "
        f"resize 0.5 {sub['bits_resize-0.5']:.3f}"
        for label, r in rows.items()
        if (sub := r.get("held_out_photos"))
    ]
    if held_lines:
        lines += ["", "On the crops of held-out photos only (photos no trained model saw):", "", *held_lines]
    lines += forgery_table(forgeries)
    lines += [
        "",
        f"Portal read of a {lat['megapixels']:.1f}-megapixel JPEG (open, tile vote, match; this process; the "
        f"last MOLM row's extractor): p50 {lat['p50_ms']:.0f} ms, p95 {lat['p95_ms']:.0f} ms over {lat['reps']} "
        "reads (target p95 ≤ 500 ms).",
    ]
    data = {"tier": tier, "rows": rows, "forgery": forgeries, "latency": lat}
    write_results(results, "watermark-embed", "\n".join(lines), data)


def forgery_table(forgeries: dict[str, dict[str, Any]]) -> list[str]:
    if not forgeries:
        return []
    first = next(iter(forgeries.values()))
    names = list(first["forged"])
    lines = [
        "",
        "## Forgery by averaging",
        "",
        f"One key; {first['sources']} marked {FORGE_SIDE} × {FORGE_SIDE} crops (mark at {TARGET_PSNR:.0f} dB), the "
        f"mean of N of their residuals stamped on {first['targets']} clean crops. τ: the fewest matching bits at "
        f"{FORGE_FPR:.0%} FPR, calibrated on the clean crops against the forged key and 9 random keys. Forged: the "
        "forger's success rate at τ (lower is better; target ≤ 0.05 for the default marker), 95 % interval in "
        "brackets. Crops of all shipped photos; the attacker's and the victims' crops may come from the same photos.",
        "",
        "| method | τ (of 48) | FPR, forged key on clean | TPR, real marks | "
        + " | ".join(f"forged {n}" for n in names)
        + " |",
        "|---|---|---|---|" + "---|" * len(names),
    ]

    def cell(r: dict[str, Any]) -> str:
        return f"{r['value']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"

    for label, f in forgeries.items():
        lines.append(
            f"| {label} | {f['tau']} | {cell(f['fpr_forged_key'])} | {cell(f['tpr_marked'])} (n = {f['sources']}) | "
            + " | ".join(cell(f["forged"][n]) for n in names)
            + " |"
        )
    return lines
