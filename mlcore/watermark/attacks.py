"""The robustness suite (WAVES-style): distortions, regeneration, averaging, forgery, queries.

Every *image* attack maps (n, H, W, 3) uint8 → (n, H, W, 3) uint8 with fixed, named settings, so a
result row means the same thing in every job and benchmark. They act on 8-bit images (what a
verifier receives), use the real codecs (Pillow's JPEG, not the training approximation) and
never see the key. Families:

- distortions: JPEG 90 → 10, resized crop (area kept: 0.7, 0.5), rotation, resize, blur, noise,
  brightness, contrast, erasing, and a combination;
- regeneration: encode–decode through the generator's own VAE (the attack WAVES finds hardest
  for decoder-bound marks), through an *independently trained* autoencoder, and noise-then-denoise
  through the latent diffusion model;
- :func:`averaging_pattern` / :func:`remove_pattern` / :func:`forge`: estimate a key's pattern as
  mean(watermarked) − mean(clean) over many images, subtract it (removal) or add it to clean
  images (forgery);
- :func:`query_attack`: a black-box attack that only sees the verifier's score (NES gradient
  estimates, Ilyas et al. 2018) under an L∞ budget.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageEnhance, ImageFilter

Pixels = np.ndarray  # (n, H, W, 3) uint8


@dataclass(frozen=True)
class Attack:
    name: str
    family: str
    label: str
    apply: Callable[[Pixels, np.random.Generator], Pixels]


def _per_image(fn: Callable[[Image.Image], Image.Image]) -> Callable[[Pixels, np.random.Generator], Pixels]:
    def apply(pixels: Pixels, rng: np.random.Generator) -> Pixels:
        return np.stack([np.asarray(fn(Image.fromarray(p)).convert("RGB")) for p in pixels])

    return apply


def jpeg(quality: int) -> Callable[[Image.Image], Image.Image]:
    def fn(image: Image.Image) -> Image.Image:
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=quality)
        return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")

    return fn


def resized_crop(area: float) -> Callable[[Pixels, np.random.Generator], Pixels]:
    """Keep a random square of ``area`` × the image's area, resize it back (torchvision's semantics)."""

    def apply(pixels: Pixels, rng: np.random.Generator) -> Pixels:
        out = []
        for p in pixels:
            h, w = p.shape[:2]
            side = max(1, round(np.sqrt(area) * min(h, w)))
            top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
            crop = Image.fromarray(p[top : top + side, left : left + side])
            out.append(np.asarray(crop.resize((w, h), Image.Resampling.BILINEAR)))
        return np.stack(out)

    return apply


def rotation(degrees: float) -> Callable[[Image.Image], Image.Image]:
    return lambda image: image.rotate(degrees, resample=Image.Resampling.BILINEAR)


def rescale(factor: float) -> Callable[[Image.Image], Image.Image]:
    def fn(image: Image.Image) -> Image.Image:
        w, h = image.size
        small = image.resize((max(1, round(w * factor)), max(1, round(h * factor))), Image.Resampling.BILINEAR)
        return small.resize((w, h), Image.Resampling.BILINEAR)

    return fn


def noise(sigma: float) -> Callable[[Pixels, np.random.Generator], Pixels]:
    def apply(pixels: Pixels, rng: np.random.Generator) -> Pixels:
        noisy = pixels.astype(np.float32) + rng.normal(0, sigma * 255, pixels.shape)
        return np.clip(np.round(noisy), 0, 255).astype(np.uint8)

    return apply


def erasing(area: float) -> Callable[[Pixels, np.random.Generator], Pixels]:
    def apply(pixels: Pixels, rng: np.random.Generator) -> Pixels:
        out = pixels.copy()
        h, w = pixels.shape[1:3]
        side = max(1, round(np.sqrt(area) * min(h, w)))
        for p in out:
            top, left = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
            p[top : top + side, left : left + side] = 0
        return out

    return apply


def chain(*steps: Callable[[Pixels, np.random.Generator], Pixels]) -> Callable[[Pixels, np.random.Generator], Pixels]:
    def apply(pixels: Pixels, rng: np.random.Generator) -> Pixels:
        for step in steps:
            pixels = step(pixels, rng)
        return pixels

    return apply


def distortions() -> list[Attack]:
    """The fixed distortion settings of the suite (no model needed)."""
    enhance = ImageEnhance
    return [
        Attack("none", "clean", "No attack", lambda p, r: p),
        *[Attack(f"jpeg-{q}", "jpeg", f"JPEG quality {q}", _per_image(jpeg(q))) for q in (90, 70, 50, 30, 10)],
        Attack("crop-0.7", "geometry", "Resized crop, 70% of the area", resized_crop(0.7)),
        Attack("crop-0.5", "geometry", "Resized crop, 50% of the area", resized_crop(0.5)),
        Attack("rotate-15", "geometry", "Rotation 15°", _per_image(rotation(15))),
        Attack("rotate-45", "geometry", "Rotation 45°", _per_image(rotation(45))),
        Attack("resize-0.5", "geometry", "Resize to 50% and back", _per_image(rescale(0.5))),
        Attack(
            "blur-1", "signal", "Gaussian blur σ = 1 px", _per_image(lambda i: i.filter(ImageFilter.GaussianBlur(1.0)))
        ),
        Attack("noise-0.05", "signal", "Gaussian noise σ = 0.05", noise(0.05)),
        Attack("noise-0.1", "signal", "Gaussian noise σ = 0.1", noise(0.1)),
        Attack(
            "brightness-1.5",
            "photometric",
            "Brightness × 1.5",
            _per_image(lambda i: enhance.Brightness(i).enhance(1.5)),
        ),
        Attack(
            "brightness-2", "photometric", "Brightness × 2", _per_image(lambda i: enhance.Brightness(i).enhance(2.0))
        ),
        Attack("contrast-1.5", "photometric", "Contrast × 1.5", _per_image(lambda i: enhance.Contrast(i).enhance(1.5))),
        Attack("erase-0.25", "occlusion", "Erase 25% of the area", erasing(0.25)),
        Attack(
            "combo",
            "combination",
            "Crop 70% + JPEG 70 + brightness × 1.2",
            chain(resized_crop(0.7), _per_image(jpeg(70)), _per_image(lambda i: enhance.Brightness(i).enhance(1.2))),
        ),
    ]


def _through_vae(vae: Any, pixels: Pixels) -> Pixels:
    from mlcore.watermark.generator import from_uint8, to_uint8

    x = from_uint8(pixels)
    size = int(vae.config.sample_size)
    h, w = x.shape[-2:]
    if (h, w) != (size, size):
        x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", antialias=True)
    with torch.no_grad():
        out = torch.cat([vae.decode(vae.encode(x[i : i + 256]).latent_dist.mean).sample for i in range(0, len(x), 256)])
    if (h, w) != (size, size):
        out = torch.nn.functional.interpolate(out, size=(h, w), mode="bilinear")
    return to_uint8(out)


def regeneration(vae: Any, *, name: str, label: str) -> Attack:
    """Encode and decode through ``vae`` (no markers attached): the regeneration attack."""
    return Attack(name, "regeneration", label, lambda p, r: _through_vae(vae, p))


def diffusion_regeneration(generator: Any, *, t_fraction: float = 0.2, steps: int = 10) -> Attack:
    """Noise the latent to t = ``t_fraction`` × T and denoise with the latent DDPM (DDIM steps)."""

    def apply(pixels: Pixels, rng: np.random.Generator) -> Pixels:
        from mlcore.watermark.generator import from_uint8, to_uint8

        scheduler, unet = generator.scheduler, generator.unet
        x = from_uint8(pixels)
        with torch.no_grad():
            z = generator.encode(x) * generator.scaling_factor
            scheduler.set_timesteps(steps)
            timesteps = [t for t in scheduler.timesteps if t <= int(t_fraction * scheduler.config.num_train_timesteps)]
            noise_ = torch.from_numpy(rng.standard_normal(z.shape).astype(np.float32))
            z = scheduler.add_noise(z, noise_, torch.tensor([int(timesteps[0])]))
            for t in timesteps:
                z = scheduler.step(unet(z, t).sample, t, z).prev_sample
            return to_uint8(generator.decode(z / generator.scaling_factor))

    return Attack(
        f"regen-diffusion-{t_fraction:g}", "regeneration", f"Noise to t={t_fraction:g}·T, denoise (DDIM)", apply
    )


def averaging_pattern(watermarked: Pixels, clean: Pixels) -> np.ndarray:
    """The attacker's estimate of one key's pattern: mean(watermarked) − mean(clean), float in pixels."""
    return watermarked.astype(np.float64).mean(0) - clean.astype(np.float64).mean(0)


def remove_pattern(pixels: Pixels, pattern: np.ndarray) -> Pixels:
    return np.clip(np.round(pixels.astype(np.float64) - pattern), 0, 255).astype(np.uint8)


def forge(pixels: Pixels, pattern: np.ndarray) -> Pixels:
    """Stamp the estimated pattern onto clean images (a forgery attempt)."""
    return np.clip(np.round(pixels.astype(np.float64) + pattern), 0, 255).astype(np.uint8)


def query_attack(
    score: Callable[[Pixels], np.ndarray],
    pixels: Pixels,
    *,
    epsilon: float = 8 / 255,
    queries: int = 200,
    samples: int = 10,
    sigma: float = 2 / 255,
    step: float = 1 / 255,
    seed: int = 0,
) -> tuple[Pixels, int]:
    """Lower ``score`` (the verifier's per-image confidence that the key is present) by NES.

    Each iteration spends ``samples`` antithetic pairs of queries to estimate the gradient of the
    score, then takes a signed step, projected onto the L∞ ball of radius ``epsilon`` around the
    input. Only ``score``'s outputs are used: no gradients, no weights. Returns the attacked
    images and the number of queries used per image.
    """
    rng = np.random.default_rng(seed)
    x0 = pixels.astype(np.float32) / 255
    x = x0.copy()
    used = 0
    while used + 2 * samples <= queries:
        grad = np.zeros_like(x)
        for _ in range(samples):
            u = rng.standard_normal(x.shape).astype(np.float32)
            plus = score(_quantise(x + sigma * u))
            minus = score(_quantise(x - sigma * u))
            grad += (plus - minus)[:, None, None, None] * u
        used += 2 * samples
        x = np.clip(x - step * np.sign(grad), x0 - epsilon, x0 + epsilon).clip(0, 1)
    return _quantise(x), used


def _quantise(x: np.ndarray) -> Pixels:
    return np.clip(np.round(x * 255), 0, 255).astype(np.uint8)
