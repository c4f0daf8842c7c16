"""Every point-cloud reader refuses a hostile or odd file with a message that names the real cause.

The files are made the way users make them (open3d writes PLY and PCD, laspy writes LAS and LAZ),
then edited byte by byte into what was found in the wild or built by hand: a 300-byte file that
declares a billion points is told that it declares more than it holds (never "downsample it"), a
count no file could hold is called invalid, the first bad line of a text cloud is named by its
number, a header cap is stated as a cap and a legal 1 MB comment header is read. No message names
the folder the file was in (on a worker, that is a temporary directory).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from mlcore.jobs.spec import JobError
from mlcore.pointcloud.io import read_cloud
from mlcore.pointcloud.io.cloud import MAX_HEADER_BYTES
from mlcore.sniff import require_format

o3d = pytest.importorskip("open3d")
laspy = pytest.importorskip("laspy")

BILLION = 10**9
U64_MAX = 2**64 - 1
CLOUD_FORMATS = ("ply", "pcd", "xyz", "las")


def refusal(path: Path, *fragments: str, max_points: int = 1_000_000) -> str:
    """The message ``read_cloud`` refuses ``path`` with; it names the file, holds each fragment, and
    neither its folder nor a limit unless the fragments ask for one."""
    with pytest.raises(JobError) as caught:
        read_cloud(path, max_points=max_points)
    message = str(caught.value)
    assert message.startswith(f"{path.name}: "), message
    assert str(path.parent) not in message and "/tmp" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    if not any("limit" in f for f in fragments):
        assert "limit" not in message and "ownsample" not in message, message
    return message


def xyz(n: int = 40, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3)).astype(np.float32)


def open3d_cloud(
    path: Path, *, ascii: bool = False, compressed: bool = False, points: np.ndarray | None = None
) -> Path:
    cloud = o3d.t.geometry.PointCloud(o3d.core.Tensor(xyz() if points is None else points))
    o3d.t.io.write_point_cloud(str(path), cloud, write_ascii=ascii, compressed=compressed)
    return path


def edited(path: Path, old: bytes, new: bytes) -> Path:
    data = path.read_bytes()
    assert old in data, old
    path.write_bytes(data.replace(old, new, 1))
    return path


def las_file(path: Path, n: int = 5, *, point_format: int = 3, version: str = "1.2") -> Path:
    las = laspy.LasData(laspy.LasHeader(point_format=point_format, version=version))
    las.x, las.y, las.z = np.arange(n, dtype=float), np.zeros(n), np.zeros(n)
    las.write(str(path))
    return path


def patched(path: Path, offset: int, fmt: str, value: int) -> Path:
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, offset, value)
    path.write_bytes(bytes(data))
    return path


# --- PLY ----------------------------------------------------------------------------------------


def test_a_300_byte_ply_declaring_a_billion_points_is_told_it_holds_300_bytes(tmp_path: Path) -> None:
    path = edited(
        open3d_cloud(tmp_path / "liar.ply", points=xyz(10)), b"element vertex 10", b"element vertex 1000000000"
    )
    assert path.stat().st_size < 300
    refusal(path, "declares 1,000,000,000 points × 12 bytes = 12,000,000,000 bytes", "holds 120 bytes")


def test_an_ascii_ply_declaring_a_billion_points_is_told_what_its_text_holds(tmp_path: Path) -> None:
    path = edited(open3d_cloud(tmp_path / "liar.ply", ascii=True), b"element vertex 40", b"element vertex 1000000000")
    refusal(
        path, "declares 1,000,000,000 points of 3 values, at least 6,000,000,000 bytes of text", "but the file holds"
    )


@pytest.mark.parametrize(
    ("count", "why"),
    [
        (str(U64_MAX), "more bytes than any file can hold"),
        ("99999999999999999999999999", "more bytes than any file can hold"),
        ("-5", "a count is a whole number"),
        ("1.5", "a count is a whole number"),
        ("1e9", "a count is a whole number"),
        ("many", "a count is a whole number"),
    ],
)
def test_a_ply_count_that_is_no_count_is_called_invalid(tmp_path: Path, count: str, why: str) -> None:
    path = edited(open3d_cloud(tmp_path / "odd.ply"), b"element vertex 40", f"element vertex {count}".encode())
    message = refusal(path, "header line 4: the count of element 'vertex' is", "which is invalid", why)
    assert "18,446,744,073,709,551,615" not in message


def test_a_ply_with_a_one_megabyte_comment_header_is_read(tmp_path: Path) -> None:
    comment = b"comment " + b"scanner provenance " * (2**20 // 19) + b"\n"
    path = edited(open3d_cloud(tmp_path / "long.ply"), b"element vertex", comment + b"element vertex")
    assert path.stat().st_size > 2**20
    np.testing.assert_array_equal(read_cloud(path, max_points=100).xyz, xyz())


def test_a_comment_that_mentions_end_header_does_not_end_the_header(tmp_path: Path) -> None:
    path = edited(open3d_cloud(tmp_path / "c.ply"), b"element vertex", b"comment then end_header\nelement vertex")
    assert len(read_cloud(path, max_points=100)) == 40


def test_a_ply_header_longer_than_the_cap_is_told_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "endless.ply"
    with path.open("wb") as f:
        f.write(b"ply\nformat binary_little_endian 1.0\n")
        line = b"comment " + b"x" * 1000 + b"\n"
        for _ in range(MAX_HEADER_BYTES // len(line) + 2):
            f.write(line)
    refusal(path, "the PLY header is longer than the 16 MiB this reader accepts")


def test_a_ply_header_cut_short_is_called_truncated(tmp_path: Path) -> None:
    path = tmp_path / "cut.ply"
    path.write_bytes(open3d_cloud(tmp_path / "whole.ply").read_bytes()[:60])
    refusal(path, "has no 'end_header' line: the file is truncated or not PLY")


def test_the_first_bad_line_of_an_ascii_ply_is_named_by_its_number(tmp_path: Path) -> None:
    path = open3d_cloud(tmp_path / "junk.ply", ascii=True)
    lines = path.read_bytes().split(b"\n")
    body = lines.index(b"end_header") + 1
    lines[body + 9] = b"hello"  # line body + 10 of the file, counting from 1
    path.write_bytes(b"\n".join(lines))
    refusal(path, f"line {body + 10}: expected 3 numbers (x y z), got 'hello'")


def test_an_ascii_ply_with_more_rows_than_declared_names_the_first_extra_row(tmp_path: Path) -> None:
    path = edited(open3d_cloud(tmp_path / "more.ply", ascii=True), b"element vertex 40", b"element vertex 39")
    body = path.read_bytes().split(b"\n").index(b"end_header") + 1
    refusal(path, f"line {body + 40}: the header declares 39 points, but the file holds more rows")


def test_a_binary_ply_with_bytes_after_its_points_says_the_count_is_wrong(tmp_path: Path) -> None:
    path = edited(open3d_cloud(tmp_path / "less.ply"), b"element vertex 40", b"element vertex 30")
    refusal(path, "declares 30 points × 12 bytes, but 120 more bytes follow", "vertex count is wrong")


def test_a_ply_mesh_is_refused_as_a_mesh(tmp_path: Path) -> None:
    mesh = o3d.geometry.TriangleMesh.create_box()
    o3d.io.write_triangle_mesh(str(tmp_path / "box.ply"), mesh)
    refusal(tmp_path / "box.ply", "this is a mesh (12 face records)", "Sample points")


def test_a_ply_with_nan_labels_is_not_told_its_labels_are_fractional(tmp_path: Path) -> None:
    path = tmp_path / "labels.ply"
    table = np.zeros(3, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("label", "<f4")])
    table["label"] = [0, np.nan, 1]
    header = "ply\nformat binary_little_endian 1.0\nelement vertex 3\n"
    header += "".join(f"property float {n}\n" for n in ("x", "y", "z", "label")) + "end_header\n"
    path.write_bytes(header.encode() + table.tobytes())
    refusal(path, "label property holds NaN or infinite values (the first at point 1)")


# --- PCD ----------------------------------------------------------------------------------------


def test_a_binary_pcd_declaring_a_billion_points_is_told_what_it_holds(tmp_path: Path) -> None:
    path = open3d_cloud(tmp_path / "liar.pcd")
    edited(edited(path, b"WIDTH 40", b"WIDTH 1000000000"), b"POINTS 40", b"POINTS 1000000000")
    refusal(path, "declares 1,000,000,000 points × 12 bytes = 12,000,000,000 bytes", "holds 480 bytes")


def test_an_ascii_pcd_declaring_a_billion_points_is_told_its_rows(tmp_path: Path) -> None:
    path = open3d_cloud(tmp_path / "liar.pcd", ascii=True)
    edited(edited(path, b"WIDTH 40", b"WIDTH 1000000000"), b"POINTS 40", b"POINTS 1000000000")
    refusal(path, "declares 1,000,000,000 points, but the file holds 40 rows of points")


def test_a_compressed_pcd_block_that_claims_more_than_lzf_can_unpack_is_a_lie(tmp_path: Path) -> None:
    path = open3d_cloud(tmp_path / "z.pcd", compressed=True, points=np.zeros((40, 3), np.float32))
    edited(edited(path, b"WIDTH 40", b"WIDTH 1000000"), b"POINTS 40", b"POINTS 1000000")
    data = path.read_bytes()
    at = data.index(b"DATA binary_compressed\n") + len(b"DATA binary_compressed\n")
    patched(path, at + 4, "<I", 12_000_000)
    refusal(path, "declares 1,000,000 points × 12 bytes = 12,000,000 bytes", "LZF expands at most 88×")


@pytest.mark.parametrize(
    ("points", "shown", "why"),
    [(str(U64_MAX), str(U64_MAX), "more bytes than any file"), ("-40", "'-40'", "whole number")],
)
def test_a_pcd_count_that_is_no_count_is_called_invalid(tmp_path: Path, points: str, shown: str, why: str) -> None:
    path = edited(open3d_cloud(tmp_path / "odd.pcd"), b"POINTS 40", f"POINTS {points}".encode())
    refusal(path, f"the PCD header's POINTS is {shown}, which is invalid", why)


def test_the_first_bad_line_of_an_ascii_pcd_is_named_by_its_number(tmp_path: Path) -> None:
    path = open3d_cloud(tmp_path / "junk.pcd", ascii=True)
    lines = path.read_bytes().split(b"\n")
    data = next(i for i, line in enumerate(lines) if line.startswith(b"DATA"))
    lines[data + 5] = b"1.0 2.0 oops"
    path.write_bytes(b"\n".join(lines))
    refusal(path, f"line {data + 6}: expected 3 numbers (x y z), got '1.0 2.0 oops'")


def test_a_pcd_header_longer_than_the_cap_is_told_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "endless.pcd"
    with path.open("wb") as f:
        f.write(b"# .PCD v0.7\nVERSION 0.7\nFIELDS x y z\n")
        line = b"# " + b"x" * 1000 + b"\n"
        for _ in range(MAX_HEADER_BYTES // len(line) + 2):
            f.write(line)
    refusal(path, "the PCD header is longer than the 16 MiB this reader accepts")


def test_a_pcd_with_a_100_kb_comment_header_is_read(tmp_path: Path) -> None:
    path = open3d_cloud(tmp_path / "long.pcd")
    edited(path, b"VERSION", b"# " + b"provenance " * 10_000 + b"\nVERSION")
    np.testing.assert_array_equal(read_cloud(path, max_points=100).xyz, xyz())


def test_a_pcd_header_cut_before_data_is_called_truncated(tmp_path: Path) -> None:
    path = tmp_path / "cut.pcd"
    data = open3d_cloud(tmp_path / "whole.pcd").read_bytes()
    path.write_bytes(data[: data.index(b"DATA")])
    refusal(path, "the PCD header ends without a DATA line: the file is truncated or not PCD")


# --- XYZ / PTS ----------------------------------------------------------------------------------


def xyz_text(rows: int = 40) -> list[str]:
    return [" ".join(f"{v:.6f}" for v in row) for row in xyz(rows)]


def test_an_xyz_file_with_a_junk_line_is_refused_for_that_line_not_as_a_txt_file(tmp_path: Path) -> None:
    lines = xyz_text()
    lines[16] = "hello"
    path = tmp_path / "scan.xyz"
    path.write_text("\n".join(lines) + "\n")
    message = refusal(path, "line 17", "expected 3 numbers", "'hello'")
    assert "txt" not in message
    # The same file as a job upload: the refusal names the line too, not "got a txt file".
    with pytest.raises(JobError) as caught:
        require_format(path, CLOUD_FORMATS, label="Cloud (scan.xyz)")
    assert "line 17" in str(caught.value) and "'hello'" in str(caught.value), caught.value
    assert "a txt file" not in str(caught.value)


def test_a_junk_line_past_the_sniffed_head_is_named_by_the_line_check(tmp_path: Path) -> None:
    lines = xyz_text(400)
    lines[299] = "1.0 2.0"
    path = tmp_path / "late.xyz"
    path.write_text("\n".join(lines) + "\n")
    refusal(path, "line 300: expected 3 numbers (x y z), got '1.0 2.0'")


def test_an_xyz_header_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "header.xyz"
    path.write_text("X Y Z\n" + "\n".join(xyz_text()) + "\n")
    refusal(path, "line 1 is not: expected 3 numbers, got 'X Y Z'")


def test_comma_separated_coordinates_are_told_to_use_spaces(tmp_path: Path) -> None:
    path = tmp_path / "commas.txt"
    path.write_text("\n".join(line.replace(" ", ",") for line in xyz_text()) + "\n")
    refusal(path, "comma- or semicolon-separated values (line 1:", "separates numbers with spaces")


def test_rows_of_four_numbers_without_a_pts_count_are_told_the_columns_we_read(tmp_path: Path) -> None:
    path = tmp_path / "four.txt"
    path.write_text("\n".join(f"{line} 7" for line in xyz_text()) + "\n")
    refusal(path, "holds lines of 4 numbers", "XYZ (3 numbers per line")


def test_a_pts_declaring_a_billion_points_is_told_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "liar.pts"
    path.write_text("1000000000\n" + "\n".join(f"{line} 5" for line in xyz_text()) + "\n")
    refusal(path, "declares 1,000,000,000 points, but the file holds 40 rows of points")


@pytest.mark.parametrize("count", ["-3", "forty", str(U64_MAX) + "0"])
def test_a_pts_count_that_is_no_count_is_called_invalid(tmp_path: Path, count: str) -> None:
    path = tmp_path / "odd.pts"
    path.write_text(f"{count}\n" + "\n".join(f"{line} 5" for line in xyz_text()) + "\n")
    refusal(path, "point count", "which is invalid", "whole number" if count in ("-3", "forty") else "any file")


# --- LAS / LAZ ----------------------------------------------------------------------------------


def test_a_small_las_declaring_a_billion_points_is_told_what_it_holds(tmp_path: Path) -> None:
    path = patched(las_file(tmp_path / "liar.las"), 107, "<I", BILLION)
    assert path.stat().st_size < 400
    refusal(path, "declares 1,000,000,000 points × 34 bytes = 34,000,000,000 bytes", "holds 170 bytes")


def test_a_las_14_count_of_two_to_the_64_minus_one_is_invalid(tmp_path: Path) -> None:
    path = patched(las_file(tmp_path / "odd.las", point_format=7, version="1.4"), 247, "<Q", U64_MAX)
    message = refusal(path, "the header's point count is 18446744073709551615, which is invalid", "any file")
    assert "18,446,744,073,709,551,615" not in message


def test_a_small_laz_declaring_a_billion_points_is_told_what_it_holds(tmp_path: Path) -> None:
    path = patched(las_file(tmp_path / "liar.laz"), 107, "<I", BILLION)
    refusal(path, "declares 1,000,000,000 points, compressed in chunks of 50,000", "at least 680,000 bytes")


def test_a_las_record_length_shorter_than_its_format_is_named(tmp_path: Path) -> None:
    path = patched(las_file(tmp_path / "short.las"), 105, "<H", 10)
    refusal(path, "point record length 10 is shorter than format 3 needs (34)")


def test_a_las_header_size_that_cannot_be_is_named(tmp_path: Path) -> None:
    path = patched(las_file(tmp_path / "head.las"), 94, "<H", 10)
    refusal(path, "the LAS header says it is 10 bytes long")


def test_a_truncated_laz_names_no_server_path(tmp_path: Path) -> None:
    path = las_file(tmp_path / "cut.laz", n=120_000)
    path.write_bytes(path.read_bytes()[:-200])
    refusal(path, "the LAZ point data cannot be read", "truncated or corrupt")


def test_a_real_cloud_over_the_limit_is_still_told_the_limit(tmp_path: Path) -> None:
    refusal(open3d_cloud(tmp_path / "big.pcd"), "40 points is more than the limit of 10", max_points=10)
    refusal(las_file(tmp_path / "big.las", n=40), "40 points is more than the limit of 10", max_points=10)
