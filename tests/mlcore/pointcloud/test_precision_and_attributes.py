"""Full precision in and out (georeferenced scans keep their millimetres), attributes normalised by
meaning, a labelled LAS/LAZ out of a LAS/LAZ in, E57 refused, and the coarse taxonomy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlcore.jobs.spec import JobError
from mlcore.pointcloud.io import read_cloud, write_ply
from mlcore.pointcloud.io.las_out import CLASS_FIELD, write_labelled_las
from mlcore.pointcloud.labels import ASPRS_CODE, COARSE, COARSE_OF, DATASET_COARSE, LABELS, scene_labels

laspy = pytest.importorskip("laspy")
from bench.pointcloud_encodings import Scene, write_las, write_ply_big_endian_double  # noqa: E402

UTM = np.array([512_000.0, 5_400_000.0, 300.0])


def utm_scene(n: int = 2000, seed: int = 0) -> Scene:
    """A 60 m × 40 m patch at UTM coordinates, millimetre multiples as a scanner exports them."""
    rng = np.random.default_rng(seed)
    local = np.round(rng.random((n, 3)) * [60.0, 40.0, 8.0], 3)
    return Scene(
        xyz=local,
        rgb=rng.integers(0, 256, (n, 3), dtype=np.uint8),
        intensity=rng.random(n).astype(np.float32),
        labels=rng.integers(0, len(LABELS), n).astype(np.int32),
    )


def test_a_utm_sized_big_endian_double_ply_round_trips_to_the_millimetre(tmp_path: Path) -> None:
    scene = utm_scene()
    world = Scene(scene.xyz + UTM, scene.rgb, scene.intensity, scene.labels)
    path = tmp_path / "utm.ply"
    write_ply_big_endian_double(world, path)
    cloud = read_cloud(path, max_points=10**6)
    assert cloud.offset.any() and np.abs(cloud.xyz).max() < 100  # local float32 coordinates
    assert np.abs(cloud.world() - world.xyz).max() <= 1e-3
    # The labelled output is written in double at the input's coordinates.
    out = write_ply(tmp_path / "out.ply", cloud.xyz, labels=scene.labels, offset=cloud.offset)
    back = read_cloud(out, max_points=10**6)
    assert np.abs(back.world() - world.xyz).max() <= 1e-3
    np.testing.assert_array_equal(back.labels, scene.labels)


def test_a_utm_sized_las_1_4_round_trips_to_the_millimetre_and_keeps_its_offsets(tmp_path: Path) -> None:
    scene = utm_scene()
    path = tmp_path / "utm.las"
    write_las(scene, path, version="1.4", point_format=6, shift=UTM)
    cloud = read_cloud(path, max_points=10**6)
    assert cloud.format == "las" and np.abs(cloud.world() - (scene.xyz + UTM)).max() <= 1e-3
    # Casting to float32 before subtracting an offset would have moved y by up to 0.25 m.
    assert np.abs(cloud.xyz.astype(np.float64) + cloud.offset - (scene.xyz + UTM)).max() <= 1e-3


@pytest.mark.parametrize("suffix", [".las", ".laz"])
def test_a_labelled_las_keeps_every_field_scale_offset_and_vlr_and_sets_asprs_codes(
    tmp_path: Path, suffix: str
) -> None:
    from laspy.vlrs.known import WktCoordinateSystemVlr

    scene = utm_scene(500)
    header = laspy.LasHeader(point_format=7, version="1.4")
    header.scales = np.array([0.001, 0.001, 0.01])
    header.offsets = UTM.copy()
    header.vlrs.append(WktCoordinateSystemVlr('PROJCS["WGS 84 / UTM zone 32N"]'))
    header.add_extra_dim(laspy.ExtraBytesParams(name="range", type=np.float32))
    las = laspy.LasData(header)
    las.x, las.y, las.z = (scene.xyz + UTM).T
    las.red, las.green, las.blue = (scene.rgb[:, k].astype(np.uint16) * 257 for k in range(3))
    las.intensity = np.arange(500, dtype=np.uint16) * 100
    las.gps_time = np.linspace(0, 1, 500)
    las["range"] = np.linspace(1, 50, 500).astype(np.float32)
    source = tmp_path / f"in{suffix}"
    las.write(str(source))
    labels = np.arange(500) % len(LABELS)
    out, counts = write_labelled_las(source, tmp_path / f"out{suffix}", labels)
    back = laspy.read(str(out))
    assert (back.header.version.major, back.header.version.minor) == (1, 4) and back.header.point_format.id == 7
    np.testing.assert_array_equal(back.header.scales, header.scales)
    np.testing.assert_array_equal(back.header.offsets, header.offsets)
    for name in ("X", "Y", "Z", "red", "green", "blue", "intensity", "gps_time", "range"):
        np.testing.assert_array_equal(np.asarray(back[name]), np.asarray(las[name]), err_msg=name)
    assert any(v.record_id == 2112 and "UTM zone 32N" in v.string for v in back.vlrs if hasattr(v, "string"))
    np.testing.assert_array_equal(np.asarray(back[CLASS_FIELD]), labels)
    codes = np.asarray(back.classification)
    assert (codes[labels == LABELS.index("building")] == 6).all()
    assert (codes[labels == LABELS.index("road")] == 11).all()
    assert (codes[labels == LABELS.index("car")] == 64 + LABELS.index("car")).all()  # a user code in format 7
    assert sum(counts.values()) == 500
    if suffix == ".laz":
        assert out.read_bytes()[104] & 0x80  # compressed


def test_a_las_1_2_gets_unclassified_for_classes_asprs_has_no_code_for(tmp_path: Path) -> None:
    scene = utm_scene(100)
    write_las(scene, tmp_path / "in.las", version="1.2", point_format=3, shift=np.zeros(3))
    labels = np.full(100, LABELS.index("car"))
    labels[:10] = LABELS.index("floor")
    out, counts = write_labelled_las(tmp_path / "in.las", tmp_path / "out.las", labels)
    assert counts == {1: 90, ASPRS_CODE["floor"]: 10}
    assert read_cloud(out, max_points=1000).label_field == "classification"


def test_las_intensity_and_colour_are_scaled_by_their_bit_depth(tmp_path: Path) -> None:
    scene = utm_scene(300)
    for bits, top in ((8, 255), (12, 4095), (16, 65535)):
        header = laspy.LasHeader(point_format=3, version="1.2")
        las = laspy.LasData(header)
        las.x, las.y, las.z = scene.xyz.T
        las.intensity = np.linspace(0, top, 300).astype(np.uint16)
        # 8-bit colours stored in the 16-bit fields (a common exporter habit) and proper 16-bit ones.
        scale = 1 if bits == 8 else 257
        las.red, las.green, las.blue = (scene.rgb[:, k].astype(np.uint16) * scale for k in range(3))
        las.write(str(tmp_path / f"b{bits}.las"))
        cloud = read_cloud(tmp_path / f"b{bits}.las", max_points=1000)
        assert cloud.intensity is not None and cloud.intensity.max() == pytest.approx(1.0)
        np.testing.assert_array_equal(cloud.rgb, scene.rgb)
        assert any(what == "intensity" and f"{bits}-bit" in note for what, note in cloud.notes)


def test_a_ply_intensity_of_unknown_range_is_scaled_robustly_and_says_so(tmp_path: Path) -> None:
    xyz = np.random.default_rng(0).random((1000, 3)).astype(np.float32)
    raw = np.linspace(-2048, 2047, 1000).astype(np.float32)
    raw[0] = 1e6  # one wild value does not squash the rest
    cloud = read_cloud(write_ply(tmp_path / "i.ply", xyz, intensity=raw), max_points=10**4)
    assert cloud.intensity is not None and cloud.intensity.min() >= 0 and cloud.intensity.max() <= 1
    assert np.median(cloud.intensity) == pytest.approx(0.5, abs=0.02)
    assert any("robust" in note for _, note in cloud.notes)


def test_an_e57_file_is_refused_with_how_to_convert_it(tmp_path: Path) -> None:
    path = tmp_path / "scan.e57"
    path.write_bytes(b"ASTM-E57" + bytes(2000))
    with pytest.raises(JobError) as caught:
        read_cloud(path, max_points=100)
    assert str(caught.value).startswith("scan.e57: E57") and "LAZ" in str(caught.value)


def test_the_readers_expose_the_files_class_field_and_name_it(tmp_path: Path) -> None:
    xyz = np.random.default_rng(0).random((50, 3)).astype(np.float32)
    cloud = read_cloud(write_ply(tmp_path / "l.ply", xyz, labels=np.arange(50) % 3), max_points=100)
    assert cloud.label_field == "label" and cloud.labels is not None
    assert read_cloud(write_ply(tmp_path / "n.ply", xyz), max_points=100).label_field is None


def test_every_class_has_a_coarse_class_and_every_dataset_a_mapping() -> None:
    assert set(COARSE_OF) == set(LABELS) and set(COARSE_OF.values()) <= set(COARSE)
    from mlcore.pointcloud.datasets import DATASETS

    for name, spec in DATASETS.items():
        assert set(DATASET_COARSE[name]) == set(spec.classes), name
    assert COARSE_OF["floor"] == "ground" and "road" not in scene_labels("indoor")
    from mlcore.pointcloud.scenes import INDOOR, OUTDOOR

    assert scene_labels("indoor") == INDOOR and scene_labels("outdoor") == OUTDOOR
