"""pointcloud-segment with a segmenter that pointcloud-train taught the user's own classes: the names,
ids, grid and attributes it saved come back in every output, SynMix-only mappings stay out, and a
segmenter whose class list does not fit its head is refused with what to do."""

import json
import shutil
import zipfile

import laspy
import numpy as np
import pytest

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.pointcloud.io import read_cloud
from mlcore.pointcloud.io.las_out import own_codes
from mlcore.pointcloud.pipeline import load_segmenter
from mlcore.pointcloud.segmenter_classes import SegmenterClasses, SegmenterError, read_classes
from mlcore.pointcloud.user_samples import write_cloudcompare_ply, write_las
from mlcore.pointcloud.user_scans import moelab_label_names

#: Made-up classes with made-up ids: nothing here is a SynMix class or an ASPRS code's meaning.
CODES = {"bench": 10, "lamp": 20}
#: Seconds of CPU, not minutes: a dense model, tiny crops, at the scans' own 0.1 m voxel.
TRAIN = {"steps": 30, "batch_size": 2, "points": 256, "eval_every": 0, "architecture": "dense", "voxel": 0.1}


def bench_and_lamp(seed: int, n: int = 800) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A 3 m cube of points: benches (brown) below 1.5 m, lamps (pale yellow) above."""
    rng = np.random.default_rng(seed)
    xyz = rng.uniform(0, 3, (n, 3)).astype(np.float32)
    low = xyz[:, 2] < 1.5
    ids = np.where(low, CODES["bench"], CODES["lamp"])
    rgb = np.where(low[:, None], [120, 80, 40], [250, 240, 160]).astype(np.uint8)
    return xyz, rgb, ids


def run(kind_name, raw, files=None):
    kind = get_kind(kind_name)
    ctx = InMemoryContext()
    params, inputs = prepare(kind, {"seed": 0, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """pointcloud-train on three labelled scans (two LAS, one CloudCompare PLY) and a classes.json."""
    folder = tmp_path_factory.mktemp("scans")
    for i in range(3):
        xyz, rgb, ids = bench_and_lamp(i)
        if i < 2:
            write_las(folder / f"tile-{i}.las", xyz, rgb, ids)
        else:
            write_cloudcompare_ply(folder / f"tile-{i}.ply", xyz, rgb, ids)
    (folder / "classes.json").write_text(json.dumps({str(code): name for name, code in CODES.items()}))
    archive = folder / "scans.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in folder.iterdir():
            if path != archive:
                zf.write(path, path.name)
    outcome, ctx = run("pointcloud-train", TRAIN, {"scans": [archive]})
    assert outcome.status == "succeeded", outcome.traceback
    return ctx


@pytest.fixture(scope="module")
def segmenter(trained):
    return trained.artifacts["segmenter"].path


@pytest.fixture(scope="module")
def new_scan(tmp_path_factory):
    """A scan the segmenter never saw, as a LAS with the user's ids."""
    return write_las(tmp_path_factory.mktemp("new") / "new.las", *bench_and_lamp(7))


@pytest.fixture(scope="module")
def segmented(segmenter, new_scan):
    """pointcloud-segment of the new scan with the user's segmenter (each run renders two thumbnails)."""
    return run("pointcloud-segment", {"model": str(segmenter), "preview_points": 1000}, {"cloud": [new_scan]})


def copy_with(segmenter, tmp_path, change):
    """A copy of the segmenter folder whose config.json ``change(config)`` edited."""
    folder = tmp_path / "edited"
    shutil.copytree(segmenter, folder)
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_segmenter_trained_on_your_classes_joins_the_library_with_their_names_ids_and_voxel(trained, segmenter):
    (registered,) = trained.registrations
    assert registered.kind == "pointcloud-segmenter" and registered.path == segmenter
    config = json.loads((segmenter / "config.json").read_text())
    assert config["labels"] == ["bench", "lamp"]
    assert config["user"] == {
        "classes": ["bench", "lamp"],
        "codes": CODES,
        "voxel": 0.1,
        "attributes": ["colour"],
        "synmix": [],
    }
    assert trained.metrics.scalars["iou_bench"] > 0.5 and trained.metrics.scalars["iou_lamp"] > 0.5


def test_it_segments_a_new_scan_with_your_classes_in_every_output(segmented):
    outcome, ctx = segmented
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert scalars["grid_m"] == 0.1 and scalars["used_colour"] == 1  # its voxel, and what its scans held
    # Both classes are predicted (height and colour tell them apart), under their own names.
    assert scalars["count_bench"] > 100 and scalars["count_lamp"] > 100
    assert scalars["count_bench"] + scalars["count_lamp"] == scalars["points"]
    counts = ctx.charts["class_counts"]["data"]["values"]
    assert {row["class"] for row in counts} == {"bench", "lamp"} and all("coarse class" not in r for r in counts)
    # The labelled PLY and the viewer's preview name the classes in their legend comments.
    for name in ("labelled.ply", "preview.ply"):
        path = ctx.artifacts[name].path
        assert moelab_label_names(path) == {0: "bench", 1: "lamp"}
        assert set(np.unique(read_cloud(path, max_points=10**4).labels).tolist()) == {0, 1}
    # The LAS gets back the ids the user's files used, named in its classification lookup.
    las = laspy.read(str(ctx.artifacts["labelled.las"].path))
    assert set(np.unique(las.classification).tolist()) == set(CODES.values())
    (lookup,) = [v for v in las.vlrs if v.user_id == "LASF_Spec" and v.record_id == 0]
    assert {k: v for k, v in lookup.lookups.items() if v} == {10: "bench", 20: "lamp"}
    # Agreement with the file's labels is measured in the user's classes; nothing coarse or ASPRS.
    assert scalars["miou_vs_file_labels"] > 0.8 and scalars["accuracy_vs_file_labels"] > 0.8
    assert "coarse_miou_vs_file_labels" not in scalars
    assert any("by class id" in line for line in ctx.lines)
    assert any("ASPRS codes, defined on SynMix's classes, are not used" in line for line in ctx.lines)
    assert ctx.artifacts["thumbnail.png"].path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_its_own_labelled_ply_is_compared_by_class_name(segmenter, segmented):
    labelled = segmented[1].artifacts["labelled.ply"].path
    outcome, ctx = run("pointcloud-segment", {"model": str(segmenter)}, {"cloud": [labelled]})
    assert outcome.status == "succeeded", outcome.traceback
    assert any("by class name" in line for line in ctx.lines)
    assert ctx.metrics.scalars["miou_vs_file_labels"] > 0.8


def test_synmix_classes_asked_of_a_segmenter_of_your_classes_are_refused(segmenter, new_scan):
    outcome, ctx = run("pointcloud-segment", {"model": str(segmenter), "classes": "floor,wall"}, {"cloud": [new_scan]})
    assert outcome.status == "failed" and not ctx.artifacts
    assert (
        "does not know floor, wall (its classes: bench, lamp)" in outcome.error
        and "leave classes empty" in outcome.error
    )


def test_a_synmix_grid_for_a_segmenter_of_your_scans_alone_is_refused(segmenter, new_scan):
    outcome, _ = run("pointcloud-segment", {"model": str(segmenter), "setting": "indoor"}, {"cloud": [new_scan]})
    assert outcome.status == "failed"
    assert "trained on your scans alone at 0.1 m" in outcome.error and "leave setting at auto" in outcome.error


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            lambda c: c.update(labels=["bench", "lamp", "tree"]),
            "names 3 classes (bench, lamp, tree) but the model has 2",
        ),
        (lambda c: c.pop("labels"), "does not list the model's class names"),
        (lambda c: c.update(labels=["bench", "bench"]), "names the class 'bench' twice"),
        (
            lambda c: (c.update(labels=["bench", "lamp", "tree"]), c["model"].update(num_classes=3)),
            "model.safetensors has a head of 2 classes but config.json names 3",
        ),
        (lambda c: c["user"].update(classes=["bench", "tree"]), "names tree, which the model's labels"),
        (lambda c: c["user"].update(voxel=0), "no usable voxel size"),
        (lambda c: (c.pop("user"), c["grids"].pop("user")), "not the voxel size they were trained at"),
    ],
)
def test_a_segmenter_whose_classes_do_not_fit_its_head_is_refused_with_what_to_do(
    segmenter, tmp_path, new_scan, change, needle
):
    folder = copy_with(segmenter, tmp_path, change)
    with pytest.raises(SegmenterError, match="pointcloud-train"):
        load_segmenter(folder)
    outcome, ctx = run("pointcloud-segment", {"model": str(folder)}, {"cloud": [new_scan]})
    assert outcome.status == "failed" and outcome.error.startswith("Model: ") and needle in outcome.error
    assert str(tmp_path) not in outcome.error and not ctx.artifacts


def test_a_segmenter_saved_before_the_user_block_still_segments_with_its_classes(segmenter, tmp_path, new_scan):
    folder = copy_with(segmenter, tmp_path, lambda c: c.pop("user"))  # labels, grids.user, card.user_classes remain
    outcome, ctx = run("pointcloud-segment", {"model": str(folder)}, {"cloud": [new_scan]})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["grid_m"] == 0.1 and ctx.metrics.scalars["count_lamp"] > 0
    # Without the ids, LAS 1.2 (format 2) has no user range: unclassified, with the exact class beside it.
    las = laspy.read(str(ctx.artifacts["labelled.las"].path))
    assert set(np.unique(las.classification).tolist()) == {1}
    assert set(np.unique(las["moelab_class"]).tolist()) == {0, 1}
    assert "miou_vs_file_labels" not in ctx.metrics.scalars
    assert any("does not record the ids" in line for line in ctx.lines)


def test_own_ids_are_kept_where_the_point_format_holds_them_and_replaced_where_not():
    table, moved = own_codes({0: 10, 1: 40, 2: 10, 3: 300}, 5, point_format=2)
    assert table.tolist() == [10, 1, 1, 1, 1] and moved == [1, 2, 3]
    table, moved = own_codes({0: 10, 1: 40, 2: 10, 3: 300, 4: 64}, 6, point_format=7)
    assert table.tolist() == [10, 40, 65, 66, 64, 67] and moved == [2, 3]


def test_a_mixed_segmenter_reads_its_synmix_and_own_classes_apart():
    from mlcore.jobs.pointcloud_segment import allowed_classes, segmenting_grid
    from mlcore.pointcloud.labels import LABELS

    names = [*LABELS, "bench"]
    config = {
        "labels": names,
        "user": {
            "classes": ["bench", "building"],
            "codes": {"bench": 10, "building": 6},
            "voxel": 0.1,
            "synmix": ["C"],
        },
    }
    classes = read_classes(config, len(names))
    assert classes.own == (len(LABELS), LABELS.index("building")) and not classes.synmix_named
    assert classes.codes == {len(LABELS): 10, LABELS.index("building"): 6} and classes.attributes is None
    assert allowed_classes([], classes, "yours")[0] == list(classes.own)
    assert allowed_classes(["car"], classes, "yours")[0] == [LABELS.index("car")]
    xyz = np.zeros((10, 3))
    assert segmenting_grid(xyz, "auto", classes) == (0.1, "yours")
    assert segmenting_grid(xyz, "outdoor", classes) == (0.1, "outdoor")  # SynMix was mixed in: its grids apply
    assert SegmenterClasses(tuple(LABELS)).synmix_named
