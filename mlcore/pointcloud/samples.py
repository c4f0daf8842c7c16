"""Built-in sample scenes (kind ``pointclouds``) for the "Try with a sample" button: one SynMix
validation scan each, written as a labelled binary PLY with the master labels as ground truth."""

from __future__ import annotations

from pathlib import Path

from mlcore.pointcloud.datasets import make_scan
from mlcore.pointcloud.io.ply import write_ply
from mlcore.pointcloud.render import palette
from mlcore.pointcloud.scenes import LABELS


def write_sample(dataset: str, index: int, path: Path) -> Path:
    scan = make_scan(dataset, index, "val")
    return write_ply(
        path,
        scan.xyz,
        rgb=scan.rgb,
        intensity=scan.intensity,
        labels=scan.labels,
        label_colors=palette(len(LABELS)),
        label_names=LABELS,
    )


def build_room(target: Path) -> None:
    """A room seen by the fused depth camera (dataset A), about 10k points."""
    write_sample("A", 0, target / "room.ply")


def build_street(target: Path) -> None:
    """A street seen by the 64-beam LiDAR (dataset C), about 27k points with intensity."""
    write_sample("C", 0, target / "street.ply")
