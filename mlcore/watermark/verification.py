"""Verification, end to end: images → extractor bits → the best key of a keyring → a verdict.

The procedure of ``shared/papers/molm.md`` §2 step 6, shared by the ``watermark-verify`` job kind
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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mlcore.watermark.keys import KeyRecord
from mlcore.watermark.stats import DEFAULT_FPR, DEFAULT_SUSPICIOUS_FPR, Match, Thresholds, match_images

if TYPE_CHECKING:
    from PIL import Image

    from mlcore.watermark.extractor import Extractor

log = logging.getLogger(__name__)

PIL_FORMATS = ("PNG", "JPEG", "WEBP")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
DEFAULT_MAX_PIXELS = 16 * 2**20


class BadImage(ValueError):
    """An image we refuse to read; the message says which and why."""


def open_image(source: Path | bytes, *, name: str = "image", max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Open a PNG, JPEG or WebP fully decoded as RGB, refusing truncated files and bombs.

    ``verify()`` catches corrupt chunks but invalidates the image, so the file is opened again and
    ``load()`` decodes every pixel (a truncated file fails there, not later inside the extractor).
    """
    from PIL import Image

    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    try:
        with warnings.catch_warnings():
            # Pillow only warns between MAX_IMAGE_PIXELS and twice that: make the warning an error.
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=list(PIL_FORMATS)) as probe:
                width, height = probe.size
                if width * height > max_pixels:
                    raise BadImage(
                        f"{name}: {width}×{height} pixels is over the limit of {max_pixels:,}; "
                        "scale it down (the extractor reads small images anyway)."
                    )
                probe.verify()
            with Image.open(io.BytesIO(data), formats=list(PIL_FORMATS)) as image:
                image.load()
                return image.convert("RGB")
    except BadImage:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise BadImage(f"{name}: declares far more pixels than it holds (a decompression bomb); refused.") from None
    except Image.UnidentifiedImageError:
        raise BadImage(f"{name}: not a PNG, JPEG or WebP image.") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadImage(f"{name}: truncated or corrupt image ({exc}).") from None


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
        f"{path} holds no extractor: expected extractor/config.json (a watermark-markers item) or config.json."
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


def verify(
    extractor: Extractor,
    images: Sequence[Image.Image],
    keys: Sequence[KeyRecord],
    *,
    fpr: float = DEFAULT_FPR,
    suspicious_fpr: float = DEFAULT_SUSPICIOUS_FPR,
) -> tuple[list[Match], Thresholds]:
    probabilities = extractor.decode(list(images)) if images else np.zeros((0, extractor.num_bits))
    return match_images(probabilities, keys, fpr=fpr, suspicious_fpr=suspicious_fpr)
