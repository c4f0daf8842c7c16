"""The front door inside a job (the test kind ``tests/jobkinds/pointcloud_fixture.py``, which uses
the API the way ``pointcloud-segment`` does): a good cloud becomes a viewer PLY and a thumbnail;
a bad one fails the job with the reader's message and records nothing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import Kind, get_kind
from mlcore.jobs.runner import Outcome, execute, prepare
from mlcore.pointcloud.io import read_cloud, read_header, write_ply
from tests.mlcore.pointcloud.test_io_ply import ply_file, sample_columns


@pytest.fixture
def kind(monkeypatch: pytest.MonkeyPatch) -> Kind:
    monkeypatch.setenv("MOELAB_EXTRA_KINDS", "tests.jobkinds.exercise,tests.jobkinds.pointcloud_fixture")
    return get_kind("test-pointcloud")


def run(kind: Kind, raw: dict, files: dict | None = None) -> tuple[Outcome, InMemoryContext]:
    ctx = InMemoryContext()
    params, inputs = prepare(kind, raw, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_the_sample_room_becomes_a_labelled_viewer_ply_and_a_thumbnail(kind: Kind) -> None:
    outcome, ctx = run(kind, {**kind.spec.sample, "budget": 5_000, "seed": 1})
    assert outcome.status == "succeeded", outcome.error
    ply = ctx.artifacts["cloud.ply"]
    assert ply.media_type == "application/x-ply"
    cloud = read_cloud(ply.path, max_points=10_000)
    assert len(cloud) <= 5_000 and set(np.unique(cloud.labels)) == {0, 1, 2, 3}
    assert [c.split()[-1] for c in read_header(ply.path).comments if c.startswith("moelab label")] == [
        "floor",
        "wall",
        "table",
        "lamp",
    ]
    assert ctx.artifacts["thumbnail.png"].path.read_bytes().startswith(b"\x89PNG")
    assert "thumbnail drawn by numpy" in ctx.lines


def test_an_uploaded_pcd_named_txt_is_read_by_its_content(kind: Kind, tmp_path: Path) -> None:
    xyz = np.random.default_rng(0).random((300, 3)).astype(np.float32)
    upload = tmp_path / "scan.txt"
    upload.write_text("VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH 300\nHEIGHT 1\n"
                      "POINTS 300\nDATA ascii\n" + "".join(f"{x} {y} {z}\n" for x, y, z in xyz))  # fmt: skip
    outcome, ctx = run(kind, {"seed": 0}, {"cloud": [upload]})
    assert outcome.status == "succeeded", outcome.error
    assert ctx.metrics.scalars["points"] == 300


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda d: ply_file(d / "liar.ply", sample_columns(10), count=10**6), "truncated or its header lies"),
        (lambda d: write_ply(d / "nan.ply", np.array([[0, 0, 0], [np.nan, 1, 1]], np.float32)), "NaN or infinite"),
        (lambda d: ply_file(d / "none.ply", {k: v[:0] for k, v in sample_columns(1).items()}), "holds no points"),
    ],
)
def test_a_bad_upload_fails_the_job_with_the_readers_message_and_records_nothing(
    kind: Kind, tmp_path: Path, make, fragment: str
) -> None:
    upload = make(tmp_path)
    outcome, ctx = run(kind, {"seed": 0}, {"cloud": [upload]})
    assert outcome.status == "failed"
    assert outcome.error.startswith(f"{upload.name}: ") and fragment in outcome.error
    assert not outcome.error.startswith("Internal error")  # a user error, not a crash
    assert ctx.artifacts == {}
