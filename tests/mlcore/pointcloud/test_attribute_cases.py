"""The premise of bench/pointcloud_attributes.py's "robust, not blind" cases: the attribute-only
classes share their neighbour's geometry and differ in the attribute the sensor records."""

import numpy as np

from bench.pointcloud_attributes import CASES, attribute_settings, case_scans


def test_road_markings_lie_flush_with_the_asphalt_and_only_their_intensity_differs():
    case = CASES["road-markings"]
    (scan,) = case_scans(case, 1, "train")
    asphalt, marking = scan.labels == 0, scan.labels == 1
    assert scan.rgb is None and scan.intensity is not None and marking.sum() > 500
    # Same plane: the heights of markings and asphalt differ by far less than the sensor noise (1 cm+).
    assert abs(np.median(scan.xyz[marking, 2]) - np.median(scan.xyz[asphalt, 2])) < 0.005
    assert np.median(scan.intensity[marking]) > 2 * np.median(scan.intensity[asphalt])


def test_painted_doors_lie_in_the_wall_planes_and_only_their_colour_differs():
    case = CASES["painted-doors"]
    (scan,) = case_scans(case, 1, "train")
    wall, door = scan.labels == 1, scan.labels == 2
    assert scan.intensity is None and scan.rgb is not None and door.sum() > 200
    # Every door point is as close to a wall plane (x or y at the room's extremes) as wall points are.
    lo, hi = scan.xyz[wall, :2].min(0), scan.xyz[wall, :2].max(0)

    def to_plane(p: np.ndarray) -> np.ndarray:
        return np.minimum(np.abs(p[:, :2] - lo), np.abs(p[:, :2] - hi)).min(1)

    assert np.percentile(to_plane(scan.xyz[door]), 95) <= np.percentile(to_plane(scan.xyz[wall]), 95) + 0.01
    colour_gap = np.abs(np.median(scan.rgb[door], 0).astype(int) - np.median(scan.rgb[wall], 0).astype(int))
    assert colour_gap.max() > 40


def test_the_same_split_and_index_give_the_same_scan_and_other_splits_another():
    case = CASES["road-markings"]
    (a,), (b,), (c,) = (case_scans(case, 1, s) for s in ("train", "train", "heldout"))
    np.testing.assert_array_equal(a.xyz, b.xyz)
    assert len(a.xyz) != len(c.xyz) or not np.array_equal(a.xyz, c.xyz)


def test_every_attribute_setting_keeps_the_geometry_and_changes_only_attributes():
    from mlcore.pointcloud.datasets import make_scan

    scan = make_scan("C", 0, "val")
    settings = attribute_settings(scan, 0)
    assert settings["as captured"] == (None, scan.intensity)
    assert settings["geometry only"] == (None, None)
    rgb, intensity = settings["+ colour"]
    assert rgb is not None and rgb.shape == (len(scan), 3) and intensity is scan.intensity
    np.testing.assert_allclose(settings["12-bit as 16-bit"][1], scan.intensity * 4095 / 65535, rtol=1e-6)
