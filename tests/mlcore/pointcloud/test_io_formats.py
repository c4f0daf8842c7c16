"""PCD, XYZ/XYZRGB/PTS (open3d after our checks) and LAS/LAZ (laspy after our checks): round trips,
format sniffing from content, and the lies and truncations open3d and laspy would not notice."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from mlcore.jobs.spec import JobError
from mlcore.pointcloud.io import read_cloud, sniff_cloud, write_ply
from mlcore.sniff import require_format, sniff

o3d = pytest.importorskip("open3d")
laspy = pytest.importorskip("laspy")


def points(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.random((n, 3)) * 10 - 5).astype(np.float32), rng.integers(0, 256, (n, 3), dtype=np.uint8)


def write_pcd(path: Path, *, ascii: bool, compressed: bool = False, n: int = 40, intensity: bool = True) -> Path:
    xyz, rgb = points(n)
    cloud = o3d.t.geometry.PointCloud(o3d.core.Tensor(xyz))
    cloud.point.colors = o3d.core.Tensor(rgb.astype(np.float32) / 255.0)
    if intensity:
        cloud.point.intensity = o3d.core.Tensor(np.arange(n, dtype=np.float32)[:, None])
    o3d.t.io.write_point_cloud(str(path), cloud, write_ascii=ascii, compressed=compressed)
    return path


def write_text(path: Path, rows: np.ndarray, header: str | None = None, fmt: str = "%.6f") -> Path:
    body = "\n".join(" ".join(fmt % v for v in row) for row in rows) + "\n"
    path.write_text((header + "\n" if header else "") + body)
    return path


def write_las(path: Path, *, point_format: int = 3, n: int = 40, classes: bool = True) -> Path:
    xyz, rgb = points(n)
    header = laspy.LasHeader(point_format=point_format, version="1.4" if point_format >= 6 else "1.2")
    header.scales = np.array([0.001, 0.001, 0.001])
    header.offsets = np.zeros(3)
    las = laspy.LasData(header)
    las.x, las.y, las.z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    if point_format in (2, 3, 5, 7, 8, 10):
        las.red, las.green, las.blue = (rgb[:, k].astype(np.uint16) * 257 for k in range(3))
    las.intensity = np.arange(n, dtype=np.uint16)
    las.classification = (np.arange(n) % 5 if classes else np.ones(n)).astype(np.uint8)
    las.write(str(path))
    return path


def assert_robustly_scaled(intensity: np.ndarray, raw: np.ndarray) -> None:
    """An intensity of unknown range comes back in [0, 1], its 1st-99th percentile stretched, order kept."""
    lo, hi = np.percentile(raw, [1, 99])
    np.testing.assert_allclose(intensity, np.clip((raw - lo) / (hi - lo), 0, 1), atol=1e-6)


def message(path: Path, max_points: int = 1_000_000) -> str:
    with pytest.raises(JobError) as caught:
        read_cloud(path, max_points=max_points)
    text = str(caught.value)
    assert text.startswith(f"{path.name}:"), text
    return text


# --- PCD ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ascii", "compressed"), [(True, False), (False, False), (False, True)])
def test_a_pcd_round_trips_in_every_data_mode(tmp_path: Path, ascii: bool, compressed: bool) -> None:
    path = write_pcd(tmp_path / "c.pcd", ascii=ascii, compressed=compressed)
    cloud = read_cloud(path, max_points=100)
    xyz, rgb = points()
    np.testing.assert_allclose(cloud.xyz, xyz, atol=1e-5)
    np.testing.assert_array_equal(cloud.rgb, rgb)
    assert_robustly_scaled(cloud.intensity, np.arange(40))
    assert sniff_cloud(path) == "pcd" and sniff(path) == "pcd"


def test_a_truncated_binary_pcd_is_refused_before_open3d_sees_it(tmp_path: Path) -> None:
    path = write_pcd(tmp_path / "cut.pcd", ascii=False)
    path.write_bytes(path.read_bytes()[:-10])
    assert "truncated or its header lies" in message(path)


def test_a_pcd_whose_width_and_height_disagree_with_points_is_refused(tmp_path: Path) -> None:
    path = write_pcd(tmp_path / "lie.pcd", ascii=True)
    path.write_bytes(path.read_bytes().replace(b"WIDTH 40", b"WIDTH 41"))
    assert "WIDTH 41" in message(path)


def test_a_pcd_claiming_more_points_than_lines_is_refused(tmp_path: Path) -> None:
    path = write_pcd(tmp_path / "more.pcd", ascii=True)
    path.write_bytes(path.read_bytes().replace(b"WIDTH 40", b"WIDTH 45").replace(b"POINTS 40", b"POINTS 45"))
    assert "declares 45 points, but the file holds 40 rows of points" in message(path)


def test_a_lying_compressed_pcd_block_is_refused(tmp_path: Path) -> None:
    path = write_pcd(tmp_path / "z.pcd", ascii=False, compressed=True)
    data = path.read_bytes()
    at = data.index(b"DATA binary_compressed\n") + len(b"DATA binary_compressed\n")
    compressed, uncompressed = struct.unpack("<II", data[at : at + 8])
    path.write_bytes(data[:at] + struct.pack("<II", compressed + 10_000, uncompressed) + data[at + 8 :])
    assert "compressed block" in message(path)


def test_a_pcd_with_a_nan_coordinate_is_refused(tmp_path: Path) -> None:
    path = write_pcd(tmp_path / "nan.pcd", ascii=True, intensity=False)
    lines = path.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("DATA")) + 1
    lines[first + 2] = "nan " + lines[first + 2].split(" ", 1)[1]
    path.write_text("\n".join(lines) + "\n")
    assert "NaN or infinite" in message(path)


def test_a_pcd_with_zero_points_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "zero.pcd"
    path.write_text(
        "# .PCD v0.7\nVERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F "
        "F F\nCOUNT 1 1 1\nWIDTH 0\nHEIGHT 1\nPOINTS 0\nDATA ascii\n"
    )
    assert "no points" in message(path)


def test_a_pcd_without_coordinates_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "noxyz.pcd"
    path.write_text(
        "VERSION 0.7\nFIELDS a b\nSIZE 4 4\nTYPE F F\nCOUNT 1 1\nWIDTH 1\nHEIGHT 1\nPOINTS 1\nDATA ascii\n1 2\n"
    )
    assert "no x, y and z" in message(path)


# --- XYZ / XYZRGB / PTS ------------------------------------------------------------------------


def test_xyz_and_xyzrgb_text_round_trip(tmp_path: Path) -> None:
    xyz, rgb = points()
    plain = read_cloud(write_text(tmp_path / "a.xyz", xyz), max_points=100)
    np.testing.assert_allclose(plain.xyz, xyz, atol=1e-5)
    assert plain.rgb is None
    coloured = read_cloud(write_text(tmp_path / "a.txt", np.hstack([xyz, rgb / 255.0])), max_points=100)
    np.testing.assert_allclose(coloured.xyz, xyz, atol=1e-5)
    np.testing.assert_array_equal(coloured.rgb, rgb)
    assert sniff_cloud(tmp_path / "a.txt") == "xyzrgb" and sniff(tmp_path / "a.txt") == "xyz"


def test_a_pts_file_round_trips_with_intensity_and_colour(tmp_path: Path) -> None:
    xyz, rgb = points()
    rows = np.hstack([xyz, np.arange(40)[:, None], rgb])
    cloud = read_cloud(write_text(tmp_path / "a.pts", rows, header="40", fmt="%.6g"), max_points=100)
    np.testing.assert_allclose(cloud.xyz, xyz, atol=1e-4)
    np.testing.assert_array_equal(cloud.rgb, rgb)
    assert_robustly_scaled(cloud.intensity, np.arange(40))


def test_a_pts_count_that_lies_is_refused_instead_of_zero_padded(tmp_path: Path) -> None:
    # open3d alone pads the missing points with zeros; the check stops the file first.
    xyz, rgb = points()
    path = write_text(tmp_path / "lie.pts", np.hstack([xyz, np.zeros((40, 1)), rgb]), header="90", fmt="%.6g")
    assert "declares 90 points, but the file holds 40 rows of points" in message(path)


def test_a_truncated_xyz_line_is_refused(tmp_path: Path) -> None:
    xyz, _ = points()
    path = write_text(tmp_path / "cut.xyz", xyz)
    path.write_bytes(path.read_bytes()[:-12])
    assert "line 40: expected 3 numbers (x y z), got '" in message(path)


def test_an_xyz_file_with_infinite_coordinates_is_refused(tmp_path: Path) -> None:
    xyz, _ = points()
    xyz[5, 2] = np.inf
    assert "NaN or infinite" in message(write_text(tmp_path / "inf.xyz", xyz))


def test_too_many_text_points_are_refused(tmp_path: Path) -> None:
    xyz, _ = points()
    assert "more than the limit of 10" in message(write_text(tmp_path / "big.xyz", xyz), max_points=10)


# --- LAS / LAZ ---------------------------------------------------------------------------------


@pytest.mark.parametrize("point_format", [0, 1, 2, 3, 6, 7])
def test_las_point_formats_round_trip(tmp_path: Path, point_format: int) -> None:
    path = write_las(tmp_path / "a.las", point_format=point_format)
    cloud = read_cloud(path, max_points=100)
    xyz, rgb = points()
    np.testing.assert_allclose(cloud.xyz, xyz, atol=1e-3)
    # Intensities 0-39 are 8-bit values (the specification's 16 bits are not used): divided by 255.
    np.testing.assert_allclose(cloud.intensity, np.arange(40) / 255, rtol=1e-6)
    np.testing.assert_array_equal(cloud.labels, np.arange(40) % 5)
    assert cloud.label_field == "classification"
    if point_format in (2, 3, 7):
        np.testing.assert_array_equal(cloud.rgb, rgb)
    else:
        assert cloud.rgb is None
    assert sniff_cloud(path) == "las" and sniff(path) == "las"


def test_a_laz_file_round_trips(tmp_path: Path) -> None:
    path = write_las(tmp_path / "a.laz")
    assert sniff_cloud(path) == "laz" and sniff(path) == "las"
    cloud = read_cloud(path, max_points=100)
    np.testing.assert_allclose(cloud.xyz, points()[0], atol=1e-3)


def test_unclassified_las_points_carry_no_labels(tmp_path: Path) -> None:
    assert read_cloud(write_las(tmp_path / "u.las", classes=False), max_points=100).labels is None


def test_a_las_with_an_undefined_point_format_is_refused(tmp_path: Path) -> None:
    path = write_las(tmp_path / "odd.las")
    data = bytearray(path.read_bytes())
    data[104] = 42
    path.write_bytes(bytes(data))
    assert "point data record format 42" in message(path)


def test_a_truncated_las_is_refused(tmp_path: Path) -> None:
    path = write_las(tmp_path / "cut.las")
    path.write_bytes(path.read_bytes()[:-100])
    assert "truncated or its header lies" in message(path)


def test_a_truncated_las_header_is_refused(tmp_path: Path) -> None:
    path = write_las(tmp_path / "head.las")
    path.write_bytes(path.read_bytes()[:150])
    assert "header is truncated" in message(path)


def test_a_truncated_laz_is_refused(tmp_path: Path) -> None:
    path = write_las(tmp_path / "cut.laz", n=2000)
    path.write_bytes(path.read_bytes()[:-3000])
    assert "truncated or corrupt" in message(path)


def test_a_las_with_too_many_points_is_refused(tmp_path: Path) -> None:
    assert "more than the limit of 10" in message(write_las(tmp_path / "big.las"), max_points=10)


# --- anything else -----------------------------------------------------------------------------


def test_a_file_that_is_no_point_cloud_is_refused_with_the_formats_we_read(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello, world\n")
    assert "PLY" in message(path) and "LAZ" in message(path)


def test_upload_sniffing_accepts_point_cloud_formats_by_content(tmp_path: Path) -> None:
    xyz, rgb = points()
    named_wrong = write_ply(tmp_path / "cloud.txt", xyz, rgb=rgb)
    assert require_format(named_wrong, ("ply", "pcd", "xyz", "las"), label="cloud") == "ply"
    words = tmp_path / "words.txt"
    words.write_text("three little words\n")
    assert sniff(words) == "txt"
    with pytest.raises(JobError, match="expected ply or pcd or xyz or las"):
        require_format(words, ("ply", "pcd", "xyz", "las"), label="cloud")


def test_sniffing_an_upload_in_the_web_process_imports_neither_torch_nor_open3d(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = write_pcd(tmp_path / "c.pcd", ascii=False)
    code = (
        "import sys; from pathlib import Path; from mlcore.sniff import sniff; "
        f"assert sniff(Path({str(path)!r})) == 'pcd'; "
        "heavy = [m for m in ('torch', 'open3d', 'laspy') if m in sys.modules]; assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42\n", "txt"),
        ("1 2\n3 4\n", "txt"),
        ("x y z\n1 2 3\n", "txt"),
        ("1,2,3\n4,5,6\n", "csv"),
        ("1 2 3\n4 5 6\n", "xyz"),
        ("2\n1 2 3 4\n5 6 7 8\n", "xyz"),
    ],
)
def test_only_text_that_is_rows_of_coordinates_sniffs_as_xyz(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "upload"
    path.write_text(text)
    assert sniff(path) == expected
