"""The images MOLM's markers are trained on: the built-in photo crops, the user's own, or both.

A :class:`CropSource` hands :func:`mlcore.watermark.train.train_molm` its training and held-out
crops with the signature of :func:`mlcore.data.images.image_crops`. The user's images are opened
with the verification path's guards (format sniffing, the pixel cap, bomb and truncation checks),
shown in their EXIF orientation, and cut into random square crops of the model's size with a fixed
seed, the way the built-in crops are cut: a side between the model's size and the image's shorter
side, resized to the model's size, flipped half the time, so both textures and whole scenes occur.

Held-out crops come from held-out images when there are enough of them (every 8th image in content
order, so a re-upload in another order splits the same way); with fewer, they are fresh crops of the
same images (fresh keys are what the held-out bit accuracy is about), and the log says so.

Images are held in memory scaled to a shorter side of at most ``max(KEEP_SIDE, 4 × size)`` (a large
JPEG is also decoded at a reduced scale by :func:`~mlcore.watermark.verification.open_image`): the
crops still range from textures to the whole scene, but the finest texture of such a photo is lost.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

#: With at least this many images, every HOLD_OUT_EVERY-th (in content order) is kept for evaluation.
HOLD_OUT_EVERY = 8
MAX_TRAINING_IMAGES = 1000
#: Images are kept with their shorter side at most max(this, 4 × the model's size): a thousand
#: 16-megapixel photos would not fit in memory, and crops larger than that only repeat the scenes.
KEEP_SIDE = 512


@dataclass(frozen=True)
class UserImage:
    name: str  # the path inside the upload or image set
    sha256: str
    pixels: np.ndarray  # (H, W, 3) uint8, as shown


def read_user_images(found: Sequence[tuple[Path, str]], *, size: int) -> tuple[list[UserImage], list[str]]:
    """The readable images among ``found`` (path, shown name) and the names of those too small to
    give a crop of ``size`` pixels; a bad file raises :class:`~mlcore.watermark.verification.BadImage`."""
    from mlcore.watermark.verification import open_image

    images: list[UserImage] = []
    small: list[str] = []
    for path, name in found:
        data = path.read_bytes()
        image = open_image(data, name=name)
        if min(image.size) < size:
            small.append(f"{name} ({image.size[0]}×{image.size[1]})")
            continue
        keep = max(KEEP_SIDE, 4 * size)
        if min(image.size) > keep:
            scale = keep / min(image.size)
            shape = (max(keep, round(image.size[0] * scale)), max(keep, round(image.size[1] * scale)))
            image = image.resize(shape, Image.Resampling.BILINEAR, reducing_gap=2.0)
        images.append(UserImage(name=name, sha256=hashlib.sha256(data).hexdigest(), pixels=np.asarray(image)))
    return images, small


def random_crops(images: Sequence[np.ndarray], n: int, size: int, *, seed: int) -> np.ndarray:
    """``n`` seeded (size, size, 3) uint8 crops of ``images``, images drawn uniformly."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    for i, index in enumerate(rng.integers(0, len(images), size=n)):
        pixels = images[index]
        h, w = pixels.shape[:2]
        short = min(h, w)
        side = round(np.exp(rng.uniform(np.log(size), np.log(short))))
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = Image.fromarray(pixels[top : top + side, left : left + side])
        if side != size:
            crop = crop.resize((size, size), Image.Resampling.BILINEAR, reducing_gap=2.0)
        array = np.asarray(crop)
        out[i] = array[:, ::-1] if rng.random() < 0.5 else array
    return out


@dataclass
class CropSource:
    """Training and held-out crops from the built-in photos, the user's images, or both (half each)."""

    images: list[UserImage] = field(default_factory=list)
    builtin: bool = True
    #: Crops handed out so far, by origin and split (the job logs and records them).
    counts: dict[str, int] = field(default_factory=dict)
    training: list[UserImage] = field(init=False)
    held_out: list[UserImage] = field(init=False)

    def __post_init__(self) -> None:
        if not self.builtin and not self.images:
            raise ValueError("a crop source needs the built-in photos or some images")
        ordered = sorted(self.images, key=lambda image: image.sha256)
        if len(ordered) >= HOLD_OUT_EVERY:
            self.held_out = [im for i, im in enumerate(ordered) if i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1]
            self.training = [im for i, im in enumerate(ordered) if i % HOLD_OUT_EVERY != HOLD_OUT_EVERY - 1]
        else:
            self.held_out, self.training = ordered, ordered

    @property
    def holds_out_images(self) -> bool:
        return len(self.images) >= HOLD_OUT_EVERY

    def __call__(self, n: int, size: int, *, seed: int = 0, split: str = "train") -> np.ndarray:
        from mlcore.data.images import image_crops

        own = self.training if split == "train" else self.held_out
        mine = 0 if not own else n if not self.builtin else n // 2
        parts = []
        if mine:
            parts.append(random_crops([im.pixels for im in own], mine, size, seed=seed))
        if n - mine:
            parts.append(image_crops(n - mine, size, seed=seed, split=split))
        for origin, count in (("user", mine), ("builtin", n - mine)):
            key = f"{origin}_{split}_crops"
            self.counts[key] = self.counts.get(key, 0) + count
        return np.concatenate(parts)
