import numpy as np
from PIL import Image

from mlcore.data.video import bouncing_digits
from mlcore.video.media import probe_mp4, write_gif, write_mp4, write_strip


def test_the_mp4_is_h264_yuv420p_with_the_index_first(tmp_path):
    clip = bouncing_digits(1, frames=6, seed=0).clips[0]
    facts = probe_mp4(write_mp4(clip, tmp_path / "clip.mp4"))
    assert facts == {"h264": "True", "yuv420p": "True", "faststart": "True"}


def test_the_gif_has_every_frame_and_the_strip_one_row_per_clip(tmp_path):
    clips = bouncing_digits(3, frames=5, seed=0).clips
    with Image.open(write_gif(clips[0], tmp_path / "clip.gif", scale=2)) as gif:
        assert gif.n_frames == 5 and gif.size == (32, 32)
    with Image.open(write_strip(clips, tmp_path / "strip.png", scale=1, gap=2)) as strip:
        assert strip.size == (5 * 18 + 2, 3 * 18 + 2)
        pixels = np.asarray(strip)
        assert pixels[0, 0].tolist() == [128, 128, 128]
