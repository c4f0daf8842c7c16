"""Decoding a user's clips: formats, labels from folders, caps and refusals."""

import numpy as np
import pytest
from PIL import Image

from mlcore.errors import JobError
from mlcore.video.user_clips import MAX_PIXELS, read_clip_set, split_by_content
from mlcore.video.user_samples import build_moving_shapes, moving_square, write_gif, write_video


def test_it_decodes_mp4_webm_gif_and_frame_folders_and_labels_clips_by_folder(tmp_path):
    build_moving_shapes(tmp_path)
    clips = read_clip_set(tmp_path, frames=6, size=8, stride=2)
    assert clips.clips.shape == (8, 3, 6, 8, 8) and clips.class_names == ("left", "right")
    assert clips.clips.min() >= -1 and clips.clips.max() <= 1
    assert list(clips.labels) == [0, 0, 0, 0, 1, 1, 1, 1]
    by_name = dict(zip(clips.names, clips.clips))
    # Each clip is its source's frames 0, 2, ..., 10, centre-cropped to 30×30 and box-resized to 8×8:
    # exactly for the PNG frames, within codec loss for the others.
    for name, seed, tolerance in (("left/clip-4", 4, 1e-6), ("left/clip-3.gif", 3, 0.1), ("left/clip-1.mp4", 1, 0.1)):
        source = moving_square("left", seed)[::2][:6, :, 5:35]
        expected = np.stack([np.asarray(Image.fromarray(f).resize((8, 8), Image.Resampling.BOX)) for f in source])
        expected = expected.transpose(3, 0, 1, 2) / 127.5 - 1
        assert np.abs(by_name[name] - expected).mean() < tolerance, name


def test_clips_at_the_top_level_have_no_labels_and_greyscale_has_one_channel(tmp_path):
    for i in range(3):
        write_gif(moving_square("right", i), tmp_path / f"c{i}.gif")
    clips = read_clip_set(tmp_path, frames=4, size=8, channels=1)
    assert clips.class_names == () and clips.clips.shape == (3, 1, 4, 8, 8)


def test_a_mix_of_labelled_and_loose_clips_is_refused(tmp_path):
    (tmp_path / "left").mkdir()
    write_gif(moving_square("left", 0), tmp_path / "left" / "a.gif")
    write_gif(moving_square("right", 1), tmp_path / "b.gif")
    with pytest.raises(JobError, match=r"b\.gif is at the top level"):
        read_clip_set(tmp_path, frames=4, size=8)


def test_a_clip_shorter_than_the_models_frames_is_refused(tmp_path):
    write_video(moving_square("left", 0), tmp_path / "a.mp4", "libx264")
    write_video(moving_square("left", 1)[:3], tmp_path / "short.mp4", "libx264")
    with pytest.raises(JobError, match=r"short.mp4: holds 3 frames; the model takes 4 frames every 2"):
        read_clip_set(tmp_path, frames=4, size=8, stride=2)


def test_a_corrupt_video_is_refused_with_a_sentence_and_no_server_path(tmp_path):
    write_video(moving_square("left", 0), tmp_path / "good.mp4", "libx264")
    data = (tmp_path / "good.mp4").read_bytes()
    (tmp_path / "broken.mp4").write_bytes(data[:48] + b"\0" * 200)
    with pytest.raises(JobError) as caught:
        read_clip_set(tmp_path, frames=4, size=8)
    assert "broken.mp4" in str(caught.value) and str(tmp_path) not in str(caught.value)


def test_a_frame_larger_than_the_cap_is_refused_before_it_is_decoded(tmp_path):
    big = tmp_path / "huge"
    big.mkdir()
    side = int(MAX_PIXELS**0.5) + 10
    Image.new("L", (side, side)).save(big / "0001.png")
    write_gif(moving_square("left", 0), tmp_path / "ok.gif")
    with pytest.raises(JobError, match=r"huge/0001.png: its frames are \d+×\d+ pixels, more than"):
        read_clip_set(tmp_path, frames=1, size=8)


def test_a_file_that_is_no_video_is_refused(tmp_path):
    write_gif(moving_square("left", 0), tmp_path / "ok.gif")
    (tmp_path / "notes.mp4").write_text("not a video at all")
    with pytest.raises(JobError, match=r"notes\.mp4: not a video this job reads"):
        read_clip_set(tmp_path, frames=2, size=8)


def test_the_split_is_by_content_and_keeps_a_clip_on_each_side(tmp_path):
    build_moving_shapes(tmp_path)
    clips = read_clip_set(tmp_path, frames=4, size=8)
    train, held = split_by_content(clips, 0.2)
    assert held.names and train.names and len(train.names) + len(held.names) == 8
    reordered = clips.subset(list(range(7, -1, -1)))
    assert split_by_content(reordered, 0.2)[1].names == held.names
