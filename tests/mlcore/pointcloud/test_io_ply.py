"""The PLY reader and writer: round trips in every encoding, and every bad input refused with a
message that names the file and the fault, before anything large is allocated."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from mlcore.jobs.spec import JobError
from mlcore.pointcloud.io import MAX_POINTS, read_cloud, read_header, write_ply
from mlcore.pointcloud.render import palette

ENDIAN = {"binary_little_endian": "<", "binary_big_endian": ">"}


def ply_file(
    path: Path,
    columns: dict[str, np.ndarray],
    *,
    fmt: str = "binary_little_endian",
    types: dict[str, str] | None = None,
    count: int | None = None,
    extra_header: str = "",
    tail: bytes = b"",
) -> Path:
    """Write a PLY of ``columns`` (name -> values) in ``fmt``; ``count`` may lie about the rows."""
    types = types or {}
    names = list(columns)
    n = len(columns[names[0]])
    ply_types = {name: types.get(name, "float" if columns[name].dtype.kind == "f" else "uchar") for name in names}
    codes = {"float": "f4", "double": "f8", "uchar": "u1", "int": "i4", "ushort": "u2", "short": "i2"}
    header = ["ply", f"format {fmt} 1.0", f"element vertex {n if count is None else count}"]
    header += [f"property {ply_types[name]} {name}" for name in names]
    header += [extra_header] if extra_header else []
    header.append("end_header")
    body: bytes
    if fmt == "ascii":
        rows = zip(*(columns[name].tolist() for name in names), strict=True)
        body = "".join(
            " ".join(repr(v) if isinstance(v, float) else str(v) for v in row) + "\n" for row in rows
        ).encode()
    else:
        dtype = np.dtype([(name, ENDIAN[fmt] + codes[ply_types[name]]) for name in names])
        table = np.empty(n, dtype=dtype)
        for name in names:
            table[name] = columns[name]
        body = table.tobytes()
    path.write_bytes(("\n".join(header) + "\n").encode() + body + tail)
    return path


def sample_columns(n: int = 50, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    xyz = (rng.normal(size=(n, 3)) * 5).astype(np.float32)
    rgb = rng.integers(0, 256, size=(n, 3), dtype=np.uint8)
    return {
        "x": xyz[:, 0], "y": xyz[:, 1], "z": xyz[:, 2],
        "red": rgb[:, 0], "green": rgb[:, 1], "blue": rgb[:, 2],
        "intensity": rng.random(n).astype(np.float32),
        "label": rng.integers(0, 7, size=n).astype(np.int32),
    }  # fmt: skip


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
def test_it_reads_every_ply_encoding_back_exactly(tmp_path: Path, fmt: str) -> None:
    columns = sample_columns()
    path = ply_file(tmp_path / "cloud.ply", columns, fmt=fmt, types={"label": "int"})
    cloud = read_cloud(path, max_points=1000)
    assert cloud.xyz.dtype == np.float32 and cloud.xyz.shape == (50, 3)
    np.testing.assert_array_equal(cloud.xyz, np.stack([columns["x"], columns["y"], columns["z"]], axis=1))
    np.testing.assert_array_equal(cloud.rgb, np.stack([columns["red"], columns["green"], columns["blue"]], axis=1))
    np.testing.assert_array_equal(cloud.intensity, columns["intensity"])
    np.testing.assert_array_equal(cloud.labels, columns["label"])


def test_it_reads_double_coordinates_and_float_colours(tmp_path: Path) -> None:
    columns = {"x": np.array([1.5, 2.0]), "y": np.array([0.0, -1.0]), "z": np.array([3.0, 4.0]),
               "red": np.array([0.0, 1.0], dtype=np.float32), "green": np.array([0.5, 0.25], dtype=np.float32),
               "blue": np.array([1.0, 0.0], dtype=np.float32)}  # fmt: skip
    path = ply_file(tmp_path / "d.ply", columns, types={"x": "double", "y": "double", "z": "double"})
    cloud = read_cloud(path, max_points=10)
    np.testing.assert_array_equal(cloud.xyz, [[1.5, 0.0, 3.0], [2.0, -1.0, 4.0]])
    np.testing.assert_array_equal(cloud.rgb, [[0, 128, 255], [255, 64, 0]])
    assert cloud.labels is None and cloud.intensity is None


def test_a_labelled_ply_round_trips_with_labels_input_colours_and_legend(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    xyz = rng.random((200, 3)).astype(np.float32)
    rgb = rng.integers(0, 256, (200, 3), dtype=np.uint8)
    labels = rng.integers(0, 4, 200).astype(np.int32)
    path = write_ply(
        tmp_path / "out.ply", xyz, rgb=rgb, labels=labels, label_names=["wall", "floor", "chair", "road sign"]
    )
    cloud = read_cloud(path, max_points=1000)
    np.testing.assert_array_equal(cloud.xyz, xyz)
    np.testing.assert_array_equal(cloud.rgb, rgb)  # the input colours, kept as input_*
    np.testing.assert_array_equal(cloud.labels, labels)
    header = read_header(path)
    assert header.format == "binary_little_endian"
    colors = palette(4)
    assert f"moelab label 3 {colors[3][0]} {colors[3][1]} {colors[3][2]} road sign" in header.comments
    # The plain red/green/blue are the label colours, so any viewer shows the segmentation.
    table = np.fromfile(path, offset=header.length, dtype=np.dtype(
        [("xyz", "<f4", 3), ("rgb", "u1", 3), ("input", "u1", 3), ("label", "<i4")]))  # fmt: skip
    np.testing.assert_array_equal(table["rgb"], colors[labels])
    assert not list(tmp_path.glob(".*partial"))


def test_label_colours_never_come_back_as_input_colours(tmp_path: Path) -> None:
    xyz = np.random.default_rng(2).random((20, 3)).astype(np.float32)
    path = write_ply(tmp_path / "labels-only.ply", xyz, labels=np.arange(20) % 3)
    cloud = read_cloud(path, max_points=100)
    assert cloud.rgb is None
    np.testing.assert_array_equal(cloud.labels, np.arange(20) % 3)


def test_an_unlabelled_write_keeps_plain_colours(tmp_path: Path) -> None:
    xyz = np.zeros((3, 3), np.float32) + np.arange(3, dtype=np.float32)[:, None]
    rgb = np.array([[1, 2, 3], [4, 5, 6], [7, 8, 9]], np.uint8)
    cloud = read_cloud(write_ply(tmp_path / "plain.ply", xyz, rgb=rgb, intensity=np.ones(3)), max_points=10)
    np.testing.assert_array_equal(cloud.rgb, rgb)
    np.testing.assert_array_equal(cloud.intensity, np.ones(3, np.float32))
    assert cloud.labels is None


def expect_error(path: Path, *fragments: str, max_points: int = MAX_POINTS) -> str:
    with pytest.raises(JobError) as caught:
        read_cloud(path, max_points=max_points)
    message = str(caught.value)
    assert message.startswith(f"{path.name}:"), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_a_binary_ply_claiming_a_billion_vertices_fails_fast_without_allocating(tmp_path: Path) -> None:
    path = ply_file(tmp_path / "liar.ply", sample_columns(10), count=10**9)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        # The file lies; it is not "too big", so the limit is not what it is told.
        message = expect_error(path, "declares 1,000,000,000 points × 20 bytes", "holds 200 bytes")
        assert "limit" not in message and "ownsample" not in message
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - started < 1.0
    assert peak < 2 * 2**20, f"peak {peak} bytes"


def test_a_binary_ply_claiming_more_vertices_than_bytes_fails_before_allocating(tmp_path: Path) -> None:
    path = ply_file(tmp_path / "short.ply", sample_columns(10), count=5_000_000)
    tracemalloc.start()
    try:
        expect_error(path, "5,000,000 points", "truncated or its header lies")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * 2**20, f"peak {peak} bytes"


def test_a_truncated_binary_body_is_refused(tmp_path: Path) -> None:
    path = ply_file(tmp_path / "cut.ply", sample_columns(100))
    path.write_bytes(path.read_bytes()[:-7])
    expect_error(path, "truncated")


def test_a_header_that_undercounts_the_vertices_is_refused(tmp_path: Path) -> None:
    expect_error(ply_file(tmp_path / "under.ply", sample_columns(100), count=60), "bytes follow the last element")


def test_a_truncated_header_is_refused(tmp_path: Path) -> None:
    (tmp_path / "head.ply").write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 3\nproperty float x\n")
    expect_error(tmp_path / "head.ply", "end_header")


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("property float128 w", "unknown property type"),
        ("element vertex -5", "'-5', which is invalid"),
        ("property list float int idx", "list property with bad types"),
        ("frobnicate 3", "not a PLY header line"),
    ],
)
def test_a_lying_or_malformed_header_line_is_named(tmp_path: Path, line: str, fragment: str) -> None:
    text = (
        "ply\nformat ascii 1.0\nelement vertex 1\nproperty float x\n"
        f"property float y\nproperty float z\n{line}\nend_header\n0 0 0\n"
    )
    (tmp_path / "bad.ply").write_text(text)
    expect_error(tmp_path / "bad.ply", fragment)


def test_an_unknown_encoding_is_refused(tmp_path: Path) -> None:
    (tmp_path / "enc.ply").write_text("ply\nformat binary_middle_endian 1.0\nelement vertex 0\nend_header\n")
    expect_error(tmp_path / "enc.ply", "unknown format")


def test_an_ascii_ply_with_a_short_line_is_refused(tmp_path: Path) -> None:
    text = (
        "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float "
        "y\nproperty float z\nend_header\n0.5 0.5 0.5\n1.5 1.5\n2.5 2.5 2.5\n"
    )
    (tmp_path / "short.ply").write_text(text)
    expect_error(tmp_path / "short.ply", "line 9: expected 3 numbers (x y z), got '1.5 1.5'")


def test_an_ascii_ply_with_fewer_rows_than_promised_is_refused(tmp_path: Path) -> None:
    text = (
        "ply\nformat ascii 1.0\nelement vertex 4\nproperty float x\nproperty "
        "float y\nproperty float z\nend_header\n0 0 0\n1 1 1\n2 2 2\n"
    )
    (tmp_path / "rows.ply").write_text(text)
    expect_error(tmp_path / "rows.ply", "truncated or its header lies")


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_infinite_coordinates_are_refused(tmp_path: Path, fmt: str, bad: float) -> None:
    columns = sample_columns(20)
    columns["y"][13] = bad
    expect_error(
        ply_file(tmp_path / "nan.ply", columns, fmt=fmt, types={"label": "int"}), "NaN or infinite", "point 13"
    )


def test_zero_points_are_refused(tmp_path: Path) -> None:
    columns = {k: v[:0] for k, v in sample_columns(1).items()}
    expect_error(ply_file(tmp_path / "empty.ply", columns, types={"label": "int"}), "holds no points")


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "nothing.ply").write_bytes(b"")
    expect_error(tmp_path / "nothing.ply", "empty")


def test_more_points_than_the_job_allows_are_refused(tmp_path: Path) -> None:
    expect_error(
        ply_file(tmp_path / "big.ply", sample_columns(30)), "30 points is more than the limit of 20", max_points=20
    )


def test_fifty_million_points_is_the_ceiling_whatever_the_job_asks(tmp_path: Path) -> None:
    # A file that really holds 50,000,001 points (sparse: 600 MB of zeros that take no disk).
    path = ply_file(tmp_path / "huge.ply", {axis: np.zeros(1, np.float32) for axis in "xyz"}, count=MAX_POINTS + 1)
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size + MAX_POINTS * 12)
    expect_error(path, "50,000,001 points is more than the limit of 50,000,000", max_points=10**12)


def test_a_mesh_is_refused_with_a_hint_to_sample_it(tmp_path: Path) -> None:
    text = (
        "ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\nproperty float z\n"
        "element face 1\nproperty list uchar int vertex_indices\nend_header\n0 0 0\n1 0 0\n0 1 0\n3 0 1 2\n"
    )
    (tmp_path / "mesh.ply").write_text(text)
    expect_error(tmp_path / "mesh.ply", "is a mesh", "Sample points")


def test_a_vertex_element_without_coordinates_is_refused(tmp_path: Path) -> None:
    columns = {"x": np.zeros(2, np.float32), "y": np.zeros(2, np.float32)}
    expect_error(ply_file(tmp_path / "flat.ply", columns), "no z property")


def test_fractional_labels_are_refused(tmp_path: Path) -> None:
    columns = sample_columns(5)
    columns["label"] = np.array([0, 1, 1.5, 2, 3], dtype=np.float32)
    expect_error(ply_file(tmp_path / "frac.ply", columns), "fractional")
