"""The built-in labelled-scan dataset (kind ``pointcloud-dataset``) behind ``pointcloud-train``'s
"Try with a sample": four procedural rooms saved the ways users bring labelled scans, so the sample
runs the user-data path end to end.

- ``room-1.ply``: binary PLY with a float ``scalar_Classification`` property (CloudCompare's export);
- ``room-2.las``: LAS 1.2, point format 2 (colour), the ``classification`` field;
- ``room-3.xyz`` + ``room-3.labels``: plain XYZ text with one class id per line beside it;
- ``room-4.pcd``: ASCII PCD with an integer ``label`` field;
- ``classes.json``: the ids' names, a coarser taxonomy than SynMix's (tables, chairs and cabinets
  are one "furniture" class); id 1 is ``null``: unlabelled points.

Scans are SynMix rooms (dataset A's fused depth camera) drawn from a split of their own, so they
never coincide with SynMix's training or validation scenes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from mlcore.pointcloud.datasets import make_scan
from mlcore.pointcloud.scenes import LABEL_ID

#: Class id of each SynMix indoor class in the sample (ids start at 2: LAS keeps 0 and 1 for unlabelled).
SAMPLE_IDS: dict[str, int] = {
    "floor": 2,
    "wall": 3,
    "ceiling": 4,
    "table": 5,
    "chair": 5,
    "cabinet": 5,
    "clutter": 6,
}
SAMPLE_NAMES: dict[int, str | None] = {1: None, 2: "floor", 3: "wall", 4: "ceiling", 5: "furniture", 6: "clutter"}


def _room(index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xyz float32, rgb uint8, class ids) of sample room ``index``."""
    scan = make_scan("A", index, "user-sample")
    table = np.zeros(int(scan.labels.max()) + 1, np.int64)
    for name, code in SAMPLE_IDS.items():
        if LABEL_ID[name] < len(table):
            table[LABEL_ID[name]] = code
    ids = np.where(scan.labels >= 0, table[np.clip(scan.labels, 0, None)], 1)
    rgb = scan.rgb if scan.rgb is not None else np.full((len(scan.xyz), 3), 128, np.uint8)
    return scan.xyz.astype(np.float32), rgb, ids


def write_cloudcompare_ply(path: Path, xyz: np.ndarray, rgb: np.ndarray, ids: np.ndarray) -> Path:
    """Binary PLY as CloudCompare exports a classified cloud: colour and a float ``scalar_Classification``."""
    header = (
        "ply\nformat binary_little_endian 1.0\n"
        f"element vertex {len(xyz)}\n"
        "property float x\nproperty float y\nproperty float z\n"
        "property uchar red\nproperty uchar green\nproperty uchar blue\n"
        "property float scalar_Classification\nend_header\n"
    )
    record = np.zeros(
        len(xyz), [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("r", "u1"), ("g", "u1"), ("b", "u1"), ("c", "<f4")]
    )
    record["x"], record["y"], record["z"] = xyz.T
    record["r"], record["g"], record["b"] = rgb.T
    record["c"] = ids
    path.write_bytes(header.encode() + record.tobytes())
    return path


def write_las(path: Path, xyz: np.ndarray, rgb: np.ndarray, ids: np.ndarray) -> Path:
    import laspy

    header = laspy.LasHeader(point_format=2, version="1.2")
    header.scales = np.array([0.001, 0.001, 0.001])
    header.offsets = np.floor(xyz.min(0))
    las = laspy.LasData(header)
    las.x, las.y, las.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    las.red, las.green, las.blue = (rgb.astype(np.uint16) * 257).T
    las.classification = ids.astype(np.uint8)
    las.write(str(path))
    return path


def write_xyz_with_labels(path: Path, xyz: np.ndarray, ids: np.ndarray) -> Path:
    np.savetxt(path, xyz, fmt="%.4f")
    np.savetxt(path.with_suffix(".labels"), ids, fmt="%d")
    return path


def write_pcd(path: Path, xyz: np.ndarray, ids: np.ndarray) -> Path:
    header = (
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS x y z label\nSIZE 4 4 4 4\n"
        f"TYPE F F F I\nCOUNT 1 1 1 1\nWIDTH {len(xyz)}\nHEIGHT 1\nVIEWPOINT 0 0 0 1 0 0 0\n"
        f"POINTS {len(xyz)}\nDATA ascii\n"
    )
    rows = "\n".join(f"{x:.4f} {y:.4f} {z:.4f} {int(c)}" for (x, y, z), c in zip(xyz, ids))
    path.write_text(header + rows + "\n")
    return path


def build_labelled_rooms(target: Path) -> None:
    """Four labelled rooms in four formats and a classes.json (about 45k points, 1.5 MB)."""
    target.mkdir(parents=True, exist_ok=True)
    xyz, rgb, ids = _room(0)
    write_cloudcompare_ply(target / "room-1.ply", xyz, rgb, ids)
    xyz, rgb, ids = _room(1)
    write_las(target / "room-2.las", xyz, rgb, ids)
    xyz, _, ids = _room(2)
    write_xyz_with_labels(target / "room-3.xyz", xyz, ids)
    xyz, _, ids = _room(3)
    write_pcd(target / "room-4.pcd", xyz, ids)
    (target / "classes.json").write_text(json.dumps({str(k): v for k, v in SAMPLE_NAMES.items()}, indent=1))
