"""Reading a user's labelled scans: formats, class names, refusals and the split by content."""

import json

import laspy
import numpy as np
import pytest

from mlcore.errors import JobError
from mlcore.pointcloud.user_samples import build_labelled_rooms, write_cloudcompare_ply, write_las
from mlcore.pointcloud.user_scans import read_scan_set, split_by_content


def cloud(seed, n=400, classes=(2, 6)):
    rng = np.random.default_rng(seed)
    xyz = rng.uniform(0, 5, (n, 3)).astype(np.float32)
    ids = np.asarray(classes)[rng.integers(len(classes), size=n)]
    return xyz, np.full((n, 3), 100, np.uint8), ids


def test_it_reads_ply_las_xyz_and_pcd_scans_and_names_their_classes_from_classes_json(tmp_path):
    build_labelled_rooms(tmp_path)
    lines = []
    scan_set = read_scan_set(tmp_path, log=lines.append)
    assert sorted(s.name for s in scan_set.scans) == ["room-1.ply", "room-2.las", "room-3.xyz", "room-4.pcd"]
    assert set(scan_set.class_names) <= {"floor", "wall", "ceiling", "furniture", "clutter"}
    assert {"floor", "wall", "furniture"} <= set(scan_set.class_names)
    sources = " ".join(lines)
    for where in ("scalar_Classification property", "classification", "room-3.labels", "label property"):
        assert where in sources
    assert scan_set.names_from == "classes.json"


def test_las_classes_get_their_asprs_names_and_unclassified_points_stay_unlabelled(tmp_path):
    for i in range(2):
        xyz, rgb, ids = cloud(i, classes=(1, 2, 6))
        write_las(tmp_path / f"tile-{i}.las", xyz, rgb, ids)
    scan_set = read_scan_set(tmp_path)
    assert set(scan_set.class_names) == {"ground", "building"}
    assert scan_set.names_from == "the ASPRS classes"
    scan = scan_set.scans[0]
    expected = (laspy.read(tmp_path / "tile-0.las").classification != 1).sum()
    assert scan.labelled == expected < len(scan)


def test_a_yaml_class_map_can_name_ids_and_leave_some_unlabelled(tmp_path):
    for i in range(2):
        write_cloudcompare_ply(tmp_path / f"s{i}.ply", *cloud(i, classes=(0, 1, 7)))
    (tmp_path / "classes.yaml").write_text("0: null\n1: pole\n7: tree\n")
    scan_set = read_scan_set(tmp_path)
    assert set(scan_set.class_names) == {"pole", "tree"}
    assert all(s.labelled < len(s) for s in scan_set.scans)


def test_a_scan_without_labels_is_refused_with_what_to_bring(tmp_path):
    xyz, _, _ = cloud(0)
    np.savetxt(tmp_path / "a.xyz", xyz, fmt="%.3f")
    np.savetxt(tmp_path / "b.xyz", xyz + 1, fmt="%.3f")
    with pytest.raises(JobError, match=r"a.xyz: no per-point labels found .*NAME.labels beside NAME.xyz"):
        read_scan_set(tmp_path)


def test_ids_the_class_map_does_not_name_are_refused(tmp_path):
    for i in range(2):
        write_cloudcompare_ply(tmp_path / f"s{i}.ply", *cloud(i, classes=(2, 3, 9)))
    (tmp_path / "classes.json").write_text(json.dumps({"2": "floor", "3": "wall"}))
    with pytest.raises(JobError, match=r"class ids 9 are not in classes.json"):
        read_scan_set(tmp_path)


def test_scans_of_one_class_only_are_refused(tmp_path):
    for i in range(2):
        write_cloudcompare_ply(tmp_path / f"s{i}.ply", *cloud(i, classes=(4,)))
    with pytest.raises(JobError, match="one class"):
        read_scan_set(tmp_path)


def test_a_scan_with_too_few_labelled_points_is_refused(tmp_path):
    write_cloudcompare_ply(tmp_path / "big.ply", *cloud(0))
    write_cloudcompare_ply(tmp_path / "tiny.ply", *cloud(1, n=20))
    with pytest.raises(JobError, match=r"tiny\.ply: only 20 labelled points"):
        read_scan_set(tmp_path)


def test_a_single_scan_is_refused_since_none_could_be_held_out(tmp_path):
    write_cloudcompare_ply(tmp_path / "only.ply", *cloud(0))
    with pytest.raises(JobError, match="one scan"):
        read_scan_set(tmp_path)


def test_a_label_file_with_another_count_than_the_cloud_is_refused(tmp_path):
    for name in ("a", "b"):
        xyz, _, ids = cloud(0)
        np.savetxt(tmp_path / f"{name}.xyz", xyz, fmt="%.3f")
        np.savetxt(tmp_path / f"{name}.labels", ids[:-5], fmt="%d")
    with pytest.raises(JobError, match=r"a.labels: holds 395 labels for a cloud of 400 points"):
        read_scan_set(tmp_path)


def test_the_split_follows_the_content_not_the_file_names_formats_or_order(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    for i in range(6):
        xyz, rgb, ids = cloud(i)
        write_cloudcompare_ply(first / f"scan-{i}.ply", xyz, rgb, ids)
        write_las(second / f"renamed-{5 - i}.las", xyz, rgb, ids)
    splits = []
    for root in (first, second):
        scans = read_scan_set(root).scans
        train, held = split_by_content(reversed(scans), 0.3)
        assert train and held and len(train) + len(held) == 6
        splits.append(sorted(s.digest for s in held))
    assert splits[0] == splits[1]


def _las_with_lookup(path, seed, lookups, *, compressed=False):
    """A LAS 1.4 (point format 6) whose user codes 64 and 65 are named only by a Classification
    Lookup VLR, as pointcloud-segment and other software write one."""
    xyz, _, ids = cloud(seed, classes=(64, 65, 1))
    header = laspy.LasHeader(point_format=6, version="1.4")
    header.scales, header.offsets = np.array([0.001] * 3), np.zeros(3)
    lookup = laspy.vlrs.known.ClassificationLookupVlr()
    lookup.lookups.update(lookups)
    header.vlrs.append(lookup)
    las = laspy.LasData(header)
    las.x, las.y, las.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    las.classification = ids.astype(np.uint8)
    las.write(path, do_compress=compressed)


@pytest.mark.parametrize("suffix", ["las", "laz"])
def test_a_las_names_its_own_codes_by_its_classification_lookup(tmp_path, suffix):
    for i in range(2):
        _las_with_lookup(
            tmp_path / f"tile-{i}.{suffix}",
            i,
            {64: "asphalt", 65: "road marking", 1: "lumped"},
            compressed=suffix == "laz",
        )
    lines = []
    scan_set = read_scan_set(tmp_path, log=lines.append)
    assert set(scan_set.class_names) == {"asphalt", "road marking"}
    assert "Classification Lookup" in " ".join(lines)
    scan = scan_set.scans[0]
    assert scan.labelled == (laspy.read(tmp_path / f"tile-0.{suffix}").classification != 1).sum()


def test_a_segmented_las_reads_back_under_the_names_it_was_written_with(tmp_path):
    from mlcore.pointcloud.io.las_out import _lookup_vlr

    xyz, _, _ = cloud(0, classes=(2,))
    for i in range(2):
        header = laspy.LasHeader(point_format=6, version="1.4")
        header.scales, header.offsets = np.array([0.001] * 3), np.zeros(3)
        las = laspy.LasData(header)
        las.x, las.y, las.z = xyz[:, 0] + i, xyz[:, 1], xyz[:, 2]
        labels = np.arange(len(xyz)) % 2
        codes = np.where(labels == 0, 64, 65)
        las.classification = codes.astype(np.uint8)
        las.vlrs.append(_lookup_vlr(codes, labels, ["curb/kerb", "pole-arm"], own=True))
        las.write(tmp_path / f"out-{i}.las")
    assert set(read_scan_set(tmp_path).class_names) == {"curb/kerb", "pole-arm"}
