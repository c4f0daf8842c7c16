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
ONNX models ship inside the package), on the same crops and attacks, and forged by the same protocol
(RivaGAN on fewer clean targets: its decoder costs ~0.85 CPU-s a crop).

The card's learned baselines (:mod:`mlcore.watermark.learned_baselines`): a Stable-Signature-like
marker (one decoder fine-tuned per key against molm-tiny's frozen extractor) and a WOUAF-like one (key
→ per-channel modulation of the decoder's convolutions, trained with its extractor over random keys).
Both are marked decoders in the same residual embed path, so their rows go through the same
``mark_image``, attacks, reader and forgery as MOLM's. They are trained here (:data:`LEARNED`: three
seeds in the full tier, two keys per seed for Stable-Signature-like, each seed marking a third of the
crops), and every trained model is kept under ``var/bench/watermark-embed/`` so a rerun only measures.
Beside them, MOLM's own markers (molm-tiny's adapters without the shift, and its extractor) trained
exactly as WOUAF-like is, seeds and all: the three methods at equal training, measured on this
machine (the ``molm-residual`` recipe's rows need hours of training and may be carried over).

In the full tier every finished row and forgery is cached (``bench/cache/watermark-embed.jsonl``,
keyed by the markers' manifest, the tier's settings and the embed path's code), and MOLM rows whose
markers folder is not on this machine (``var/`` is not committed) are carried over from the last
written report and marked so (:func:`carried_over`).

Latency: a 4-megapixel JPEG through ``open_image`` + ``decode`` + a match against one key, in this
process (the worker's part of a portal check; ``bench.watermark_latency`` measures the HTTP path).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from bench.cache import Store
from bench.common import carry_over, full_tier_cache, last_report, stamp, write_results
from mlcore.watermark.learned_baselines import BaselineTrainConfig

ROOT = Path(__file__).resolve().parents[1]
TIERS = {
    # ``iw_forge_targets``: clean targets of the invisible-watermark forgeries where fewer than
    # ``forge_targets`` (0: not run): RivaGAN's ONNX decoder reads a 320-px crop in ~0.85 CPU-s.
    "quick": {
        "crops": 8,
        "latency_reps": 5,
        "forge_sources": 100,
        "forge_targets": 100,
        "iw_forge_targets": {"rivaGan": 0},
        "learned_forgery": False,  # a learned baseline's forgery costs ~2 CPU-min: full tier only
    },
    "full": {
        "crops": 120,
        "latency_reps": 30,
        "forge_sources": 100,
        "forge_targets": 500,
        "iw_forge_targets": {"rivaGan": 50},
        "learned_forgery": True,
    },
}
TARGET_PSNR = 38.0
ATTACKS = ("none", "jpeg-75", "resize-0.5")
#: Forgery: N marked photos averaged, square crops of this side, and the detection FPR.
FORGE_NS = (10, 100)
FORGE_SIDE = 320
FORGE_FPR = 0.01
#: The portal's default false-positive rate (``MOELAB_WATERMARK_FPR``), for the "detected" columns.
PORTAL_FPR = 1e-3
ZOO_LABEL = "MOLM embed (zoo molm-tiny: adapters + bias shift, ablation)"
TUNED_LABEL = "MOLM embed (zoo markers with shift, extractor fine-tuned on residuals)"
JOINT_LABEL = "MOLM embed, markers and extractor trained on residuals (no shift)"
PHOTO_LABEL = "MOLM embed, zoo molm-photo (no shift, secret phase + template search: the default before per-tile keys)"
TILES_LABEL = "MOLM embed, zoo molm-photo-tiles (the same markers, per-tile keys from the content)"
PARITY_LABEL = (
    "MOLM embed, zoo molm-photo-parity (the same markers, per-tile keys from folded projections: the default)"
)
#: Row labels a later version renamed (old → new): a report's row under the old label is the new one's.
RENAMED = {
    "MOLM embed, zoo molm-photo (the shipped default: no shift, secret phase + template search)": PHOTO_LABEL,
    "MOLM embed, zoo molm-photo-tiles (the same markers, per-tile keys from the content: the shipped default)": (
        TILES_LABEL
    ),
}


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
    photo = ROOT / "mlcore" / "zoo" / "checkpoints" / "molm-photo"
    if (photo / "manifest.json").is_file():
        from mlcore.catalog import materialize
        from mlcore.zoo.registry import zoo_model

        folders[PHOTO_LABEL] = photo
        # The zoo items users mark with, built from the committed checkpoint once per version.
        folders[TILES_LABEL] = materialize(zoo_model("molm-photo-tiles"))
        folders[PARITY_LABEL] = materialize(zoo_model("molm-photo-parity"))
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
    from mlcore.watermark.pipeline import load_bundle

    # Seeded phases (a secret-phase folder's; the fixed grid draws none): a rerun lays the same marks.
    return embed_rows(load_bundle(folder), images, seed, held=held, offset_rng=np.random.default_rng(OFFSET_SEED))


def embed_rows(
    bundle: Any,
    images: list[np.ndarray],
    seed: int,
    *,
    held: list[bool] | None = None,
    keys: list[Any] | None = None,
    offset_rng: np.random.Generator | None = None,
    key_aware: bool = False,
) -> dict[str, Any]:
    """:func:`molm_rows` for any bundle; ``keys`` (cycled over the images) for a Stable-Signature-like bundle,
    which marks only the keys it has a fine-tuned decoder for — otherwise a fresh random key per image.
    ``offset_rng`` draws a secret-offset bundle's offsets (:func:`~mlcore.watermark.embed.mark_image`);
    ``key_aware`` reads each file for the key it is checked against (:func:`read_for_key`)."""
    import torch

    from mlcore.watermark import image_io
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.stats import Thresholds
    from mlcore.watermark.verification import open_image

    torch.set_num_threads(1)  # the machine is shared
    rng = np.random.default_rng(seed)
    # The portal's bar for one key at its default FPR: what "detected" means to a user checking a file.
    portal_bits = Thresholds.for_keyring(bundle.num_bits, 1, fpr=PORTAL_FPR, suspicious_fpr=1e-2).detect_bits
    acc: dict[str, list[float]] = {a: [] for a in ATTACKS}
    null: list[float] = []
    psnrs, strengths = [], []
    for i, pixels in enumerate(images):
        if keys is None:
            key = torch.from_numpy(rng.integers(0, 2, bundle.num_bits)).float()
        else:
            key = torch.as_tensor(keys[i % len(keys)]).float()
        source = image_io.SourceImage(name=f"{i}.png", format="PNG", pixels=pixels)
        marked = mark_image(bundle, source, key, target_psnr=TARGET_PSNR, offset_rng=offset_rng)
        data = image_io.encode(marked.image)
        psnrs.append(psnr(image_io.read(data).pixels, pixels))
        strengths.append(marked.strength)
        for name in ATTACKS:
            bits = read_for_key(bundle.extractor, open_image(attack(data, name)), key.numpy(), key_aware) > 0.5
            acc[name].append(float((bits == (key.numpy() > 0.5)).mean()))
        other = rng.integers(0, 2, bundle.num_bits)
        clean = read_for_key(bundle.extractor, Image.fromarray(pixels), other, key_aware) > 0.5
        null.append(float((clean == (other > 0)).mean()))
    out: dict[str, Any] = {
        "n": len(images),
        "psnr": statistics.fmean(psnrs),
        "strength": statistics.fmean(strengths),
        **{f"bits_{a}": statistics.fmean(v) for a, v in acc.items()},
        "bits_unmarked_random_key": statistics.fmean(null),
        "portal_bits": portal_bits,
        **{
            f"detected_{a}": statistics.fmean(round(x * bundle.num_bits) >= portal_bits for x in v)
            for a, v in acc.items()
        },
    }
    if held is not None and any(held):
        out["held_out_photos"] = {
            "n": sum(held),
            **{f"bits_{a}": statistics.fmean(x for x, h in zip(v, held, strict=True) if h) for a, v in acc.items()},
        }
    return out


def read_for_key(
    extractor: Any, image: Image.Image, key: np.ndarray, key_aware: bool = False, votes: Any | None = None
) -> np.ndarray:
    """(M,) bit probabilities of one opened image as the portal reads it (``verification.decode``), or with
    ``key_aware`` as a reader checking ``key`` reads it (:func:`~mlcore.watermark.embed.read_logits_for_key`;
    ``votes``: the image's template votes, computed once when several keys are checked against it)."""
    from mlcore.watermark.verification import decode

    if not key_aware:
        return decode(extractor, [image])[0]
    import torch

    from mlcore.watermark.embed import read_logits_for_key
    from mlcore.watermark.generator import from_uint8

    pixels = from_uint8(np.asarray(image.convert("RGB"))[None])
    key_t = torch.from_numpy(np.asarray(key)).float()
    return torch.sigmoid(read_logits_for_key(extractor, pixels, key_t, votes)).numpy()


def _working(extractor: Any, pixels: np.ndarray) -> tuple[Any, Any]:
    """(working image, grid) of a uint8 (H, W, 3) image, as the portal's reader makes them."""
    from mlcore.watermark import embed
    from mlcore.watermark.generator import from_uint8

    grid = embed.grid_for(*pixels.shape[:2], extractor.image_size)
    return embed.to_working(from_uint8(pixels[None]), grid), grid


def _template_votes(extractor: Any, pixels: np.ndarray) -> Any:
    """The template votes of every phase of a uint8 image's working grid (:func:`~mlcore.watermark.embed.
    template_votes`), for a reader that checks several keys against the same image."""
    from mlcore.watermark import embed

    return embed.template_votes(extractor, *_working(extractor, pixels))


def forgery(
    folder: Path,
    sources: list[np.ndarray],
    own_clean: list[np.ndarray],
    targets: list[np.ndarray],
    seed: int,
    *,
    aligned: bool = False,
) -> dict[str, Any]:
    """The averaging forgery against one markers folder (see the module docstring), with the aligning
    forgers too when ``aligned`` (:func:`bundle_forgery`); rates with 95 % intervals."""
    from mlcore.watermark.pipeline import load_bundle

    offsets = np.random.default_rng(OFFSET_SEED + 1)
    return bundle_forgery(load_bundle(folder), sources, own_clean, targets, seed, offset_rng=offsets, aligned=aligned)


def bundle_forgery(
    bundle: Any,
    sources: list[np.ndarray],
    own_clean: list[np.ndarray],
    targets: list[np.ndarray],
    seed: int,
    *,
    key: np.ndarray | None = None,
    offset_rng: np.random.Generator | None = None,
    key_aware: bool = False,
    aligned: bool = False,
) -> dict[str, Any]:
    """:func:`forgery` for any bundle; ``key`` fixes the forged key (a Stable-Signature-like bundle's own),
    ``offset_rng`` draws a secret-offset bundle's offsets, ``key_aware`` reads every image for the key it
    is scored against (:func:`read_for_key`; the threshold is calibrated on such reads); ``aligned`` adds
    the forgers who first move each mark to one phase: by the public extractor's phase search
    (:func:`public_phase_shift`) and, without any extractor, by correlating the marked photos
    (:func:`correlation_aligner`)."""
    import torch

    from mlcore.watermark import image_io
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.verification import decode, open_image

    extractor = bundle.extractor
    rng = np.random.default_rng(seed)
    key = rng.integers(0, 2, bundle.num_bits) if key is None else np.asarray(key).astype(np.int64)
    key_t = torch.from_numpy(key).float()

    def mark(pixels: np.ndarray, i: int) -> bytes:
        source = image_io.SourceImage(name=f"{i}.png", format="PNG", pixels=pixels)
        marked = mark_image(bundle, source, key_t, target_psnr=TARGET_PSNR, offset_rng=offset_rng)
        return image_io.encode(marked.image)

    votes: dict[bytes, Any] = {}  # per image content: the null checks ten keys against every clean target

    def read_for(images: list[np.ndarray], bits: np.ndarray) -> np.ndarray:
        out = []
        for x in images:
            name = hashlib.blake2b(np.ascontiguousarray(x).tobytes(), digest_size=16).digest()
            if name not in votes:
                votes[name] = _template_votes(extractor, x)
            out.append(read_for_key(extractor, Image.fromarray(x), bits, key_aware=True, votes=votes[name]))
        return np.stack(out)

    return _forgery(
        mark,
        lambda data: read_for_key(extractor, open_image(data), key, key_aware),
        lambda images: decode(extractor, [Image.fromarray(x) for x in images]),
        key,
        sources,
        own_clean,
        targets,
        rng,
        read_for=read_for if key_aware else None,
        aligners={
            PUBLIC_ALIGNER: functools.partial(public_phase_shift, extractor),
            MUTUAL_ALIGNER: correlation_aligner(),
        }
        if aligned
        else None,
    )


#: The aligning forgers' names in the forgery rows (``"N=10 with originals, aligned by …"``).
PUBLIC_ALIGNER = "the public phase search"
MUTUAL_ALIGNER = "correlation"


def public_phase_shift(extractor: Any, pixels: np.ndarray) -> tuple[float, float]:
    """The (dy, dx) in source pixels by which a marked photo's mark lies past phase 0 of its working grid, as
    anyone holding the public extractor finds it: the portal's own phase search (:func:`~mlcore.watermark.
    embed.find_phase`) on the photo as read."""
    from mlcore.watermark import embed

    work, grid = _working(extractor, pixels)
    dy, dx = embed.find_phase(extractor, work, grid)
    height, width = pixels.shape[:2]
    return dy * height / grid.height, dx * width / grid.width


def correlation_aligner(reach: int | None = None) -> Callable[[np.ndarray], tuple[float, float]]:
    """A forger's aligner that needs no extractor: the first marked photo it sees is the reference, and
    each later one lies at the shift (within ±``reach`` px, default :data:`ALIGN_REACH`) where the
    cross-correlation of its high-pass with the reference's peaks. The photos' contents are unrelated,
    so what correlates is the mark's tile-periodic part, shifted by the difference of the two secret
    phases (modulo the tile period, which the reach spans)."""
    shifts = np.arange(-(reach or ALIGN_REACH), (reach or ALIGN_REACH) + 1)
    reference: list[np.ndarray] = []  # the first photo's conjugate spectrum

    def shift(pixels: np.ndarray) -> tuple[float, float]:
        from scipy import ndimage

        grey = pixels.astype(np.float64).mean(-1)
        spectrum = np.fft.rfft2(grey - ndimage.uniform_filter(grey, 3, mode="reflect"))
        if not reference:
            reference.append(np.conj(spectrum))
            return 0.0, 0.0
        corr = np.fft.irfft2(spectrum * reference[0], s=grey.shape)
        window = corr[np.ix_(shifts % grey.shape[0], shifts % grey.shape[1])]
        dy, dx = np.unravel_index(int(window.argmax()), window.shape)
        return float(shifts[dy]), float(shifts[dx])

    return shift


#: How far (source pixels) :func:`correlation_aligner` looks for a shift: half the tile period of a
#: photo's working grid at ``FORGE_SIDE`` (24 working pixels ≈ 31 source pixels), so every phase
#: difference has one shift in reach and no mark is moved further than it must be.
ALIGN_REACH = 16


def _moved(pixels: np.ndarray, by: tuple[float, ...] | None) -> np.ndarray:
    """(H, W, C) float ``pixels`` moved by ``by`` = (dy, dx) pixels (cubic interpolation, edges reflected);
    None: as they are."""
    from scipy import ndimage

    return pixels if by is None else ndimage.shift(pixels, (*by, 0), order=3, mode="reflect")


def _forgery(
    mark: Callable[[np.ndarray, int], bytes],
    read_file: Callable[[bytes], np.ndarray],
    read: Callable[[list[np.ndarray]], np.ndarray],
    key: np.ndarray,
    sources: list[np.ndarray],
    own_clean: list[np.ndarray],
    targets: list[np.ndarray],
    rng: np.random.Generator,
    *,
    read_for: Callable[[list[np.ndarray], np.ndarray], np.ndarray] | None = None,
    aligners: dict[str, Callable[[np.ndarray], tuple[float, float]]] | None = None,
) -> dict[str, Any]:
    """The forgery protocol for any marker: ``mark(pixels, i)`` → the marked PNG under ``key``,
    ``read_file(data)`` → (M,) bit probabilities of a file, ``read(images)`` → (n, M) of uint8 arrays;
    ``read_for(images, bits)`` → (n, M) read for that key, for a reader whose read depends on the key
    it checks (then every score, the null's included, comes from it). ``aligners``: name → ``f(marked)`` →
    how far that photo's mark lies past a common phase (pixels); each adds an aligning forger, who moves
    every residual (marked photo) back by it before the mean, so marks laid at secret phases add up as on
    a fixed grid."""
    from mlcore.watermark import image_io
    from mlcore.watermark.attacks import forge
    from mlcore.watermark.calibration import calibrate, matched_bits, rate_at

    num_bits = len(key)
    # Running sums at each N: the residuals (with the originals) and the marked photos (without).
    aligners = aligners or {}
    alignments = ("", *aligners)
    residual = {a: np.zeros(sources[0].shape) for a in alignments}
    marked_sum = {a: np.zeros(sources[0].shape) for a in alignments}
    patterns: dict[tuple[int, bool, str], np.ndarray] = {}
    own: list[np.ndarray] = []
    for i, pixels in enumerate(sources[: max(FORGE_NS)]):
        data = mark(pixels, i)
        written = image_io.read(data).pixels
        back = {a: tuple(-d for d in aligners[a](written)) for a in aligners}
        marked_f = written.astype(np.float64)
        residual_f = marked_f - pixels
        for a in alignments:
            residual[a] += _moved(residual_f, back.get(a))
            marked_sum[a] += _moved(marked_f, back.get(a))
        own.append(read_file(data))
        if i + 1 in FORGE_NS:
            n = i + 1
            clean_mean = np.mean([c.astype(np.float64) for c in own_clean[:n]], axis=0)
            for aligned in alignments:
                patterns[(n, True, aligned)] = residual[aligned] / n
                patterns[(n, False, aligned)] = marked_sum[aligned] / n - clean_mean

    def scores(images: list[np.ndarray], bits: np.ndarray) -> np.ndarray:
        return matched_bits(read(images) if read_for is None else read_for(images, bits), bits)

    clean = read(targets) if read_for is None else None
    others = rng.integers(0, 2, (9, num_bits))
    by_key = [matched_bits(clean, k) if clean is not None else scores(targets, k) for k in (key, *others)]
    null = np.concatenate(by_key)
    threshold = calibrate(null, FORGE_FPR, num_bits)

    def rate(values: np.ndarray) -> dict[str, Any]:
        r = rate_at(values, threshold.tau)
        return {"value": r.value, "ci": list(r.ci), "n": r.n}

    out: dict[str, Any] = {
        "key_bits": num_bits,
        "sources": len(own),
        "targets": len(targets),
        "tau": threshold.tau,
        "fpr_calibrated": threshold.fpr,
        "negatives": threshold.negatives,
        "fpr_forged_key": rate(by_key[0]),
        "tpr_marked": rate(matched_bits(np.array(own), key)),
        "forged": {},
    }
    for (n, originals, aligned), pattern in sorted(
        patterns.items(), key=lambda item: (alignments.index(item[0][2]), item[0][0], not item[0][1])
    ):
        name = f"N={n} {'with' if originals else 'without'} originals{f', aligned by {aligned}' if aligned else ''}"
        forged_scores = scores([forge(t, pattern) for t in targets], key)
        out["forged"][name] = {
            **rate(forged_scores),
            "mean_matched_bits": float(forged_scores.mean()),
            "pattern_psnr": float(10 * np.log10(255**2 / max(float((pattern**2).mean()), 1e-10))),
        }
    return out


#: invisible-watermark's methods by row label, and the key length each carries.
IMWATERMARK = {"DWT-DCT": "dwtDct", "DWT-DCT-SVD": "dwtDctSvd", "RivaGAN": "rivaGan"}


def _iw_bits(method: str) -> int:
    return 32 if method == "rivaGan" else 48


def iw_mark(method: str, pixels: np.ndarray, key: np.ndarray) -> np.ndarray:
    """``pixels`` (H, W, 3) uint8 marked with ``key`` by invisible-watermark's ``method``, at its own strength."""
    from imwatermark import WatermarkEncoder

    if method == "rivaGan":
        WatermarkEncoder.loadModel()
    encoder = WatermarkEncoder()
    encoder.set_watermark("bits", [int(b) for b in key])
    bgr = encoder.encode(np.ascontiguousarray(pixels[..., ::-1]), method)
    return np.clip(bgr[..., ::-1], 0, 255).astype(np.uint8)


def iw_read(method: str, pixels: np.ndarray, size: tuple[int, int] | None = None) -> np.ndarray:
    """(M,) bits invisible-watermark's ``method`` reads; an image under 256 px is first resized to ``size``
    (the package refuses smaller ones)."""
    from imwatermark import WatermarkDecoder, WatermarkEncoder

    if method == "rivaGan":
        WatermarkEncoder.loadModel()
    if min(pixels.shape[:2]) < 256 and size is not None:
        pixels = np.asarray(Image.fromarray(pixels).resize(size, Image.Resampling.BICUBIC))
    decoder = WatermarkDecoder("bits", _iw_bits(method))
    return np.asarray(decoder.decode(np.ascontiguousarray(pixels[..., ::-1]), method), dtype=float)


def baseline_rows(method: str, images: list[np.ndarray], seed: int) -> dict[str, Any]:
    num_bits = _iw_bits(method)
    rng = np.random.default_rng(seed)
    acc: dict[str, list[float]] = {a: [] for a in ATTACKS}
    psnrs = []
    for pixels in images:
        key = rng.integers(0, 2, num_bits)
        marked = iw_mark(method, pixels, key)
        psnrs.append(psnr(marked, pixels))
        buffer = io.BytesIO()
        Image.fromarray(marked).save(buffer, "PNG")
        for name in ATTACKS:
            attacked = np.asarray(Image.open(io.BytesIO(attack(buffer.getvalue(), name))).convert("RGB"))
            bits = iw_read(method, attacked, size=pixels.shape[1::-1])
            acc[name].append(float((bits == key).mean()))
    return {
        "n": len(images),
        "psnr": statistics.fmean(psnrs),
        "bits": num_bits,
        **{f"bits_{a}": statistics.fmean(v) for a, v in acc.items()},
    }


def imwatermark_forgery(
    method: str, sources: list[np.ndarray], own_clean: list[np.ndarray], targets: list[np.ndarray], seed: int
) -> dict[str, Any]:
    """The averaging forgery (:func:`forgery`'s protocol) against invisible-watermark's ``method``."""
    from mlcore.watermark import image_io

    rng = np.random.default_rng(seed)
    key = rng.integers(0, 2, _iw_bits(method))

    def mark(pixels: np.ndarray, i: int) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(iw_mark(method, pixels, key)).save(buffer, "PNG")
        return buffer.getvalue()

    return _forgery(
        mark,
        lambda data: iw_read(method, image_io.read(data).pixels),
        lambda images: np.stack([iw_read(method, x) for x in images]),
        key,
        sources,
        own_clean,
        targets,
        rng,
    )


# --- The card's learned baselines (mlcore.watermark.learned_baselines) ------------------------------------

SS_LABEL = "Stable-Signature-like (a decoder fine-tuned per key against a frozen pre-trained extractor)"
WOUAF_LABEL = "WOUAF-like (key → per-channel modulation of the decoder's convolutions)"
#: MOLM's markers trained exactly as WOUAF-like is: the comparison at equal training.
MOLM_LABEL = "MOLM on the baselines' training (key-routed adapters, no shift, trained as WOUAF-like)"
LEARNED_LABELS = (SS_LABEL, WOUAF_LABEL, MOLM_LABEL)
#: The same markers with every mark at a secret phase of the tile grid, found by the template search.
OFFSET_LABEL = "MOLM on the baselines' training, secret offset + template phase search"
#: The same marks read for the key checked (``embed.key_phase``): a reader the portal does not offer yet.
KEYED_LABEL = "MOLM on the baselines' training, secret offset + key-aware phase search (seed 0 only; bench reader)"
#: Seeds the secret offsets of the rows (and, + 1, of the forgery) so a rerun repeats the same marks.
OFFSET_SEED = 99
#: Trained baselines, cached between runs (gitignored): a rerun loads every finished training.
BASELINE_WORK = ROOT / "var" / "bench" / "watermark-embed"
ZOO_FOLDER = ROOT / "mlcore" / "zoo" / "checkpoints" / "molm"


@dataclass(frozen=True)
class LearnedRecipe:
    """How the learned baselines are trained for one tier."""

    seeds: tuple[int, ...]
    ss_keys: int  # Stable-Signature-like keys per seed: one decoder fine-tune each
    pool_patches: int  # 56-px training patches of the training photos (their tiles' latents computed once)
    finetune: BaselineTrainConfig  # Stable-Signature-like: one decoder copy per key, the extractor frozen
    wouaf: BaselineTrainConfig  # WOUAF-like: mapping + affines + extractor over random keys
    wouaf_init: float = 0.5  # the affines' initial scale (a residual to read from the first step)
    held_patches: int = 32  # held-out patches for the training summary

    def stamp(self) -> str:
        return stamp(asdict(self), 10)


# Fine-tunes start at the unmarked decoder, so a stronger mark first (32 dB, annealed to 38 over half the
# steps while the attacks ramp in); WOUAF's joint training from further out (28 dB).
# Sized for the full tier's budget (~0.28 CPU-s a fine-tune step, ~0.25 a WOUAF step, one thread): 6 fine-tunes
# and 3 WOUAF trainings ≈ 8 CPU-min of the study's learned-baseline share.
_FINETUNE = BaselineTrainConfig(steps=120, psnr_start=32.0, ramp_fraction=0.5, warmup=5)
_WOUAF = BaselineTrainConfig(steps=400, psnr_start=28.0, ramp_fraction=0.5, lr=3e-3)
LEARNED = {
    "quick": LearnedRecipe(
        seeds=(0,),
        ss_keys=1,
        pool_patches=256,
        finetune=replace(_FINETUNE, steps=40, log_every=20),
        wouaf=replace(_WOUAF, steps=60, log_every=20),
    ),
    "full": LearnedRecipe(seeds=(0, 1, 2), ss_keys=2, pool_patches=1024, finetune=_FINETUNE, wouaf=_WOUAF),
}


def _log_to(path: Path) -> Any:
    def log(row: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(row) + "\n")

    return log


def _pools(recipe: LearnedRecipe, vae: Any) -> tuple[Any, Any]:
    """Training patches (training photos) and held-out patches (held-out photos), cached in var/."""
    import torch

    from mlcore.data.images import image_crops
    from mlcore.watermark.generator import from_uint8
    from mlcore.watermark.residual_train import PatchPool, patch_pool, patch_side

    path = BASELINE_WORK / f"pool-{recipe.pool_patches}-{recipe.held_patches}.pt"
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        return PatchPool(**saved["train"]), PatchPool(**saved["held"])
    side = patch_side(32)
    train = patch_pool(vae, from_uint8(image_crops(recipe.pool_patches, side, seed=21)), 32)
    held = patch_pool(vae, from_uint8(image_crops(recipe.held_patches, side, seed=22, split="test")), 32)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"train": vars(train), "held": vars(held)}, path.with_suffix(".tmp"))
    path.with_suffix(".tmp").replace(path)
    return train, held


def ss_keys(seed: int, count: int) -> np.ndarray:
    """The keys a Stable-Signature-like seed fine-tunes decoders for: (count, 48) bits."""
    return np.random.default_rng((seed, 1)).integers(0, 2, (count, 48))


def train_stable_signature(recipe: LearnedRecipe, seed: int, folder: Path) -> dict[str, Any]:
    """One seed of the Stable-Signature-like baseline: the pre-trained extractor, frozen, and one decoder
    fine-tune per key, each saved in ``folder`` as it finishes (a rerun resumes at the first unfinished key)."""
    import torch

    from mlcore.watermark.extractor import load_extractor
    from mlcore.watermark.generator import Generator, load_vae
    from mlcore.watermark.learned_baselines import KeyedDecoders, finetune_decoder, key_string, tile_accuracy
    from mlcore.watermark.pipeline import Bundle
    from mlcore.watermark.residual_train import marked_fields

    torch.set_num_threads(1)
    vae = load_vae(ZOO_FOLDER)
    extractor = load_extractor(ZOO_FOLDER / "extractor").requires_grad_(False)
    summary_path = folder / "training.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {"keys": {}}
    decoders = (
        KeyedDecoders.load(folder / "decoders", vae)
        if (folder / "decoders" / "keys.json").is_file()
        else KeyedDecoders(extractor.num_bits)
    )
    decoders.attach(vae)
    keys = ss_keys(seed, recipe.ss_keys)
    missing = [i for i, key in enumerate(keys) if key_string(key) not in decoders.keys]
    pool, held = _pools(recipe, vae) if missing else (None, None)
    for i in missing:
        key = keys[i]
        began = time.process_time()
        config = replace(recipe.finetune, seed=seed * 100 + i)
        key_t = torch.from_numpy(key).float()
        decoder, rows = finetune_decoder(vae, extractor, key_t, pool, config, log=_log_to(folder / "log.jsonl"))
        decoders.add(key_t, decoder)
        decoders.attach(vae)
        seconds = time.process_time() - began  # training alone, before the held-out read
        held_out = tile_accuracy(
            lambda index, k: marked_fields(vae, decoders, held, index, k, 32),
            extractor,
            held,
            key_t.expand(len(held), -1),
            psnr=config.psnr,
        )
        summary["keys"][key_string(key)] = _training_summary(config.steps, seconds, rows, held_out)
        decoders.save(folder / "decoders")
        summary_path.write_text(json.dumps(summary, indent=1))
    bundle = Bundle(generator=Generator(vae=vae), markers=decoders, extractor=extractor)  # type: ignore[arg-type]
    return {"bundle": bundle, "keys": keys, "training": summary}


def _training_summary(steps: int, cpu_seconds: float, rows: list[dict[str, Any]], held_out: Any) -> dict[str, Any]:
    """What a learned baseline's training left: its steps, CPU seconds, curve and held-out tiles."""
    return {
        "steps": steps,
        "cpu_seconds": round(cpu_seconds, 1),
        "last": rows[-1],
        "curve": rows,
        "held_out": held_out,
    }


def _train_with_extractor(
    recipe: LearnedRecipe,
    seed: int,
    folder: Path,
    part: str,
    fresh: Callable[[Any], Any],
    saved: Callable[[Path], Any],
    train: Callable[..., list[dict[str, Any]]],
) -> dict[str, Any]:
    """One seed of a marking module trained jointly with its extractor over random keys (WOUAF-like, and
    MOLM on the same training), saved in ``folder`` (``part`` and ``extractor``) and loaded from there
    once trained. ``fresh(vae)``: the untrained module; ``saved(path)``: a trained one; ``train``: its
    training (:func:`~mlcore.watermark.learned_baselines.train_modulation` or ``train_markers``)."""
    import torch

    from mlcore.watermark.extractor import load_extractor
    from mlcore.watermark.generator import Generator, load_vae
    from mlcore.watermark.learned_baselines import tile_accuracy
    from mlcore.watermark.pipeline import Bundle
    from mlcore.watermark.residual_train import marked_fields

    torch.set_num_threads(1)
    vae = load_vae(ZOO_FOLDER)
    summary_path = folder / "training.json"
    if (folder / part / "config.json").is_file() and (folder / "extractor" / "config.json").is_file():
        module = saved(folder / part).eval().requires_grad_(False)
        extractor = load_extractor(folder / "extractor")
        summary = json.loads(summary_path.read_text())
    else:
        pool, held = _pools(recipe, vae)
        torch.manual_seed(seed)
        module = fresh(vae)
        module.attach(vae)
        # MOLM's residual rows start from molm-tiny's extractor; so do these (WOUAF's paper starts the
        # fingerprint decoder from a pre-trained ResNet-50).
        extractor = load_extractor(ZOO_FOLDER / "extractor")
        began = time.process_time()
        config = replace(recipe.wouaf, seed=seed)
        rows = train(vae, module, extractor, pool, config, log=_log_to(folder / "log.jsonl"))
        held_keys = torch.randint(0, 2, (len(held), 48), generator=torch.Generator().manual_seed(seed + 5)).float()
        seconds = time.process_time() - began  # training alone, before the held-out read
        held_out = tile_accuracy(
            lambda i, k: marked_fields(vae, module, held, i, k, 32), extractor, held, held_keys, psnr=config.psnr
        )
        summary = _training_summary(config.steps, seconds, rows, held_out)
        module.save_pretrained(folder / part)
        extractor.save_pretrained(folder / "extractor")
        summary_path.write_text(json.dumps(summary, indent=1))
    module.requires_grad_(False).eval()
    module.attach(vae)
    bundle = Bundle(generator=Generator(vae=vae), markers=module, extractor=extractor)  # type: ignore[arg-type]
    return {"bundle": bundle, "keys": None, "training": summary}


def train_wouaf(recipe: LearnedRecipe, seed: int, folder: Path) -> dict[str, Any]:
    """One seed of the WOUAF-like baseline: a linear key mapping and per-convolution affines."""
    from mlcore.watermark.learned_baselines import KeyModulation, train_modulation

    return _train_with_extractor(
        recipe,
        seed,
        folder,
        "modulation",
        lambda vae: KeyModulation.for_vae(vae, num_bits=48, init_scale=recipe.wouaf_init, linear_mapping=True),
        KeyModulation.from_pretrained,
        train_modulation,
    )


def train_molm(recipe: LearnedRecipe, seed: int, folder: Path) -> dict[str, Any]:
    """One seed of MOLM's own markers (molm-tiny's adapters without the bias shift) on WOUAF-like's training."""
    import torch

    from mlcore.watermark.learned_baselines import train_markers
    from mlcore.watermark.markers import Markers

    def fresh(vae: Any) -> Any:
        return Markers.from_pretrained(ZOO_FOLDER / "markers", torch_dtype=torch.float32).without_shift()

    return _train_with_extractor(recipe, seed, folder, "markers", fresh, Markers.from_pretrained, train_markers)


def secret_phase(bundle: Any) -> Any:
    """``bundle`` with its marks laid at a secret per-image phase of the tile grid and read by the phase
    search (``embed.OFFSET_KEY`` = "random-search" on a copy of its extractor; the bundle is unchanged)."""
    import copy
    from dataclasses import replace as with_fields

    from mlcore.watermark.embed import OFFSET_KEY

    extractor = copy.deepcopy(bundle.extractor)
    extractor.register_to_config(**{OFFSET_KEY: "random-search"})
    return with_fields(bundle, extractor=extractor)


def phase_recovery(
    bundle: Any, images: list[np.ndarray], seed: int, offset_seed: int, *, attacks: tuple[str, ...] = ()
) -> dict[str, Any]:
    """For the marks :func:`embed_rows` lays with ``offset_rng = default_rng(offset_seed)`` on the same
    images and keys (marked again, identically): the secret phase each got, the phase the portal's
    reader finds (:func:`~mlcore.watermark.embed.find_phase`), the one a key-aware search finds
    (:func:`~mlcore.watermark.embed.key_phase`), and the bits of the clean file read at each; for each
    of ``attacks`` (names of :func:`attack`), the phase the portal's reader finds in the attacked file
    and the bits read there and at the true phase (a working grid is the same for a file and its
    half-size copy, so its phases compare)."""
    import torch

    from mlcore.watermark import embed, image_io
    from mlcore.watermark.generator import from_uint8
    from mlcore.watermark.verification import open_image

    torch.set_num_threads(1)
    extractor = bundle.extractor
    rng, offsets, replay = (
        np.random.default_rng(seed),
        np.random.default_rng(offset_seed),
        np.random.default_rng(offset_seed),
    )
    stride = extractor.image_size - embed.OVERLAP
    out = []
    for i, pixels in enumerate(images):
        key = torch.from_numpy(rng.integers(0, 2, bundle.num_bits)).float()
        rng.integers(0, 2, bundle.num_bits)  # embed_rows' draw of the null key: keep the keys in step
        source = image_io.SourceImage(name=f"{i}.png", format="PNG", pixels=pixels)
        marked = embed.mark_image(bundle, source, key, target_psnr=TARGET_PSNR, offset_rng=offsets)
        drawn = embed.draw_offset(stride, replay)
        data = image_io.encode(marked.image)
        written = image_io.read(data).pixels
        grid = embed.grid_for(*pixels.shape[:2], extractor.image_size)
        work = embed.to_working(from_uint8(written[None]), grid)

        def bits(phase: tuple[int, int], work: Any = work, grid: Any = grid, key: Any = key) -> float:
            return float(((embed.vote_at(extractor, work, grid, phase) > 0).float() == key).float().mean())

        with torch.no_grad():
            found, keyed = embed.find_phase(extractor, work, grid), embed.key_phase(extractor, work, grid, key)
            record: dict[str, Any] = {
                "drawn": list(drawn),
                "found": list(found),
                "key_aware": list(keyed),
                "bits_true": bits(drawn),
                "bits_found": bits(found),
                "bits_key_aware": bits(keyed),
            }
            for name in attacks:
                pixels_after = from_uint8(np.asarray(open_image(attack(data, name)))[None])
                grid_after = embed.grid_for(*pixels_after.shape[-2:], extractor.image_size)
                work_after = embed.to_working(pixels_after, grid_after)
                found_after = embed.find_phase(extractor, work_after, grid_after)
                record.setdefault("attacks", {})[name] = {
                    "found": list(found_after),
                    "bits_true": bits(drawn, work_after, grid_after),
                    "bits_found": bits(found_after, work_after, grid_after),
                }
            out.append(record)
    return {"images": out}


@functools.cache
def study_stamp(tier: str) -> str:
    """What every cached row of ``tier`` depends on besides its markers: settings and the embed path's code."""
    return _digest(TIERS[tier], TARGET_PSNR, FORGE_NS, FORGE_SIDE, FORGE_FPR, _path_stamp())


def study_inputs(tier: str) -> dict[str, Any]:
    """The crops of ``tier`` with their held-out flags, and the forgery's sources, own clean photos and
    targets: seeded, so every run (and every process of one) marks and forges the same photos."""
    from mlcore.data.images import split_photos

    settings = TIERS[tier]
    named = named_crops(settings["crops"])
    held_names = {p.name for p in split_photos("test")}
    return {
        "images": [pixels for _, pixels in named],
        "held": [name in held_names for name, _ in named],
        **forgery_inputs(settings["forge_sources"], settings["forge_targets"]),
    }


def forgery_inputs(
    sources: int, targets: int, seeds: tuple[int, int, int] = (21, 22, 23)
) -> dict[str, list[np.ndarray]]:
    """The forgery's seeded ``FORGE_SIDE``-px crops: the photos marked (``sources``), the forger's own
    clean photos and the clean ``targets`` (each list a prefix of a longer one with the same seed), drawn
    with ``seeds`` in that order."""
    return {
        "sources": square_crops(sources, FORGE_SIDE, seed=seeds[0]),
        "own_clean": square_crops(max(FORGE_NS), FORGE_SIDE, seed=seeds[1]),
        "targets": square_crops(targets, FORGE_SIDE, seed=seeds[2]),
    }


def secret_phase_parts(
    store: Store | None, hidden: Any, seed: int, j: int, count: int, inputs: dict[str, Any], *, forge: bool, tier: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """One seed (the ``j``-th of ``count``) of MOLM on the baselines' training with its marks at secret
    phases (``hidden``: its :func:`secret_phase` bundle): its bits rows on its share of the crops (the keys
    of its fixed-grid rows) and, with ``forge``, the averaging forgery; offsets seeded per seed so a rerun
    lays the same marks."""
    key = f"{OFFSET_LABEL}/seed{seed}/{LEARNED[tier].stamp()}/{study_stamp(tier)}"
    images, held = inputs["images"][j::count], inputs["held"][j::count]
    row = _cached(
        store,
        f"rows/{key}",
        lambda: embed_rows(
            hidden, images, seed=1 + j, held=held, offset_rng=np.random.default_rng(OFFSET_SEED + 2 * j)
        ),
    )
    if not forge:
        return row, None
    sources, own_clean, targets = inputs["sources"], inputs["own_clean"], inputs["targets"]
    forged = _cached(
        store,
        f"forgery/{key}",
        lambda: bundle_forgery(
            hidden, sources, own_clean, targets, seed=2, offset_rng=np.random.default_rng(OFFSET_SEED + 2 * j + 1)
        ),
    )
    return row, forged


def learned_baselines(tier: str) -> dict[str, list[dict[str, Any]]]:
    """Every seed of both learned baselines, and of MOLM on WOUAF-like's training, for ``tier``, trained now
    or loaded from ``BASELINE_WORK``."""
    recipe = LEARNED[tier]
    work = BASELINE_WORK / f"{tier}-{recipe.stamp()}"
    return {
        SS_LABEL: [{"seed": s, **train_stable_signature(recipe, s, work / f"ss-seed{s}")} for s in recipe.seeds],
        WOUAF_LABEL: [{"seed": s, **train_wouaf(recipe, s, work / f"wouaf-seed{s}")} for s in recipe.seeds],
        MOLM_LABEL: [{"seed": s, **train_molm(recipe, s, work / f"molm-seed{s}")} for s in recipe.seeds],
    }


ROW_METRICS = ("psnr", "strength", "bits_none", "bits_jpeg-75", "bits_resize-0.5", "bits_unmarked_random_key")


def over_seeds(by_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """One table row from per-seed rows: each metric's mean over seeds, the seeds' rows kept beside it."""
    rows = list(by_seed.values())
    out: dict[str, Any] = {
        "n": sum(r["n"] for r in rows),
        "n_label": f"{sum(r['n'] for r in rows)} ({len(rows)} seed{'s' if len(rows) > 1 else ''})",
        **{m: statistics.fmean(r[m] for r in rows) for m in ROW_METRICS},
        "by_seed": {str(s): r for s, r in by_seed.items()},
    }
    held = [r["held_out_photos"] for r in rows if "held_out_photos" in r]
    if held:
        out["held_out_photos"] = {
            "n": sum(h["n"] for h in held),
            **{f"bits_{a}": statistics.fmean(h[f"bits_{a}"] for h in held) for a in ATTACKS},
        }
    return out


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


def _digest(*parts: Any) -> str:
    return stamp(parts)


def _folder_stamp(folder: Path) -> str:
    """What identifies a markers folder's models: its manifest, else its weight files' names and sizes."""
    manifest = folder / "manifest.json"
    if manifest.is_file():
        return _digest(manifest.read_text())
    return _digest(sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*.safetensors")))


def _path_stamp() -> str:
    """The embed path's code (marking, reading, verification): a change to it remeasures every cached row."""
    watermark = ROOT / "mlcore" / "watermark"
    return _digest(*((watermark / f).read_text() for f in ("embed.py", "verification.py", "image_io.py")))


def _cached(store: Store | None, key: str, compute: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``compute()`` (a dict), with the CPU seconds it took, recorded under ``key`` in the full tier's store."""

    def timed() -> Any:
        began = time.process_time()
        value = compute()
        return {**value, "cpu_seconds": round(time.process_time() - began, 1)}

    return timed() if store is None else store.cached(key, timed)


def carried_over(results: Path, measured: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """MOLM rows (and their forgeries) of the last written report whose markers are not measured now —
    their folders live under the gitignored var/ of the machine that trained them — marked as carried."""
    previous = last_report(results / "watermark-embed.json")
    if previous is None:
        return {}, {}
    origin = {"written_at": previous.get("written_at"), "tier": previous.get("tier")}

    def carry(items: dict[str, Any]) -> dict[str, Any]:
        # Rows of markers folders only ("MOLM embed …"): the learned rows are measured by every run.
        kept = {label: row for label, row in items.items() if label.startswith("MOLM embed") and "error" not in row}
        return carry_over(kept, measured | {old for old, new in RENAMED.items() if new in measured}, origin)

    return carry(previous.get("rows", {})), carry(previous.get("forgery", {}))


def run(tier: str, results: Path) -> None:
    from mlcore.watermark.embed import OVERLAP

    settings = TIERS[tier]
    store = full_tier_cache(Store.named("watermark-embed"), tier)
    run_stamp = study_stamp(tier)
    inputs = study_inputs(tier)
    images, held = inputs["images"], inputs["held"]
    folders = molm_folders()
    rows: dict[str, dict[str, Any]] = {
        label: _cached(
            store,
            f"rows/{label}/{_folder_stamp(folder)}/{run_stamp}",
            lambda folder=folder: molm_rows(folder, images, seed=1, held=held),
        )
        for label, folder in folders.items()
    }
    sources, own_clean, targets = inputs["sources"], inputs["own_clean"], inputs["targets"]
    forgeries = {
        label: _cached(
            store,
            f"forgery/{label}/{_folder_stamp(folder)}/{run_stamp}",
            lambda folder=folder: forgery(folder, sources, own_clean, targets, seed=2),
        )
        for label, folder in folders.items()
    }
    old_rows, old_forgeries = carried_over(results, set(folders))
    rows.update(old_rows)
    forgeries.update(old_forgeries)

    # The card's learned baselines: the same crops (each seed marks one in len(seeds) of them), attacks,
    # reader and forgery (against the first seed: a forgery costs as much as all of a seed's rows).
    recipe = LEARNED[tier]
    training: dict[str, dict[str, Any]] = {}
    learned = learned_baselines(tier)
    for label, trained in learned.items():
        by_seed = {}
        for j, t in enumerate(trained):
            key = f"{label}/seed{t['seed']}/{recipe.stamp()}/{run_stamp}"
            keys = None if t["keys"] is None else [k.astype(np.float32) for k in t["keys"]]
            part, part_held = images[j :: len(trained)], held[j :: len(trained)]
            by_seed[t["seed"]] = _cached(
                store,
                f"rows/{key}",
                lambda t=t, keys=keys, part=part, part_held=part_held, j=j: embed_rows(
                    t["bundle"], part, seed=1 + j, held=part_held, keys=keys
                ),
            )
            training[f"{label}, seed {t['seed']}"] = t["training"]
        rows[label] = over_seeds(by_seed)
        first = trained[0]
        if not settings["learned_forgery"]:
            continue
        forgeries[f"{label}, seed {first['seed']}"] = _cached(
            store,
            f"forgery/{label}/seed{first['seed']}/{recipe.stamp()}/{run_stamp}",
            lambda first=first: bundle_forgery(
                first["bundle"],
                sources,
                own_clean,
                targets,
                seed=2,
                key=None if first["keys"] is None else first["keys"][0],
            ),
        )

    # The shipped photo markers' rows once more, each file also attacked: where the portal's phase search
    # lands after JPEG and a resize, and what reading there costs against the true phase.
    photo_phases, photo_stride = None, 0
    if PHOTO_LABEL in folders:
        from mlcore.watermark.pipeline import load_bundle

        photo = load_bundle(folders[PHOTO_LABEL])
        photo_stride = photo.extractor.image_size - OVERLAP
        photo_phases = _cached(
            store,
            f"phases/{PHOTO_LABEL}/{_folder_stamp(folders[PHOTO_LABEL])}/{run_stamp}",
            lambda: phase_recovery(photo, images, seed=1, offset_seed=OFFSET_SEED, attacks=ATTACKS[1:]),
        )

    # MOLM on the baselines' training once more, every mark at a secret phase of the tile grid and read by
    # the template phase search: the same markers, crops, keys and forged key as its fixed-grid rows, seed
    # by seed, so the two rows differ only in where the marks are laid and how they are found.
    molm = learned[MOLM_LABEL]
    count = len(molm)
    hidden_bundles = [secret_phase(t["bundle"]) for t in molm]
    hidden_rows = {}
    for j, (t, bundle) in enumerate(zip(molm, hidden_bundles, strict=True)):
        row, forged = secret_phase_parts(
            store, bundle, t["seed"], j, count, inputs, forge=settings["learned_forgery"], tier=tier
        )
        hidden_rows[t["seed"]] = row
        if forged is not None:
            forgeries[f"{OFFSET_LABEL}, seed {t['seed']}"] = forged
    rows[OFFSET_LABEL] = over_seeds(hidden_rows)
    first, hidden = molm[0], hidden_bundles[0]
    # Seed 0's marks read by a reader that knows the key it checks for: the key-aware phase search.
    rows[KEYED_LABEL] = _cached(
        store,
        f"rows/{KEYED_LABEL}/seed{first['seed']}/{recipe.stamp()}/{run_stamp}",
        lambda: embed_rows(
            hidden,
            images[::count],
            seed=1,
            held=held[::count],
            offset_rng=np.random.default_rng(OFFSET_SEED),
            key_aware=True,
        ),
    )
    phases = _cached(
        store,
        f"phases/{OFFSET_LABEL}/seed{first['seed']}/{recipe.stamp()}/{run_stamp}",
        lambda: phase_recovery(hidden, images[::count], seed=1, offset_seed=OFFSET_SEED),
    )
    if settings["learned_forgery"]:
        forgeries[f"{KEYED_LABEL}, seed {first['seed']}"] = _cached(
            store,
            f"forgery/{KEYED_LABEL}/seed{first['seed']}/{recipe.stamp()}/{run_stamp}",
            lambda: bundle_forgery(
                hidden,
                sources,
                own_clean,
                targets,
                seed=2,
                offset_rng=np.random.default_rng(OFFSET_SEED + 1),
                key_aware=True,
            ),
        )

    iw_stamp = _digest(run_stamp, _imwatermark_version())
    for label, method in IMWATERMARK.items():
        try:
            rows[label] = _cached(
                store, f"rows/{label}/{iw_stamp}", lambda method=method: baseline_rows(method, images, seed=1)
            )
            count = settings["iw_forge_targets"].get(method, len(targets))
            if count:
                forgeries[label] = _cached(
                    store,
                    f"forgery/{label}/{count}/{iw_stamp}",
                    lambda method=method, count=count: imwatermark_forgery(
                        method, sources, own_clean, targets[:count], seed=2
                    ),
                )
        except Exception as exc:  # a baseline that cannot run is reported in its row, not fatal
            rows[label] = {"error": f"{type(exc).__name__}: {exc}"}
    lat = latency(list(folders.values())[-1], settings["latency_reps"])
    lines = [
        "# Watermark embed: the user's own photos at their own size",
        "",
        f"{len(images)} crops (256-640 px a side) of the photos scikit-image and scikit-learn ship; target PSNR "
        f"{TARGET_PSNR:.0f} dB for MOLM and the learned baselines (invisible-watermark's methods at their own "
        "strength); bit accuracy read through the portal's path. Targets: PSNR ≥ 38 dB with bit accuracy ≥ 0.95 "
        "after JPEG-75 and after a 0.5 resize.",
        "",
        "| method | n | PSNR (dB) | bits clean | bits JPEG-75 | bits resize 0.5 | unmarked vs random key |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in rows.items():
        if "error" in r:
            lines.append(f"| {label} | — | could not run: {r['error']} | | | | |")
            continue
        null = r.get("bits_unmarked_random_key")
        mark = " †" if "carried_over" in r else ""
        lines.append(
            f"| {label}{mark} | {r.get('n_label', r['n'])} | {r['psnr']:.1f} | {r['bits_none']:.3f} | "
            f"{r['bits_jpeg-75']:.3f} | {r['bits_resize-0.5']:.3f} | {'' if null is None else f'{null:.3f}'} |"
        )
    lines += carried_note(rows)
    held_lines = [
        f"- {label}: n = {sub['n']}, bits clean {sub['bits_none']:.3f}, JPEG-75 {sub['bits_jpeg-75']:.3f}, "
        f"resize 0.5 {sub['bits_resize-0.5']:.3f}"
        for label, r in rows.items()
        if (sub := r.get("held_out_photos"))
    ]
    if held_lines:
        lines += ["", "On the crops of held-out photos only (photos no trained model saw):", "", *held_lines]
    lines += learned_section(rows, training, recipe)
    lines += phase_section(phases, stride=hidden.extractor.image_size - OVERLAP)
    if photo_phases is not None:
        lines += attacked_phase_section(photo_phases, stride=photo_stride)
    lines += forgery_table(forgeries)
    skipped = [label for label, method in IMWATERMARK.items() if settings["iw_forge_targets"].get(method) == 0]
    if not settings["learned_forgery"]:
        skipped = [*(label.split(" (")[0] for label in LEARNED_LABELS), *skipped]
    if skipped:
        lines += [
            "",
            f"Not forged in this tier: {', '.join(skipped)} (each costs minutes of CPU: a learned baseline marks "
            "100 sources through its decoder, RivaGAN's ONNX decoder reads a 320-px crop in ~0.85 CPU-s; the full "
            "tier forges them, RivaGAN on fewer targets).",
        ]
    lines += [
        "",
        f"Portal read of a {lat['megapixels']:.1f}-megapixel JPEG (open, tile vote, match; this process; the "
        f"last MOLM row's extractor): p50 {lat['p50_ms']:.0f} ms, p95 {lat['p95_ms']:.0f} ms over {lat['reps']} "
        "reads (target p95 ≤ 500 ms).",
    ]
    lines += cost_lines(rows, forgeries, training)
    data = {
        "tier": tier,
        "rows": rows,
        "forgery": forgeries,
        "latency": lat,
        "learned_recipe": {"stamp": recipe.stamp(), **asdict(recipe)},
        "learned_training": training,
        "phase_recovery": phases,
        "photo_phase_recovery": photo_phases,
    }
    write_results(results, "watermark-embed", "\n".join(lines), data)


def cost_lines(rows: dict[str, Any], forgeries: dict[str, Any], training: dict[str, Any]) -> list[str]:
    """What each measured part cost in CPU seconds (one thread), when it was measured (cached parts keep theirs)."""
    parts = [
        *((f"rows: {label}", r) for label, r in rows.items() if "carried_over" not in r),
        *((f"forgery: {label}", f) for label, f in forgeries.items() if "carried_over" not in f),
    ]
    cells = [f"{name} {r['cpu_seconds']:.0f}" for name, r in parts if "cpu_seconds" in r]
    for label, r in rows.items():
        for seed, sub in r.get("by_seed", {}).items():
            if "cpu_seconds" in sub:
                cells.append(f"rows: {label.split(' (')[0]}, seed {seed} {sub['cpu_seconds']:.0f}")
    for name, t in training.items():
        seconds = sum(k["cpu_seconds"] for k in t["keys"].values()) if "keys" in t else t["cpu_seconds"]
        cells.append(f"training: {name.split(' (')[0]}, {name.rsplit(', ', 1)[1]} {seconds:.0f}")
    if not cells:
        return []
    return ["", "CPU seconds (one thread) of each part when it was measured: " + "; ".join(cells) + "."]


def _imwatermark_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("invisible-watermark")
    except PackageNotFoundError:
        return "absent"


def carried_note(rows: dict[str, dict[str, Any]]) -> list[str]:
    origins = {
        (r["carried_over"].get("written_at"), r["carried_over"].get("tier"))
        for r in rows.values()
        if "carried_over" in r
    }
    if not origins:
        return []
    when = "; ".join(f"{w} ({t} tier)" for w, t in sorted(origins, key=str))
    return [
        "",
        f"† Carried over from the report written {when}: these markers folders live under the gitignored var/ of "
        "the machine that trained them and are not on this one, so their rows (and forgery rows) are the last "
        "measured ones, not remeasured; their n is that run's.",
    ]


def learned_section(rows: dict[str, dict[str, Any]], training: dict[str, Any], recipe: LearnedRecipe) -> list[str]:
    """The learned baselines seed by seed: the embed rows and what each training reached and cost."""
    ft, wo = recipe.finetune, recipe.wouaf
    lines = [
        "",
        "## Learned baselines, seed by seed",
        "",
        "All are marked decoders in MOLM's residual embed path (`mlcore/watermark/learned_baselines.py`), trained "
        "on residual-marked 2 × 2-tile patches of the training photos under the attack mix of MOLM's residual "
        f"training, {ft.patches} patches a step, the mark annealed to {ft.psnr:.0f} dB. Stable-Signature-like: the "
        "pre-trained extractor (molm-tiny's) frozen, one copy of the decoder fine-tuned per key, "
        f"{recipe.ss_keys} key{'s' if recipe.ss_keys > 1 else ''} per seed ({ft.steps} steps each, from "
        f"{ft.psnr_start:.0f} dB; the seed's crops are marked by its keys in turn). WOUAF-like: a linear key "
        f"mapping and per-convolution affines trained with the extractor (from molm-tiny's) over random keys, "
        f"{wo.steps} steps from {wo.psnr_start:.0f} dB. MOLM on the baselines' training: molm-tiny's key-routed "
        "adapters without the bias shift and its extractor, trained exactly as WOUAF-like is (same loss, steps, "
        "patches and attacks; `train_markers`), so that row compares the three at equal training. Seeds "
        f"{', '.join(map(str, recipe.seeds))}; each seed marks "
        f"one in {len(recipe.seeds)} of the table's crops. Held-out: the tiles of {recipe.held_patches} patches of "
        f"held-out photos at {ft.psnr:.0f} dB, per tile (no vote).",
        "",
        "| baseline, seed | n | bits clean | bits JPEG-75 | bits resize 0.5 | unmarked vs random key |",
        "|---|---|---|---|---|---|",
    ]
    for label in LEARNED_LABELS:
        for seed, r in rows.get(label, {}).get("by_seed", {}).items():
            lines.append(
                f"| {label.split(' (')[0]}, seed {seed} | {r['n']} | {r['bits_none']:.3f} | {r['bits_jpeg-75']:.3f} | "
                f"{r['bits_resize-0.5']:.3f} | {r['bits_unmarked_random_key']:.3f} |"
            )
    lines += [
        "",
        f"*{OFFSET_LABEL.split(', ', 1)[1]}* (the main table's row of that name): every seed of MOLM on "
        "the baselines' training once more, each mark laid at a fresh secret phase (dy, dx) of the tile grid and "
        "read at the phase whose template vote is the most confident over all of them (`embed.template_phase`); "
        "the same crops, keys and forged key as each seed's fixed-grid rows, so the two differ only in the phase. "
        "*Secret offset + key-aware phase search*: seed 0's marks, each file read for the key it is scored "
        "against, at the phase whose template vote agrees best with that key (`embed.key_phase`), the unmarked "
        "crops and the forgery's clean targets too, so its threshold is calibrated on such reads; the portal "
        "does not read this way (its thresholds assume one read per key).",
    ]
    lines += [
        "",
        "| training | steps | CPU s | train tile bits, last logged steps | held-out tile bits clean / JPEG-75 / "
        "resize 0.5 |",
        "|---|---|---|---|---|",
    ]

    def held(h: dict[str, float]) -> str:
        return f"{h['tile_none']:.3f} / {h['tile_jpeg75']:.3f} / {h['tile_resize05']:.3f}"

    for name, t in training.items():
        short = name.split(" (")[0] + ", " + name.rsplit(", ", 1)[1]
        for i, k in enumerate(t.get("keys", {}).values()):
            lines.append(
                f"| {short}: decoder fine-tune, key {i + 1} | {k['steps']} | {k['cpu_seconds']:.0f} | "
                f"{k['last']['train_bits']:.3f} | {held(k['held_out'])} |"
            )
        if "keys" not in t:
            trained = "markers" if name.startswith(MOLM_LABEL) else "mapping"
            lines.append(
                f"| {short}: {trained} + extractor | {t['steps']} | {t['cpu_seconds']:.0f} | "
                f"{t['last']['train_bits']:.3f} | {held(t['held_out'])} |"
            )
    return lines


def phase_section(phases: dict[str, Any], *, stride: int) -> list[str]:
    """How often each reader finds the secret phase of the offset row's marks (phases in [0, ``stride``)²),
    and the bits read there."""
    from mlcore.watermark.calibration import clopper_pearson

    images = phases["images"]
    n = len(images)

    def hits(column: str, within: int = 0) -> int:
        return sum(
            all(min(abs(a - b), stride - abs(a - b)) <= within for a, b in zip(r[column], r["drawn"], strict=True))
            for r in images
        )

    def mean(column: str) -> str:
        return f"{statistics.fmean(r[column] for r in images):.3f}"

    lines = [
        "",
        "## Does the reader find the secret phase?",
        "",
        f"The offset row's {n} marked crops (clean PNG), each read at its true phase, at the phase the portal's "
        "reader finds without knowing the key (`embed.find_phase`: the most confident template vote) and at the "
        "phase a reader that knows the key finds (`embed.key_phase`: the template vote that agrees best with "
        f"it; benchmark only, the portal's thresholds do not cover a search over phases). Phases are (dy, dx) in "
        f"[0, {stride})²; 'within 1 px' counts wrapped distances.",
        "",
        "| reader | found exactly [95 % CI] | within 1 px | bits at its phase |",
        "|---|---|---|---|",
        f"| the true phase (an oracle) | {n}/{n} | {n}/{n} | {mean('bits_true')} |",
    ]
    for label, column in (("portal's search, key unknown", "found"), ("key-aware search", "key_aware")):
        exact = hits(column)
        low, high = clopper_pearson(exact, n)
        lines.append(
            f"| {label} | {exact}/{n} [{low:.2f}, {high:.2f}] | {hits(column, 1)}/{n} | {mean('bits_' + column)} |"
        )
    return lines


def attacked_phase_section(phases: dict[str, Any], *, stride: int) -> list[str]:
    """Per attack, how often the portal's search finds the shipped photo markers' secret phase (phases in
    [0, ``stride``)²), the offset it most often lands at instead, and the bits read there and at the
    true phase."""
    from collections import Counter

    images = phases["images"]
    n = len(images)

    def offset(found: list[int], drawn: list[int]) -> tuple[int, int]:
        wrapped = [(a - b + stride // 2) % stride - stride // 2 for a, b in zip(found, drawn, strict=True)]
        return wrapped[0], wrapped[1]

    lines = [
        "",
        "## Where the portal's phase search lands after an attack (zoo molm-photo)",
        "",
        f"The shipped photo markers' {n} marked crops (the main table's marks, laid again identically), read as "
        "written and after each attack: how often `embed.find_phase` finds the secret phase, the (dy, dx) offset "
        "it lands at most often when it misses, and the bits read at the phase it finds and at the true phase "
        "(an oracle the portal does not have).",
        "",
        "| file | found exactly | within 1 px | most common miss (dy, dx): count | bits at the found phase | "
        "bits at the true phase |",
        "|---|---|---|---|---|---|",
    ]
    reads = {"as written": images}
    for name in images[0].get("attacks", {}):
        reads[name] = [{**r["attacks"][name], "drawn": r["drawn"]} for r in images]
    for name, rows in reads.items():
        offsets = [offset(r["found"], r["drawn"]) for r in rows]
        exact = sum(o == (0, 0) for o in offsets)
        near = sum(max(abs(o[0]), abs(o[1])) <= 1 for o in offsets)
        misses = Counter(o for o in offsets if o != (0, 0)).most_common(1)
        miss = f"{misses[0][0]}: {misses[0][1]}" if misses else "-"
        found = statistics.fmean(r["bits_found"] for r in rows)
        true = statistics.fmean(r["bits_true"] for r in rows)
        lines.append(f"| {name} | {exact}/{n} | {near}/{n} | {miss} | {found:.3f} | {true:.3f} |")
    return lines


def forgery_table(forgeries: dict[str, dict[str, Any]]) -> list[str]:
    if not forgeries:
        return []
    first = next(iter(forgeries.values()))
    names = list(first["forged"])
    lines = [
        "",
        "## Forgery by averaging",
        "",
        f"One key; {first['sources']} marked {FORGE_SIDE} × {FORGE_SIDE} crops (mark at {TARGET_PSNR:.0f} dB; "
        "invisible-watermark's methods at their own strength), the mean of N of their residuals stamped on the "
        "clean crops (their number is the n of the FPR column). τ: the fewest matching bits at "
        f"{FORGE_FPR:.0%} FPR, calibrated on the clean crops against the forged key and 9 random keys. Forged: the "
        "forger's success rate at τ (lower is better; target ≤ 0.05 for the default marker), 95 % interval in "
        "brackets. Crops of all shipped photos; the attacker's and the victims' crops may come from the same photos.",
        "",
        "| method | τ (bits of M) | FPR, forged key on clean | TPR, real marks | "
        + " | ".join(f"forged {n}" for n in names)
        + " |",
        "|---|---|---|---|" + "---|" * len(names),
    ]

    def cell(r: dict[str, Any]) -> str:
        return f"{r['value']:.2f} [{r['ci'][0]:.2f}, {r['ci'][1]:.2f}]"

    for label, f in forgeries.items():
        lines.append(
            f"| {label}{' †' if 'carried_over' in f else ''} | {f['tau']} of {f['key_bits']} | "
            f"{cell(f['fpr_forged_key'])} (n = {f['targets']}) | {cell(f['tpr_marked'])} (n = {f['sources']}) | "
            + " | ".join(cell(f["forged"][n]) if n in f["forged"] else "—" for n in names)
            + " |"
        )
    return lines
