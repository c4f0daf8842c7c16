"""The embed path on photos at their own resolution: fidelity, bits after JPEG-75 and a 0.5 resize,
the null (unmarked photos against random keys), post-hoc baselines, and the portal's read latency.

Photos: random crops (256-640 px a side, any aspect) of the photos scikit-image and scikit-learn ship
(``mlcore.data.images.photos``, those with a short side ≥ 256). Each crop is marked under a fresh
random 48-bit key at the target PSNR through ``mlcore.watermark.embed.mark_image``, written as a PNG
(``image_io.encode``), attacked, and read back through the portal's own path
(``verification.open_image`` + ``verification.decode``). Markers: the zoo's ``molm-tiny`` and, when
present, the same markers with the extractor fine-tuned on residual-marked tiles
(``var/zoo/molm-embed/markers``, written by ``python -m mlcore.zoo train molm-embed``).

Baselines from ``invisible-watermark``: DWT-DCT and DWT-DCT-SVD (48 bits) and RivaGAN (32 bits, its
ONNX models ship inside the package), on the same crops and attacks.

Latency: a 4-megapixel JPEG through ``open_image`` + ``decode`` + a match against one key, in this
process (the worker's part of a portal check; ``bench.watermark_latency`` measures the HTTP path).
"""

from __future__ import annotations

import io
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bench.common import write_results

ROOT = Path(__file__).resolve().parents[1]
TIERS = {"quick": {"crops": 8, "latency_reps": 5}, "full": {"crops": 120, "latency_reps": 30}}
TARGET_PSNR = 38.0
ATTACKS = ("none", "jpeg-75", "resize-0.5")


def crops(n: int, seed: int = 0) -> list[np.ndarray]:
    from mlcore.data.images import photos

    pool = [p.pixels for p in photos() if min(p.pixels.shape[:2]) >= 256]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        pixels = pool[rng.integers(len(pool))]
        h, w = pixels.shape[:2]
        ch, cw = (int(rng.integers(256, min(640, s) + 1)) for s in (h, w))
        top, left = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        out.append(np.ascontiguousarray(pixels[top : top + ch, left : left + cw]))
    return out


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


def molm_rows(folder: Path, images: list[np.ndarray], seed: int) -> dict[str, Any]:
    import torch

    from mlcore.watermark import image_io
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.pipeline import load_bundle
    from mlcore.watermark.verification import decode, open_image

    torch.set_num_threads(2)
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
    return {
        "n": len(images),
        "psnr": statistics.fmean(psnrs),
        "strength": statistics.fmean(strengths),
        **{f"bits_{a}": statistics.fmean(v) for a, v in acc.items()},
        "bits_unmarked_random_key": statistics.fmean(null),
    }


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
    settings = TIERS[tier]
    images = crops(settings["crops"])
    zoo = ROOT / "mlcore" / "zoo" / "checkpoints" / "molm"
    tuned = ROOT / "var" / "zoo" / "molm-embed" / "markers"
    rows: dict[str, dict[str, Any]] = {"MOLM embed (zoo molm-tiny)": molm_rows(zoo, images, seed=1)}
    # The recipe writes its manifest last, once the tuned extractor is exported.
    finished = (tuned / "manifest.json").is_file() and (tuned / "extractor" / "config.json").is_file()
    if finished:
        rows["MOLM embed (extractor fine-tuned on residuals)"] = molm_rows(tuned, images, seed=1)
    for method, label in (("dwtDct", "DWT-DCT"), ("dwtDctSvd", "DWT-DCT-SVD"), ("rivaGan", "RivaGAN")):
        try:
            rows[label] = baseline_rows(method, images, seed=1)
        except Exception as exc:  # a baseline that cannot run is reported in its row, not fatal
            rows[label] = {"error": f"{type(exc).__name__}: {exc}"}
    lat = latency(tuned if finished else zoo, settings["latency_reps"])
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
    lines += [
        "",
        f"Portal read of a {lat['megapixels']:.1f}-megapixel JPEG (open, tile vote, match; this process): "
        f"p50 {lat['p50_ms']:.0f} ms, p95 {lat['p95_ms']:.0f} ms over {lat['reps']} reads (target p95 ≤ 500 ms).",
    ]
    write_results(results, "watermark-embed", "\n".join(lines), {"tier": tier, "rows": rows, "latency": lat})
