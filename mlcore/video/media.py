"""Clips to files a browser shows: H.264 MP4 (yuv420p, +faststart), a GIF preview, a frame strip PNG.

The MP4 goes through imageio-ffmpeg's bundled ffmpeg program (a separate process): H.264 in
``yuv420p`` with the index moved to the front (``+faststart``), the only combination every browser
plays while it downloads. Frames are upscaled with nearest-neighbour so 16×16 pixels stay crisp,
to a size divisible by 16 (yuv420p needs even sides; macroblocks like 16).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def to_uint8(clip: np.ndarray, scale: int) -> np.ndarray:
    """[F, H, W] (or [F, C, H, W]) in [−1, 1] → [F, H·s, W·s, 3] uint8 RGB."""
    if clip.ndim == 4:
        clip = clip[:, 0] if clip.shape[1] == 1 else clip.transpose(0, 2, 3, 1)
    pixels = np.clip((clip + 1.0) * 127.5, 0, 255).round().astype(np.uint8)
    if pixels.ndim == 3:
        pixels = np.repeat(pixels[..., None], 3, axis=-1)
    return pixels.repeat(scale, axis=1).repeat(scale, axis=2)


def upscale_for(size: int, target: int = 256) -> int:
    """The integer factor that brings ``size`` pixels near ``target`` with an even result."""
    factor = max(2, round(target / size))
    return factor + (factor * size) % 2


def write_mp4(clip: np.ndarray, path: Path, *, fps: int = 8, scale: int | None = None) -> Path:
    import imageio_ffmpeg

    frames = to_uint8(clip, scale or upscale_for(clip.shape[-1]))
    height, width = frames.shape[1:3]
    writer = imageio_ffmpeg.write_frames(
        str(path),
        (width, height),
        fps=fps,
        codec="libx264",
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        macro_block_size=1,
        output_params=["-movflags", "+faststart", "-crf", "18"],
        ffmpeg_log_level="error",
    )
    writer.send(None)  # prime the generator
    for frame in frames:
        writer.send(np.ascontiguousarray(frame))
    writer.close()
    return path


def write_gif(clip: np.ndarray, path: Path, *, fps: int = 8, scale: int | None = None) -> Path:
    frames = [Image.fromarray(f) for f in to_uint8(clip, scale or upscale_for(clip.shape[-1], 128))]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)
    return path


def write_strip(clips: np.ndarray, path: Path, *, scale: int = 4, gap: int = 2) -> Path:
    """Rows = clips, columns = frames, on a mid-grey background."""
    rows = [to_uint8(clip, scale) for clip in clips]
    frames, height, width = rows[0].shape[:3]
    canvas = np.full((len(rows) * (height + gap) + gap, frames * (width + gap) + gap, 3), 128, dtype=np.uint8)
    for r, row in enumerate(rows):
        for f in range(frames):
            y, x = gap + r * (height + gap), gap + f * (width + gap)
            canvas[y : y + height, x : x + width] = row[f]
    Image.fromarray(canvas).save(path)
    return path


def probe_mp4(path: Path) -> dict[str, str]:
    """Codec facts ffmpeg reports for ``path`` (for tests): codec, pixel format, whether moov comes first."""
    import subprocess

    import imageio_ffmpeg

    run = subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-hide_banner", "-i", str(path)], capture_output=True, text=True, check=False
    )
    info = run.stderr
    data = path.read_bytes()
    moov, mdat = data.find(b"moov"), data.find(b"mdat")
    return {
        "h264": str("h264" in info),
        "yuv420p": str("yuv420p" in info),
        "faststart": str(0 <= moov < mdat),
    }
