"""The one in-memory point cloud every reader returns, and the checks every reader shares.

A reader never hands an unchecked array to the rest of the project: counts are checked against
the limits *before* anything is allocated (:func:`check_count`), and coordinates are checked for
NaN/inf after reading (:meth:`Cloud.checked`). Every failure is a :class:`JobError` that names the
file, says what was wrong and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlcore.jobs.spec import JobError

#: The hard ceiling for any upload, whatever a job asks for: 50M points is ~600 MB of float32
#: coordinates alone, and the segmenter chunks anything larger than its budget anyway.
MAX_POINTS = 50_000_000


@dataclass(frozen=True)
class Cloud:
    """Points with optional per-point attributes, all of length ``N``.

    ``xyz`` float32 (N, 3); ``rgb`` uint8 (N, 3); ``intensity`` float32 (N,); ``labels`` int32 (N,).
    """

    xyz: np.ndarray
    rgb: np.ndarray | None = None
    intensity: np.ndarray | None = None
    labels: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.xyz)
        if self.xyz.dtype != np.float32 or self.xyz.ndim != 2 or self.xyz.shape[1] != 3:
            raise ValueError(f"Cloud.xyz must be float32 (N, 3), got {self.xyz.dtype} {self.xyz.shape}")
        for name, dtype, width in (("rgb", np.uint8, 3), ("intensity", np.float32, None), ("labels", np.int32, None)):
            value = getattr(self, name)
            if value is None:
                continue
            shape = (n, width) if width else (n,)
            if value.dtype != dtype or value.shape != shape:
                raise ValueError(f"Cloud.{name} must be {np.dtype(dtype)} {shape}, got {value.dtype} {value.shape}")

    def __len__(self) -> int:
        return len(self.xyz)

    def subset(self, index: np.ndarray) -> Cloud:
        """The points at ``index`` (an integer array or a boolean mask), with their attributes."""

        def pick(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else np.ascontiguousarray(values[index])

        xyz = np.ascontiguousarray(self.xyz[index])
        return Cloud(xyz=xyz, rgb=pick(self.rgb), intensity=pick(self.intensity), labels=pick(self.labels))

    def checked(self, path: Path) -> Cloud:
        """Return ``self`` if every coordinate is finite, else raise a :class:`JobError`."""
        finite = np.isfinite(self.xyz).all(axis=1)
        if not finite.all():
            bad = np.flatnonzero(~finite)
            raise JobError(
                f"{path.name}: {len(bad)} of {len(self)} points have NaN or infinite coordinates "
                f"(the first is point {int(bad[0])}). Remove them (e.g. CloudCompare: Edit > Scalar fields > "
                "Filter, or drop invalid returns in the exporter) and upload again."
            )
        if self.intensity is not None and not np.isfinite(self.intensity).all():
            raise JobError(f"{path.name}: the intensity attribute holds NaN or infinite values; fix or drop it.")
        return self


def check_count(path: Path, count: int, max_points: int) -> None:
    """Refuse an empty cloud or one above the limit, before a single point is allocated."""
    limit = min(max_points, MAX_POINTS)
    if count <= 0:
        raise JobError(f"{path.name}: the file holds no points. Upload a cloud with at least one point.")
    if count > limit:
        raise JobError(
            f"{path.name}: {count:,} points is more than the limit of {limit:,}. "
            "Downsample it first (e.g. a 1-5 cm voxel grid) or split the scan into tiles."
        )
