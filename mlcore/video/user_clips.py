"""A user's clips as one training set: decoded, cut to the model's frame count, resized, labelled
by folder, split by content.

What a user can bring (a folder: an unpacked zip / tar upload, or a ``video-clips`` item):

- **Video files**: MP4 / MOV (H.264, …), WebM (VP8 / VP9), MKV and animated GIF, recognised by
  their content. Videos decode through imageio-ffmpeg's bundled ffmpeg (a separate process), GIFs
  through Pillow.
- **Frame folders**: a folder of PNG / JPEG frames is one clip, its frames in natural name order
  (``frame2.png`` before ``frame10.png``).
- **Class labels from folder names**: ``walking/clip1.mp4``, ``running/clip7.webm``, … Clips all
  at the top level have no labels (the model is then conditioned on one class).

Each clip keeps ``frames`` frames from its start, every ``stride``-th one, centre-cropped to a
square and resized to ``size`` pixels (Pillow's box filter), as RGB or greyscale, in [−1, 1].

Refused, each with a sentence naming the clip: a file that does not decode (corrupt or not a
video), a frame larger than :data:`MAX_PIXELS` (decompression bombs: checked from the header before
any frame is decoded), a clip shorter than ``frames × stride`` frames, more than :data:`MAX_CLIPS`
clips, a mix of labelled and unlabelled clips, fewer than two clips (one is held out).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from mlcore.errors import JobError
from mlcore.uploads import relative_name

#: Frames larger than this (pixels) are refused before decoding: 4K UHD is 8.3M.
MAX_PIXELS = 3840 * 2160
MAX_CLIPS = 2000
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".webm", ".mkv", ".gif")
FRAME_SUFFIXES = (".png", ".jpg", ".jpeg")
_EBML = b"\x1a\x45\xdf\xa3"  # WebM / Matroska


@dataclass(frozen=True)
class ClipSet:
    clips: np.ndarray  #: [n, C, F, S, S] float32 in [−1, 1]
    labels: np.ndarray  #: [n] int64 class index (all 0 without labels)
    class_names: tuple[str, ...]  #: empty without labels
    names: tuple[str, ...]  #: each clip's path inside the dataset
    digests: tuple[str, ...]  #: sha256 of each decoded clip: the split key

    @property
    def labelled(self) -> bool:
        return bool(self.class_names)

    def subset(self, index: list[int]) -> ClipSet:
        return ClipSet(
            self.clips[index],
            self.labels[index],
            self.class_names,
            tuple(self.names[i] for i in index),
            tuple(self.digests[i] for i in index),
        )


def _natural(path: Path) -> list[object]:
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", path.name)]


def _square(image: Image.Image, size: int, channels: int) -> np.ndarray:
    """Centre-crop to a square, resize to ``size``, → [C, S, S] float32 in [−1, 1]."""
    w, h = image.size
    side = min(w, h)
    left, top = (w - side) // 2, (h - side) // 2
    image = image.convert("RGB" if channels == 3 else "L").crop((left, top, left + side, top + side))
    pixels = np.asarray(image.resize((size, size), Image.Resampling.BOX), np.float32)
    pixels = pixels.reshape(size, size, channels).transpose(2, 0, 1)
    return pixels / 127.5 - 1.0


def _check_pixels(shown: str, width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise JobError(f"{shown}: its frames are {width}×{height} pixels; the file is corrupt.")
    if width * height > MAX_PIXELS:
        raise JobError(
            f"{shown}: its frames are {width}×{height} pixels, more than the {MAX_PIXELS:,} allowed (4K UHD); "
            "scale it down (e.g. ffmpeg -vf scale=640:-2) and upload again."
        )


def _gif_frames(path: Path, shown: str) -> Iterator[Image.Image]:
    with Image.open(path) as image:
        _check_pixels(shown, *image.size)
        for index in range(getattr(image, "n_frames", 1)):
            image.seek(index)
            yield image.copy()


def _ffmpeg_frames(path: Path, shown: str) -> Iterator[Image.Image]:
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
    try:
        meta = next(reader)
        width, height = meta["size"]
        _check_pixels(shown, int(width), int(height))
        for raw in reader:
            yield Image.frombuffer("RGB", (width, height), raw, "raw", "RGB", 0, 1)
    finally:
        reader.close()


def _folder_frames(folder: Path, root: Path) -> Iterator[Image.Image]:
    for path in sorted((p for p in folder.iterdir() if p.suffix.lower() in FRAME_SUFFIXES), key=_natural):
        shown = relative_name(path, root)
        try:
            with Image.open(path) as image:
                _check_pixels(shown, *image.size)  # from the header, before the pixels are decoded
                image.load()
                yield image.copy()
        except JobError:
            raise
        except Exception as exc:  # Pillow raises many types for broken files
            raise JobError(f"{shown}: not a readable PNG or JPEG frame ({type(exc).__name__}).") from None


def video_format(path: Path) -> str | None:
    """``gif``, ``video`` (ffmpeg decodes it) or ``None``, from the first bytes."""
    with path.open("rb") as f:
        head = f.read(16)
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if head[4:8] == b"ftyp" or head.startswith(_EBML) or (head[:4] == b"RIFF" and head[8:12] == b"AVI "):
        return "video"
    return None


def decode_clip(source: Path, root: Path, *, frames: int, size: int, stride: int = 1, channels: int = 3) -> np.ndarray:
    """[C, frames, size, size] from a video file or a frame folder, or a :class:`JobError`."""
    shown = relative_name(source, root)
    need = frames * stride
    if source.is_dir():
        stream: Iterator[Image.Image] = _folder_frames(source, root)
    else:
        kind = video_format(source)
        if kind is None:
            raise JobError(
                f"{shown}: not a video this job reads (MP4, MOV, WebM, MKV or GIF, recognised by content). Re-export "
                "it, or replace it with a folder of PNG / JPEG frames."
            )
        stream = _gif_frames(source, shown) if kind == "gif" else _ffmpeg_frames(source, shown)
    kept: list[np.ndarray] = []
    seen = 0
    try:
        for index, image in enumerate(stream):
            seen = index + 1
            if index % stride == 0:
                kept.append(_square(image, size, channels))
            if seen >= need:
                break
    except JobError:
        raise
    except Exception as exc:  # ffmpeg's RuntimeError / OSError, Pillow's own: all mean a broken file
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        first = first.replace(str(source.parent), "")
        raise JobError(f"{shown}: cannot be decoded ({first[:160]}); the file is corrupt or truncated.") from None
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    if len(kept) < frames:
        raise JobError(
            f"{shown}: holds {seen} frame{'s' if seen != 1 else ''}; the model takes {frames} frames"
            + (f" every {stride}" if stride > 1 else "")
            + f", so a clip needs at least {need}. Drop it, or lower frames"
            + (" or stride." if stride > 1 else ".")
        )
    return np.stack(kept, axis=1).astype(np.float32)


def _descend(root: Path) -> Path:
    """The folder a zip of one folder (``my-clips/...``) really is."""
    while True:
        children = [c for c in root.iterdir() if c.name not in ("__MACOSX", ".DS_Store")]
        if len(children) == 1 and children[0].is_dir():
            root = children[0]
            continue
        return root


def find_clips(root: Path) -> list[Path]:
    """Video files and frame folders under ``root`` (a frame folder holds PNG / JPEG files directly)."""
    found: list[Path] = []
    for path in sorted(root.rglob("*")):
        if any(part.startswith(("__MACOSX", ".")) for part in path.relative_to(root).parts):
            continue
        video = path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES
        if video or (path.is_dir() and any(p.suffix.lower() in FRAME_SUFFIXES for p in path.iterdir() if p.is_file())):
            found.append(path)
    if root.is_dir() and any(p.suffix.lower() in FRAME_SUFFIXES for p in root.iterdir() if p.is_file()):
        found.append(root)
    return found


def read_clip_set(
    root: Path,
    *,
    frames: int,
    size: int,
    stride: int = 1,
    channels: int = 3,
    log: Callable[[str], None] | None = None,
) -> ClipSet:
    """Every clip under ``root``, decoded and labelled by its folder, or a :class:`JobError`."""
    say = log or (lambda line: None)
    root = _descend(root)
    sources = find_clips(root)
    if not sources:
        raise JobError(
            "The dataset holds no clips: bring MP4 / MOV / WebM / MKV / GIF files, or folders of PNG / JPEG "
            "frames (one folder per clip), optionally in one folder per class."
        )
    if len(sources) > MAX_CLIPS:
        raise JobError(f"The dataset holds {len(sources):,} clips; at most {MAX_CLIPS:,} are read. Bring fewer.")
    # A clip's class is the folder that holds it (a frame folder's parent); the top level has none.
    folders = [(s.parent if s != root else root) for s in sources]
    classes = [None if f == root else relative_name(f, root) for f in folders]
    if any(c is None for c in classes) and any(c is not None for c in classes):
        loose = next(relative_name(s, root) for s, c in zip(sources, classes) if c is None)
        raise JobError(
            f"Some clips are in class folders and others are not ({loose} is at the top level): put every clip in "
            "the folder of its class, or all of them at the top level for no labels."
        )
    class_names = tuple(sorted({c for c in classes if c is not None}))
    if len(class_names) == 1:
        say(f"every clip is in one folder ({class_names[0]}): one class is no label, so the clips are unlabelled")
        class_names = ()
    decoded = [decode_clip(s, root, frames=frames, size=size, stride=stride, channels=channels) for s in sources]
    clips = np.stack(decoded)
    labels = np.array([class_names.index(c) if class_names else 0 for c in classes], np.int64)
    digests = tuple(hashlib.sha256(np.round((c + 1) * 127.5).astype(np.uint8).tobytes()).hexdigest() for c in decoded)
    names = tuple(relative_name(s, root) if s != root else root.name for s in sources)
    if len(clips) < 2:
        raise JobError("The dataset holds one clip; bring at least two, so that one can be held out.")
    say(
        f"{len(clips)} clips of {frames} frames at {size}×{size}"
        + (f" (every {stride}th frame)" if stride > 1 else "")
        + (
            f"; {len(class_names)} classes from folder names: {', '.join(class_names)}"
            if class_names
            else "; no labels"
        )
    )
    return ClipSet(clips, labels, class_names, names, digests)


def split_by_content(clips: ClipSet, holdout: float) -> tuple[ClipSet, ClipSet]:
    """(training, held-out): a clip is held out when its decoded content's hash, read as a number in
    [0, 1), is below ``holdout``; at least one clip on each side."""
    order = sorted(range(len(clips.digests)), key=lambda i: clips.digests[i])
    held = [i for i in order if int(clips.digests[i][:15], 16) / 16**15 < holdout] or order[:1]
    if len(held) == len(order):
        held = held[:-1]
    train = [i for i in order if i not in held]
    return clips.subset(train), clips.subset(held)
