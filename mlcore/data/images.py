"""Offline natural images: seeded square crops of the photos that ship with scikit-image and scikit-learn.

Sources (no network, read straight from the installed packages' data folders):

- scikit-image's sample photos (``astronaut``, ``chelsea``, ``coffee``, ``camera``, ``rocket``, ...);
- scikit-image's ``lfw_subset`` (200 grey 25×25 faces);
- scikit-learn's ``china.jpg`` and ``flower.jpg`` and its 8×8 ``digits`` (upscaled, a few).

:func:`image_crops` draws crops at a random scale, position and flip, resized to ``size`` — the
augmentation that turns ~30 photos into an unbounded training stream. Sources are split by
*photo*, not by crop, so the ``test`` split holds photos the models never saw.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from PIL import Image

#: scikit-image sample photos (file names in ``skimage/data``); grey ones are replicated to RGB.
SKIMAGE_PHOTOS: tuple[str, ...] = (
    "astronaut.png",
    "brick.png",
    "camera.png",
    "cell.png",
    "chelsea.png",
    "coffee.png",
    "coins.png",
    "color.png",
    "grass.png",
    "gravel.png",
    "horse.png",
    "hubble_deep_field.jpg",
    "ihc.png",
    "microaneurysms.png",
    "moon.png",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "page.png",
    "retina.jpg",
    "rocket.jpg",
    "text.png",
    "logo.png",
)
#: Photos held out for the ``test`` split (never seen in training).
TEST_PHOTOS: frozenset[str] = frozenset({"coffee.png", "rocket.jpg", "flower.jpg", "motorcycle_right.png"})
SPLITS = ("train", "test")


@dataclass(frozen=True)
class Photo:
    name: str
    pixels: np.ndarray  # (H, W, 3) uint8


def skimage_dir() -> Path:
    """The sample data that ships inside scikit-image (read in place: nothing is downloaded)."""
    import skimage

    return Path(os.path.dirname(skimage.__file__)) / "data"


def _rgb(array: np.ndarray) -> np.ndarray:
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=2)
    if array.shape[2] == 4:
        array = array[..., :3]
    if array.dtype != np.uint8:
        lo, hi = float(array.min()), float(array.max())
        array = ((array - lo) / max(hi - lo, 1e-8) * 255).round().astype(np.uint8)
    return np.ascontiguousarray(array)


@cache
def photos() -> tuple[Photo, ...]:
    """Every offline source image as RGB uint8, in a fixed order."""
    from sklearn.datasets import load_digits, load_sample_images

    out: list[Photo] = []
    folder = skimage_dir()
    for name in SKIMAGE_PHOTOS:
        path = folder / name
        if path.is_file():
            with Image.open(path) as image:
                out.append(Photo(name, _rgb(np.asarray(image.convert("RGB")))))
    samples = load_sample_images()
    for name, pixels in zip(samples.filenames, samples.images, strict=True):
        out.append(Photo(Path(name).name, _rgb(pixels)))
    faces = np.load(folder / "lfw_subset.npy")  # (200, 25, 25) floats in [0, 1]
    for i, face in enumerate(faces):
        out.append(Photo(f"lfw_{i:03d}", _rgb((face * 255).round().astype(np.uint8))))
    digits = load_digits().images[:64]  # (8, 8) in 0..16: a few, upscaled, as flat graphic content
    for i, digit in enumerate(digits):
        big = Image.fromarray((digit * 255 / 16).astype(np.uint8)).resize((32, 32), Image.Resampling.BICUBIC)
        out.append(Photo(f"digit_{i:02d}", _rgb(np.asarray(big))))
    return tuple(out)


def split_photos(split: str) -> tuple[Photo, ...]:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; use one of {SPLITS}")
    # Faces and digits: every fifth one is held out, so both splits see all three kinds of content.
    held = {
        p.name
        for p in photos()
        if p.name in TEST_PHOTOS or (p.name[:4] in ("lfw_", "digi") and int(p.name[-2:]) % 5 == 0)
    }
    return tuple(p for p in photos() if (p.name in held) == (split == "test"))


def image_crops(n: int, size: int = 32, *, seed: int = 0, split: str = "train") -> np.ndarray:
    """``n`` seeded RGB crops (n, size, size, 3) uint8: random photo, scale, position and flip.

    Large photos are drawn 3× as often as faces or digits (they hold most of the variety). A crop
    covers between ``size`` pixels and the photo's shorter side, so both textures and whole scenes occur.
    """
    pool = split_photos(split)
    weights = np.array([3.0 if min(p.pixels.shape[:2]) >= 128 else 0.15 for p in pool])
    weights /= weights.sum()
    rng = np.random.default_rng(seed)
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    for i, index in enumerate(rng.choice(len(pool), size=n, p=weights)):
        pixels = pool[index].pixels
        h, w = pixels.shape[:2]
        short = min(h, w)
        side = round(np.exp(rng.uniform(np.log(min(size, short)), np.log(short))))
        top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = Image.fromarray(pixels[top : top + side, left : left + side])
        if side != size:
            crop = crop.resize((size, size), Image.Resampling.BILINEAR, reducing_gap=2.0)
        array = np.asarray(crop)
        out[i] = array[:, ::-1] if rng.random() < 0.5 else array
    return out


def build_image_crops(target: Path) -> None:
    """Dataset builder (``mlcore.data.registry``): 2,048 train and 512 test 32×32 crops as PNGs."""
    for split, n, seed in (("train", 2048, 0), ("test", 512, 1)):
        folder = target / split
        folder.mkdir(parents=True, exist_ok=True)
        for i, crop in enumerate(image_crops(n, 32, seed=seed, split=split)):
            Image.fromarray(crop).save(folder / f"{i:05d}.png")
