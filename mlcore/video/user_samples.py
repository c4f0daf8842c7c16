"""The built-in clip dataset (kind ``video-clips``) behind ``video-train``'s "Try with a sample":
small procedural clips saved the ways users bring them, so the sample runs the user-data path.

Two classes by folder name, ``left`` and ``right``: a coloured square on a textured background
moving that way across a 40×30 canvas (not square: the reader's centre crop shows), 12 frames. Each
class holds an MP4 (H.264), a WebM (VP9), an animated GIF and a folder of PNG frames.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

FRAMES = 12
WIDTH, HEIGHT = 40, 30
CLASSES = ("left", "right")


def moving_square(direction: str, seed: int) -> np.ndarray:
    """[FRAMES, HEIGHT, WIDTH, 3] uint8: a square moving ``direction`` ("left" or "right")."""
    rng = np.random.default_rng(seed)
    background = (rng.integers(0, 60, (HEIGHT, WIDTH, 3)) + rng.integers(0, 80, 3)).astype(np.uint8)
    colour = rng.integers(120, 256, 3).astype(np.uint8)
    side = int(rng.integers(8, 12))
    y = int(rng.integers(0, HEIGHT - side))
    step = 2 if direction == "right" else -2
    x = 4 if direction == "right" else WIDTH - side - 4
    frames = np.repeat(background[None], FRAMES, axis=0)
    for f in range(FRAMES):
        left = int(np.clip(x + step * f, 0, WIDTH - side))
        frames[f, y : y + side, left : left + side] = colour
    return frames


def write_video(frames: np.ndarray, path: Path, codec: str) -> Path:
    import imageio_ffmpeg

    writer = imageio_ffmpeg.write_frames(
        str(path),
        (frames.shape[2], frames.shape[1]),
        fps=8,
        codec=codec,
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        macro_block_size=1,
        output_params=["-crf", "20"] + (["-b:v", "0"] if codec == "libvpx-vp9" else []),
        ffmpeg_log_level="error",
    )
    writer.send(None)
    for frame in frames:
        writer.send(np.ascontiguousarray(frame))
    writer.close()
    return path


def write_gif(frames: np.ndarray, path: Path) -> Path:
    images = [Image.fromarray(f) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=125, loop=0)
    return path


def write_frame_folder(frames: np.ndarray, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, frame in enumerate(frames):
        Image.fromarray(frame).save(folder / f"frame{i + 1}.png")
    return folder


def build_moving_shapes(target: Path) -> None:
    """Eight clips in two class folders, one of each format per class (about 100 KB)."""
    for c, name in enumerate(CLASSES):
        folder = target / name
        folder.mkdir(parents=True, exist_ok=True)
        write_video(moving_square(name, 10 * c + 1), folder / "clip-1.mp4", "libx264")
        write_video(moving_square(name, 10 * c + 2), folder / "clip-2.webm", "libvpx-vp9")
        write_gif(moving_square(name, 10 * c + 3), folder / "clip-3.gif")
        write_frame_folder(moving_square(name, 10 * c + 4), folder / "clip-4")
