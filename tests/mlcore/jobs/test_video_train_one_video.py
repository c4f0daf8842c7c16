"""video-train's clips upload as one video file alone (MP4 / WebM / MKV / GIF, not an archive)."""

import numpy as np
import pytest

from mlcore import sniff
from mlcore.jobs import InMemoryContext, JobError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.video.dit import VideoDiT
from mlcore.video.user_samples import moving_square, write_gif, write_video

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
    "seed": 0,
}


def run(raw, upload):
    kind = get_kind("video-train")
    ctx = InMemoryContext()
    params, inputs = prepare(kind, {**FAST, **raw}, {"clips": [upload]}, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def long_video(seeds=(1, 2, 3)):
    """36 frames: three moving squares one after another."""
    return np.concatenate([moving_square("right", seed) for seed in seeds])


def test_the_sniffer_tells_webm_from_matroska_by_the_ebml_doctype(tmp_path):
    webm = write_video(long_video(), tmp_path / "a.webm", "libvpx-vp9")
    mkv = write_video(long_video(), tmp_path / "b.mkv", "libx264")
    assert webm.read_bytes()[:4] == b"\x1a\x45\xdf\xa3" == mkv.read_bytes()[:4]
    assert sniff.sniff(webm) == "webm" and sniff.sniff(mkv) == "mkv"


def test_one_webm_alone_is_cut_into_consecutive_clips_and_trains(tmp_path):
    upload = write_video(long_video(), tmp_path / "walk.webm", "libvpx-vp9")
    outcome, ctx = run({}, upload)
    assert outcome.status == "succeeded", outcome.traceback
    assert any("cut into 9 consecutive clips" in line and "optimistic" in line for line in ctx.lines)
    scalars = ctx.metrics.scalars
    assert scalars["train_clips"] + scalars["heldout_clips"] == 9  # 36 frames / 4
    model = VideoDiT.from_pretrained(ctx.registrations[0].path)
    assert model.config.in_channels == 3 and model.config.num_digits == 1
    assert ctx.registrations[0].card["classes"] == []


def test_a_stride_cuts_windows_of_frames_times_stride(tmp_path):
    upload = write_gif(long_video(), tmp_path / "walk.gif")
    outcome, ctx = run({"stride": 3, "colour": False}, upload)
    assert outcome.status == "succeeded", outcome.traceback
    assert any("cut into 3 consecutive clips" in line for line in ctx.lines)  # 36 frames / (4 × 3)


def test_one_video_too_short_for_two_clips_is_refused_asking_for_a_zip(tmp_path):
    upload = write_video(moving_square("left", 0), tmp_path / "short.mp4", "libx264")  # 12 frames
    outcome, ctx = run({"frames": 8}, upload)
    assert outcome.status == "failed"
    assert "short.mp4: one video alone holds 12 frames, enough for 1 clip(s) of 8 frames" in outcome.error
    assert "Upload a zip of several clips" in outcome.error
    assert not ctx.registrations


def test_a_png_is_still_refused_as_a_clips_upload(tmp_path):
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "still.png")
    kind = get_kind("video-train")
    with pytest.raises(JobError, match="expected zip or tar or mp4 or webm or mkv or gif, got a png file"):
        prepare(kind, FAST, {"clips": [tmp_path / "still.png"]}, resolver=LocalResolver(), workdir=tmp_path / "w")
