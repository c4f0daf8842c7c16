"""video-train on the user's own clips: an upload, the library sample, judge metrics and refusals."""

import zipfile

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.video.dit import VideoDiT
from mlcore.video.user_samples import build_moving_shapes, moving_square, write_gif

FAST = {
    "dim": 16,
    "depth": 1,
    "heads": 2,
    "frames": 4,
    "resolution": 8,
    "steps": 2,
    "batch_size": 2,
    "sample_every": 0,
    "attention": "full",
    "judge_steps": 5,
    "seed": 0,
}


def zipped(folder, archive):
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, f"clips/{path.relative_to(folder)}")
    return archive


def run(raw, files=None, ctx=None):
    kind = get_kind("video-train")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_trains_on_uploaded_labelled_clips_and_grades_samples_with_a_judge(tmp_path):
    build_moving_shapes(tmp_path / "shapes")
    outcome, ctx = run({}, {"clips": [zipped(tmp_path / "shapes", tmp_path / "clips.zip")]})
    assert outcome.status == "succeeded", outcome.traceback
    scalars = ctx.metrics.scalars
    assert scalars["train_clips"] + scalars["heldout_clips"] == 8
    assert 0 <= scalars["class_accuracy"] <= 1 and 0 <= scalars["judge_heldout_accuracy"] <= 1
    assert scalars["heldout_rf_loss"] > 0
    (registration,) = ctx.registrations
    model = VideoDiT.from_pretrained(registration.path)
    assert model.config.in_channels == 3 and model.config.num_digits == 2 and model.config.num_directions == 1
    assert registration.card["classes"] == ["left", "right"]


def test_unlabelled_greyscale_clips_train_and_the_judge_metrics_say_they_do_not_apply(tmp_path):
    folder = tmp_path / "loose"
    folder.mkdir()
    for i in range(3):
        write_gif(moving_square("right", i), folder / f"c{i}.gif")
    outcome, ctx = run({"colour": False}, {"clips": [zipped(folder, tmp_path / "loose.zip")]})
    assert outcome.status == "succeeded", outcome.traceback
    assert "class_accuracy" not in ctx.metrics.scalars and "fcd" not in ctx.metrics.scalars
    assert any("no class labels" in line and "omitted" in line for line in ctx.lines)
    assert VideoDiT.from_pretrained(ctx.registrations[0].path).config.in_channels == 1


def test_the_library_sample_runs_the_user_clip_path():
    assert get_kind("video-train").spec.sample["clip_set"] == "zoo:moving-shapes"
    outcome, ctx = run({"clip_set": "zoo:moving-shapes", "judge_steps": 0})
    assert outcome.status == "succeeded", outcome.traceback
    assert any("2 classes from folder names: left, right" in line for line in ctx.lines)
    assert any("judge_steps is 0" in line for line in ctx.lines)


def test_a_too_short_clip_in_the_upload_is_refused_with_its_name(tmp_path):
    folder = tmp_path / "short"
    folder.mkdir()
    write_gif(moving_square("left", 0), folder / "ok.gif")
    write_gif(moving_square("left", 1)[:2], folder / "blink.gif")
    outcome, _ = run({}, {"clips": [zipped(folder, tmp_path / "short.zip")]})
    assert outcome.status == "failed" and "blink.gif: holds 2 frames" in outcome.error


def test_clip_options_without_clips_are_refused():
    outcome, _ = run({"stride": 2})
    assert outcome.status == "failed" and "stride" in outcome.error and "none were given" in outcome.error


def test_fine_tuning_a_greyscale_model_on_colour_clips_is_refused(tmp_path):
    VideoDiT(dim=16, depth=1, heads=2, ffn_width=32).save_pretrained(tmp_path / "grey-model")
    build_moving_shapes(tmp_path / "shapes")
    outcome, _ = run(
        {"init": str(tmp_path / "grey-model")}, {"clips": [zipped(tmp_path / "shapes", tmp_path / "c.zip")]}
    )
    assert outcome.status == "failed" and "set colour off" in outcome.error
