"""Verification, end to end: images → extractor bits → the best key of a keyring → a verdict.

The procedure of MOLM (ICLR 2026) §2 step 6, shared by the ``watermark-verify`` job kind
and the ``verify`` queue's workers (``workers/verify.py``), so a portal check and a batch job read
the same bits and reach the same verdict. The statistics are in :mod:`mlcore.watermark.stats`.
Images are opened defensively: only PNG, JPEG and WebP, with a pixel cap checked *before* the
pixels are decoded (a decompression bomb declares a huge size in a tiny file).
"""

from __future__ import annotations

import io
import logging
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mlcore.errors import JobError
from mlcore.watermark.keys import KeyRecord
from mlcore.watermark.stats import DEFAULT_FPR, DEFAULT_SUSPICIOUS_FPR, Match, Thresholds, match_images

if TYPE_CHECKING:
    from PIL import Image

    from mlcore.watermark.extractor import Extractor
    from mlcore.watermark.image_size import DeclaredSize

log = logging.getLogger(__name__)

PIL_FORMATS = ("PNG", "JPEG", "WEBP")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
DEFAULT_MAX_PIXELS = 16 * 2**20
#: The smallest side a large JPEG is decoded at (8× the zoo extractor's 32-pixel input).
JPEG_DRAFT_SIDE = 256


class BadImage(ValueError):
    """An image we refuse to read; the message says which and why."""


def open_image(source: Path | bytes, *, name: str = "image", max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Open a PNG, JPEG or WebP fully decoded as RGB, refusing truncated files and bombs. A JPEG
    larger than twice ``JPEG_DRAFT_SIDE`` comes back reduced by libjpeg (see below).

    The size the header declares is checked before Pillow sees the file (Pillow's own guard fires
    inside ``Image.open`` and calls every large image a bomb): over the limit, a file whose bytes
    could hold the declared pixels is told the limit, one whose bytes could not is told that it is
    a bomb or truncated (:mod:`mlcore.watermark.image_size`). ``verify()`` catches corrupt chunks
    but invalidates the image, so the file is opened again and ``load()`` decodes every pixel (a
    truncated file fails there, not later inside the extractor).
    """
    from PIL import Image, ImageOps

    from mlcore.watermark.image_size import declared_size

    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    # Pillow warns above MAX_IMAGE_PIXELS and that warning is an error here: the limit is the lower.
    limit = max_pixels if Image.MAX_IMAGE_PIXELS is None else min(max_pixels, Image.MAX_IMAGE_PIXELS)
    declared = declared_size(data)
    if declared is not None:
        _check_declared_size(name, declared, len(data), limit)
    try:
        with warnings.catch_warnings():
            # Pillow only warns between MAX_IMAGE_PIXELS and twice that: make the warning an error.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=list(PIL_FORMATS)) as probe:
                width, height = probe.size
                if width * height > limit:
                    raise BadImage(_over_limit(name, width, height, limit))
                probe.verify()
            with Image.open(io.BytesIO(data), formats=list(PIL_FORMATS)) as image:
                if image.format == "JPEG":
                    # The extractor reads small images: libjpeg decodes at 1/2, 1/4 or 1/8 scale, keeping
                    # both sides at least JPEG_DRAFT_SIDE, in a fraction of the time (a 4-megapixel photo
                    # is a portal check's largest cost). It still reads every byte: truncation still fails.
                    image.draft("RGB", (JPEG_DRAFT_SIDE, JPEG_DRAFT_SIDE))
                image.load()
                # As shown: the embed path marks images in their EXIF orientation (image_io).
                return ImageOps.exif_transpose(image).convert("RGB")
    except BadImage:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        # Only when our header parser did not find the size (it always does for the formats above).
        raise BadImage(
            f"{name}: declares more pixels than the limit of {limit:,}; scale it down (if it is not that "
            "large, the file is corrupt)."
        ) from None
    except Image.UnidentifiedImageError:
        raise BadImage(f"{name}: not a PNG, JPEG or WebP image.") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadImage(f"{name}: truncated or corrupt image ({exc}).") from None


def _over_limit(name: str, width: int, height: int, limit: int) -> str:
    return (
        f"{name}: {width}×{height} pixels is over the limit of {limit:,}; "
        "scale it down (the extractor reads small images anyway)."
    )


def _check_declared_size(name: str, declared: DeclaredSize, size: int, limit: int) -> None:
    """Invalid first, then a size the bytes cannot hold (a bomb), then the limit (a real, large image)."""
    dims = f"{declared.width}×{declared.height}"
    if declared.invalid:
        raise BadImage(f"{name}: declares {dims} pixels, which is invalid ({declared.invalid}); the file is corrupt.")
    if declared.pixels <= limit:
        return
    if declared.least_bytes is not None and size < declared.least_bytes:
        raise BadImage(
            f"{name}: declares {dims} pixels ({declared.pixels:,}), but its {size:,} bytes cannot hold them "
            f"(a {declared.format} that size takes at least {declared.least_bytes:,}): a decompression bomb or "
            "a truncated file; refused."
        )
    raise BadImage(_over_limit(name, declared.width, declared.height, limit))


def named_images(inputs: Mapping[str, Any], *, limit: int, too_many: str) -> list[tuple[Path, str]]:
    """A job's images (the ``images`` upload(s) and/or the ``image_set`` library item), each with the
    name its table shows: the path inside an unpacked zip or set. ``too_many`` ends the refusal past
    ``limit`` with what to do."""
    uploads = inputs.get("images")
    roots = [Path(p) for p in (uploads if isinstance(uploads, list) else [uploads])] if uploads else []
    if "image_set" in inputs:
        roots.append(Path(inputs["image_set"]))
    if not roots:
        raise JobError("Images: upload images (or a zip of them), or pick an image set.")
    found = [
        (path, path.relative_to(root).as_posix() if root.is_dir() else path.name)
        for root in roots
        for path in image_files([root])
    ]
    if not found:
        where = "the uploaded files" if uploads else "the image set"
        raise JobError(f"Images: {where} hold no PNG, JPEG or WebP images.")
    if len(found) > limit:
        raise JobError(f"Images: {len(found):,} images; at most {limit:,} per job. {too_many}")
    return found


def image_files(paths: Sequence[Path]) -> list[Path]:
    """The image files among ``paths``, walking directories (an unpacked zip) in sorted order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(("._", "."))
            )
        else:
            found.append(path)
    return found


def extractor_directory(path: Path) -> Path:
    """The extractor inside a ``watermark-markers`` item (``extractor/``), or ``path`` itself."""
    if (path / "extractor" / "config.json").is_file():
        return path / "extractor"
    if (path / "config.json").is_file():
        return path
    raise FileNotFoundError(
        "no extractor found: expected extractor/config.json (a watermark-markers item) or config.json."
    )


_cache: dict[Path, Extractor] = {}
_cache_lock = threading.Lock()


def cached_extractor(path: Path) -> Extractor:
    """Load an extractor once per process: a verify worker answers many checks with one model."""
    from mlcore.watermark.extractor import load_extractor

    directory = extractor_directory(Path(path)).resolve()
    with _cache_lock:
        if directory not in _cache:
            import torch

            # One thread per check: the verify queue runs several children, each small.
            torch.set_num_threads(max(1, min(torch.get_num_threads(), 2)))
            started = time.monotonic()
            _cache[directory] = load_extractor(directory)
            log.info("loaded the watermark extractor from %s in %.1f s", directory, time.monotonic() - started)
        return _cache[directory]


def decode(extractor: Extractor, images: Sequence[Image.Image]) -> np.ndarray:
    """The extractor's probabilities that each bit is 1, shape ``(images, bits)``.

    Images small enough to be read whole (the generator's own, ``embed.SMALL_SIDE``) go through the
    extractor in one batch as before; larger ones (photos marked by ``watermark-embed``) are read
    tile by tile on their working grid with a vote (:func:`mlcore.watermark.embed.read_logits`).
    """
    if not images:
        return np.zeros((0, extractor.num_bits))
    from mlcore.watermark.embed import SMALL_SIDE

    out = np.zeros((len(images), extractor.num_bits), dtype=np.float32)
    small = [i for i, image in enumerate(images) if min(image.size) <= SMALL_SIDE]
    if small:
        out[small] = extractor.decode([images[i] for i in small])
    large = [i for i in range(len(images)) if min(images[i].size) > SMALL_SIDE]
    if large:
        import torch

        from mlcore.watermark.embed import read_logits
        from mlcore.watermark.generator import from_uint8

        was_training = extractor.training
        extractor.eval()
        for i in large:
            logits = read_logits(extractor, from_uint8(np.asarray(images[i].convert("RGB"))[None]))
            out[i] = torch.sigmoid(logits).numpy()
        extractor.train(was_training)
    return out


def verify(
    extractor: Extractor,
    images: Sequence[Image.Image],
    keys: Sequence[KeyRecord],
    *,
    fpr: float = DEFAULT_FPR,
    suspicious_fpr: float = DEFAULT_SUSPICIOUS_FPR,
) -> tuple[list[Match], Thresholds]:
    """Full matches: internal. What a viewer may see of them is :func:`mlcore.watermark.disclosure.disclose`."""
    return match_images(decode(extractor, images), keys, fpr=fpr, suspicious_fpr=suspicious_fpr)
