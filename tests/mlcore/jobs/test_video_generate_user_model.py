"""video-generate on models video-train made from the user's own clips: the card decides the
condition (class names), the channels (RGB output) and the size; the digit judge is omitted."""

import zipfile

import imageio_ffmpeg
import numpy as np
import pytest
import torch
from PIL import Image

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.video.dit import VideoDiT
from mlcore.video.media import probe_mp4, to_uint8, write_strip
from mlcore.video.pipeline import generate
from mlcore.video.user_samples import moving_square, write_gif

TRAIN = {
    "dim": 16,
    "depth": 1,
    "heads": 2,
    "frames": 4,
    "resolution": 8,
    "steps": 3,
    "batch_size": 2,
    "sample_every": 0,
    "attention": "moga",
    "judge_steps": 0,
    "seed": 0,
}
SAMPLE = {"clips": 2, "steps": 3, "seed": 0}


def run(kind_name, raw, files=None):
    kind = get_kind(kind_name)
    ctx = InMemoryContext()
    params, inputs = prepare(kind, raw, files or {}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def trained(raw, files=None):
    outcome, ctx = run("video-train", {**TRAIN, **raw}, files)
    assert outcome.status == "succeeded", outcome.traceback
    return ctx.registrations[0].path


@pytest.fixture(scope="module")
def shapes_model():
    """RGB, classes left and right: video-train on the library sample (the user-clips path)."""
    return trained({"clip_set": "zoo:moving-shapes"})


@pytest.fixture(scope="module")
def unlabelled_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("loose")
    for i in range(3):
        write_gif(moving_square("right", i), folder / f"c{i}.gif")
    archive = folder.parent / "loose.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.glob("*.gif")):
            zf.write(path, path.name)
    return trained({}, {"clips": [archive]})


def expected_clips(model_folder, labels, frames=4, size=8):
    """What the job must draw: the same sampler, seed and labels, as [n, F, C, H, W] numpy."""
    model = VideoDiT.from_pretrained(model_folder).eval()
    clips = generate(
        model,
        torch.tensor(labels),
        torch.zeros(len(labels), dtype=torch.long),
        frames=frames,
        size=size,
        steps=SAMPLE["steps"],
        guidance=3.0,
        seed=SAMPLE["seed"],
        attention="moga",
    )
    return clips.numpy().transpose(0, 2, 1, 3, 4)


def strip_of(clips, tmp_path):
    return np.asarray(Image.open(write_strip(clips, tmp_path / "expected.png", scale=8)))


def test_an_rgb_model_of_your_clips_samples_the_named_class_in_colour_at_its_own_size(shapes_model, tmp_path):
    outcome, ctx = run("video-generate", {**SAMPLE, "model": str(shapes_model), "class_name": "right"})
    assert outcome.status == "succeeded", outcome.traceback
    assert any("trained on your clips (RGB, classes left, right, 4 frames of 8²)" in line for line in ctx.lines)

    # The strip (lossless) is exactly the sampler's RGB output for class 1 ("right"), not class 0's.
    strip = Image.open(ctx.artifacts["frames.png"].path)
    assert strip.mode == "RGB" and strip.size == (4 * (8 * 8 + 2) + 2, 2 * (8 * 8 + 2) + 2)
    right = expected_clips(shapes_model, [1, 1])
    assert right.shape == (2, 4, 3, 8, 8)
    assert np.array_equal(np.asarray(strip), strip_of(right, tmp_path))
    assert not np.array_equal(np.asarray(strip), strip_of(expected_clips(shapes_model, [0, 0]), tmp_path))
    pixels = np.asarray(strip).astype(int)
    assert np.abs(pixels[..., 0] - pixels[..., 1]).max() > 10  # colour, not grey in three channels

    # The MP4: H.264, 4 frames of the two clips side by side, close to the RGB clips (yuv420p is lossy).
    assert probe_mp4(ctx.artifacts["clips.mp4"].path) == {"h264": "True", "yuv420p": "True", "faststart": "True"}
    reader = imageio_ffmpeg.read_frames(str(ctx.artifacts["clips.mp4"].path), pix_fmt="rgb24")
    meta = next(reader)
    width, height = meta["size"]
    decoded = np.stack([np.frombuffer(raw, np.uint8).reshape(height, width, 3) for raw in reader])
    wanted = to_uint8(np.concatenate(list(right), axis=-1), 16)
    assert decoded.shape == wanted.shape == (4, 8 * 16, 2 * 8 * 16, 3)
    assert np.abs(decoded.astype(int) - wanted.astype(int)).mean() < 8
    with Image.open(ctx.artifacts["preview.gif"].path) as gif:
        assert gif.n_frames == 4 and gif.convert("RGB").size == (2 * 8 * 12, 8 * 12)


def test_the_digit_judge_is_omitted_with_a_reason_for_a_model_of_your_clips(shapes_model):
    outcome, ctx = run("video-generate", {**SAMPLE, "model": str(shapes_model)})
    assert outcome.status == "succeeded", outcome.traceback
    assert not {"recognised", "digit_recognised", "direction_recognised"} & set(ctx.metrics.scalars)
    assert any("judge does not apply" in line and "omitted" in line for line in ctx.lines)
    spec = get_kind("video-generate").spec
    assert all("your clips" in m.description for m in spec.metrics if m.key.endswith("recognised"))


def test_without_a_class_name_every_class_is_sampled_in_turn(shapes_model, tmp_path):
    outcome, ctx = run("video-generate", {**SAMPLE, "clips": 3, "model": str(shapes_model)})
    assert outcome.status == "succeeded", outcome.traceback
    assert any("3 clip(s) of every class in turn (left, right, left)" in line for line in ctx.lines)
    strip = np.asarray(Image.open(ctx.artifacts["frames.png"].path))
    assert np.array_equal(strip, strip_of(expected_clips(shapes_model, [0, 1, 0]), tmp_path))


def test_a_class_the_model_does_not_know_is_refused_naming_its_classes(shapes_model):
    outcome, ctx = run("video-generate", {**SAMPLE, "model": str(shapes_model), "class_name": "up"})
    assert outcome.status == "failed"
    assert "'up' is not a class of this model; its classes are left, right." in outcome.error
    assert "clips.mp4" not in ctx.artifacts


def test_a_digit_for_a_model_of_your_clips_is_refused_not_ignored(shapes_model):
    outcome, _ = run("video-generate", {**SAMPLE, "model": str(shapes_model), "digit": 7})
    assert outcome.status == "failed"
    assert "digit condition bouncing-digits models" in outcome.error and "left, right" in outcome.error


def test_an_unlabelled_model_samples_without_a_condition_and_refuses_a_class(unlabelled_model):
    outcome, ctx = run("video-generate", {**SAMPLE, "model": str(unlabelled_model)})
    assert outcome.status == "succeeded", outcome.traceback
    assert any("of the model's one (unlabelled) class" in line for line in ctx.lines)
    refused, _ = run("video-generate", {**SAMPLE, "model": str(unlabelled_model), "class_name": "right"})
    assert refused.status == "failed" and "no class to pick; leave class_name empty" in refused.error


def test_a_class_name_for_a_bouncing_digits_model_is_refused(tmp_path):
    VideoDiT(dim=16, depth=1, heads=2, ffn_width=32).save_pretrained(tmp_path)
    outcome, _ = run("video-generate", {**SAMPLE, "model": str(tmp_path), "class_name": "left"})
    assert outcome.status == "failed" and "conditioned by digit and direction" in outcome.error


def test_frames_and_resolution_left_empty_take_the_models_own_and_given_ones_win(shapes_model):
    outcome, ctx = run("video-generate", {**SAMPLE, "model": str(shapes_model), "frames": 8, "resolution": 16})
    assert outcome.status == "succeeded", outcome.traceback
    assert ctx.metrics.scalars["tokens_per_clip"] == 8 * 4 * 4
    assert any("sampling 8 frames of 16² (not what it was trained on)" in line for line in ctx.lines)
