"""Verification through several extractors: one portal for the marks of every set of markers it serves.

A platform marks images with more than one set of markers (``zoo:molm-tiny`` marks its 32-pixel
generations, ``zoo:molm-photo-parity``, ``zoo:molm-photo-tiles`` and ``zoo:molm-photo`` the users' own
photos), and each set's marks are read by its own extractor (and its own reading of the tiles) only.
The portal therefore reads every image with each extractor and keeps, per image, the best match over
all (extractor, key) pairs. The union bound of :mod:`mlcore.watermark.stats`
covers that search as it covers a keyring: with R extractors and N keys,

    p_RN = min(1, R · N · p),

so the false-positive rate per image stays α however many extractors are configured (each one
more costs a little power: the detection threshold rises by about one bit per doubling of R · N).
Readers that share an extractor's weights and its fixed grid (``zoo:molm-photo-tiles`` and
``zoo:molm-photo-parity``, which differ only in their per-tile keys) run the extractor once per image
(:func:`mlcore.watermark.embed.shared_tile_reads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mlcore.watermark.keys import KeyRecord
from mlcore.watermark.stats import DEFAULT_FPR, DEFAULT_SUSPICIOUS_FPR, Match, Thresholds, match_images

if TYPE_CHECKING:
    from PIL import Image

    from mlcore.watermark.extractor import Extractor


def same_bits(extractors: Sequence[Extractor]) -> int:
    """The bits every extractor reads; a ``ValueError`` when there are none or they disagree (one
    keyring cannot be matched against readers of different key lengths)."""
    counts = sorted({e.num_bits for e in extractors})
    if not counts:
        raise ValueError("no extractor to read with")
    if len(counts) > 1:
        raise ValueError(f"the extractors read different key lengths ({', '.join(map(str, counts))} bits)")
    return counts[0]


def verify_all(
    extractors: Sequence[Extractor],
    images: Sequence[Image.Image],
    keys: Sequence[KeyRecord],
    *,
    fpr: float = DEFAULT_FPR,
    suspicious_fpr: float = DEFAULT_SUSPICIOUS_FPR,
) -> tuple[list[Match], Thresholds]:
    """Each image's best match over every extractor and key, its p-value corrected for all of them.

    On a tie the first extractor's match is kept, so one extractor gives exactly what
    :func:`mlcore.watermark.verification.verify` gives."""
    from mlcore.watermark.embed import shared_tile_reads
    from mlcore.watermark.verification import decode

    same_bits(extractors)
    with shared_tile_reads():
        readings = [
            match_images(decode(e, images), keys, fpr=fpr, suspicious_fpr=suspicious_fpr, readers=len(extractors))
            for e in extractors
        ]
    matches = [min(options, key=lambda m: m.p_corrected) for options in zip(*(m for m, _ in readings), strict=True)]
    return matches, readings[0][1]
