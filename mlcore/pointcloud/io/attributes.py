"""Per-point attributes normalised by what they mean, not by the type the file stores them in.

The segmenter's features are colour in [0, 1] and intensity in [0, 1]. Files do not agree:

- **LAS intensity** is uint16 and, by the specification, normalised to 16 bits; many writers keep
  the sensor's own 8 or 12 bits. The bit depth is read off the largest value (≤ 255: 8-bit,
  ≤ 4,095: 12-bit, else 16-bit) and the values divided by that depth's full scale.
- **LAS colour** is uint16 by the specification; writers that store 8-bit colours in those fields
  are recognised by no channel exceeding 255.
- **PLY / PCD / PTS intensity** has no agreed range (reflectance 0-1, uchar 0-255, Leica PTS
  -2048..2047, raw sensor counts): values already in [0, 1] are kept, uchar values divided by 255,
  anything else scaled robustly, its 1st to 99th percentile mapped onto [0, 1] and clipped.

Every function returns the scaled values and one sentence of what was read and how it was scaled,
which the reader keeps in :attr:`~mlcore.pointcloud.io.cloud.Cloud.notes` for the job's log.
"""

from __future__ import annotations

import numpy as np

#: Bit depths a LAS intensity or colour may really hold, smallest first.
BIT_DEPTHS = (8, 12, 16)
#: The percentiles that robust scaling maps onto 0 and 1.
ROBUST_PERCENTILES = (1.0, 99.0)


def las_intensity(raw: np.ndarray) -> tuple[np.ndarray, str]:
    """LAS uint16 intensity → [0, 1] by its bit depth."""
    top = int(raw.max(initial=0))
    bits = next(b for b in BIT_DEPTHS if top <= 2**b - 1)
    full = 2**bits - 1
    note = (
        f"LAS uint16 intensity, largest value {top:,}: read as {bits}-bit "
        f"({'the specification' if bits == 16 else 'fewer bits than the specification'}), divided by {full:,}"
    )
    return (np.asarray(raw, np.float32) / np.float32(full)).astype(np.float32), note


def las_colour(channels: np.ndarray) -> tuple[np.ndarray, str]:
    """LAS uint16 red/green/blue (N, 3) → uint8, recognising 8-bit colours stored in 16-bit fields."""
    top = int(channels.max(initial=0))
    if top <= 255:
        note = f"LAS colour, largest value {top}: 8-bit values stored in the 16-bit fields, kept as they are"
        return channels.astype(np.uint8), note
    note = f"LAS 16-bit colour (largest value {top:,}), divided by 257 to 8 bits"
    return np.clip(np.rint(channels / 257.0), 0, 255).astype(np.uint8), note


def unknown_intensity(values: np.ndarray, field: str) -> tuple[np.ndarray, str]:
    """An intensity of no agreed range (PLY, PCD, PTS) → [0, 1] (see the module docstring)."""
    raw = np.asarray(values)
    data = raw.astype(np.float64)
    finite = data[np.isfinite(data)]
    if not finite.size:
        return data.astype(np.float32), f"{field}: no finite values"
    lo, hi = float(finite.min()), float(finite.max())
    if lo >= 0.0 and hi <= 1.0:
        return data.astype(np.float32), f"{field} {raw.dtype} in [{lo:.3g}, {hi:.3g}]: already in [0, 1], kept"
    if raw.dtype == np.uint8:
        return (data / 255.0).astype(np.float32), f"{field} uchar (largest {int(hi)}): divided by 255"
    p_lo, p_hi = (float(v) for v in np.percentile(finite, ROBUST_PERCENTILES))
    span = p_hi - p_lo
    if span <= 0:
        # One value almost everywhere: nothing to scale between, so it is read as mid-grey.
        scaled = np.where(np.isfinite(data), 0.5, data)
        return scaled.astype(np.float32), f"{field} {raw.dtype}, almost constant ({p_lo:.4g}): read as 0.5"
    scaled = np.clip((data - p_lo) / span, 0.0, 1.0)
    scaled = np.where(np.isfinite(data), scaled, data)  # NaN stays NaN, for the reader's refusal
    note = (
        f"{field} {raw.dtype} of unknown range [{lo:.4g}, {hi:.4g}]: robust scaling, "
        f"1st-99th percentile [{p_lo:.4g}, {p_hi:.4g}] → [0, 1], clipped"
    )
    return scaled.astype(np.float32), note


def colour_note(raw: np.ndarray, field: str) -> str:
    """What :func:`~mlcore.pointcloud.io.ply.to_uint8_colors` does with colours of ``raw``'s type."""
    raw = np.asarray(raw)
    top = float(np.nanmax(raw)) if raw.size else 0.0
    if raw.dtype.kind == "f":
        return f"{field} float, largest {top:.3g}: " + ("[0, 1] × 255" if top <= 1.0 else "0-255, rounded")
    if top > 255:
        return f"{field} {raw.dtype}, largest {top:,.0f}: 16-bit, shifted to 8 bits"
    return f"{field} {raw.dtype}: 8-bit, kept"
