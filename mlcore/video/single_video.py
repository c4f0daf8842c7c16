"""One video uploaded alone (MP4 / MOV / WebM / MKV / GIF, not an archive) as a set of clips.

The video is cut into consecutive, non-overlapping windows of ``frames × stride`` frames; each
complete window becomes one unlabelled clip, written as a folder of PNG frames already cropped and
resized the way :mod:`mlcore.video.user_clips` does it (a square of ``size`` pixels reads back
unchanged), so the folder goes through the same reader (stride, split, held-out loss and all).

A video with room for fewer than two clips is refused: one clip is held out, so training needs at
least two; several clips belong in a zip.

Neighbouring windows of one video look alike, so the held-out loss on them is optimistic; the job's
log says so.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from PIL import Image

from mlcore.errors import JobError
from mlcore.video.user_clips import MAX_CLIPS, _ffmpeg_frames, _gif_frames, _square, video_format


def _frames_of(path: Path, shown: str) -> Iterator[Image.Image]:
    kind = video_format(path)
    if kind is None:
        raise JobError(
            f"{shown}: not a video this job reads (MP4, MOV, WebM, MKV or GIF, recognised by content); upload a "
            "zip of clips instead."
        )
    return _gif_frames(path, shown) if kind == "gif" else _ffmpeg_frames(path, shown)


def _save(pixels: np.ndarray, path: Path) -> None:
    """[C, S, S] in [−1, 1] (from ``_square``, so exactly uint8 values) → a PNG the reader gets back unchanged."""
    values = np.round((pixels + 1.0) * 127.5).clip(0, 255).astype(np.uint8)
    Image.fromarray(values[0] if len(values) == 1 else values.transpose(1, 2, 0)).save(path)


def clips_from_one_video(
    path: Path, target: Path, *, frames: int, size: int, stride: int = 1, channels: int = 3
) -> tuple[Path, int]:
    """(a folder of frame folders, one per clip; the clip count) cut from the video at ``path``,
    or a :class:`JobError` when it holds fewer than two clips' worth of frames or does not decode."""
    shown = path.name
    need = frames * stride
    target.mkdir(parents=True, exist_ok=True)
    seen = 0
    stream = _frames_of(path, shown)
    try:
        for index, image in enumerate(stream):
            window, offset = divmod(index, need)
            if window >= MAX_CLIPS:
                break
            seen = index + 1
            # Every frame of the window: the reader takes every stride-th itself, as from any clip.
            folder = target / f"clip-{window + 1:04d}"
            folder.mkdir(exist_ok=True)
            _save(_square(image, size, channels), folder / f"frame{offset + 1}.png")
    except JobError:
        raise
    except Exception as exc:  # ffmpeg's RuntimeError / OSError, Pillow's own: all mean a broken file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].replace(str(path.parent), "")
        raise JobError(f"{shown}: cannot be decoded ({first[:160]}); the file is corrupt or truncated.") from None
    finally:
        stream.close()  # type: ignore[attr-defined]
    complete = seen // need
    partial = target / f"clip-{complete + 1:04d}"
    if partial.is_dir():
        shutil.rmtree(partial)  # the tail shorter than one clip
    if complete < 2:
        every = f" every {stride}" if stride > 1 else ""
        raise JobError(
            f"{shown}: one video alone holds {seen} frame{'s' if seen != 1 else ''}, enough for {complete} clip(s) "
            f"of {frames} frames{every}; training needs at least two (one is held out). Upload a zip of several "
            "clips (or a longer video, or lower frames)."
        )
    return target, complete
