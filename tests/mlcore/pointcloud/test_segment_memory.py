"""Bounded memory and honest accounting in chunked segmentation."""

import torch

from mlcore import heap
from mlcore.pointcloud import segment
from mlcore.pointcloud.datasets import make_scan
from mlcore.pointcloud.ptv3 import PTv3, PTv3Config

TINY = {"channels": (16, 32), "depths": (1, 1), "dec_depths": (1,), "patch": 32, "embed_dim": 8}


def test_the_heap_is_trimmed_only_after_resident_memory_grew_by_more_than_the_slack(monkeypatch):
    resident = iter([1000, 1400, 1600, 1200, 1500, 2300, 1300])
    trims = []
    monkeypatch.setattr(heap, "_resident_bytes", lambda: next(resident))
    monkeypatch.setattr(heap, "_malloc_trim", lambda: trims.append)
    trimmer = heap.HeapTrimmer(slack=500)  # floor 1000
    trimmer()  # 1400: within the slack
    assert trims == []
    trimmer()  # 1600 > 1500: trim, new floor 1200
    assert trims == [0]
    trimmer()  # 1500: within the slack of the new floor
    trimmer()  # 2300 > 1700: trim, new floor 1300
    assert trims == [0, 0]


def test_segmentation_counts_voxels_whose_logits_are_not_finite_and_its_cpu_time():
    street = make_scan("D", 1, "val")
    torch.manual_seed(0)
    model = PTv3(PTv3Config(proj="moe", **TINY)).eval()
    healthy = segment.segment_cloud(model, street.xyz, None, street.intensity, grid=0.1, chunk_points=4000)
    assert healthy.nonfinite == 0 and healthy.chunks > 2
    assert healthy.seconds["cpu"] > 0 and set(healthy.seconds) >= {"grid_sampling", "model", "total", "cpu"}
    with torch.no_grad():
        model.class_embed[0, 0] = float("nan")
    broken = segment.segment_cloud(model, street.xyz, None, street.intensity, grid=0.1, chunk_points=4000)
    assert broken.nonfinite == broken.voxels
    assert len(broken.labels) == len(street)  # still a label for every point, flagged as meaningless
