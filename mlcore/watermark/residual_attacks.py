"""The attack layer T(·) for training the embed path end to end: real attacks forward, gradients backward.

The embed path is measured after a real JPEG-75 (Pillow, chroma subsampled 4:2:0) and a real 0.5
resize, so the training attacks run the *real* operation in the forward pass and a differentiable
stand-in in the backward pass (``proxy + (real − proxy).detach()``: the value is the real one, the
gradient the proxy's). For JPEG the proxy is Shin & Song's (2017) differentiable JPEG — YCbCr,
4:2:0 chroma, 8×8 block DCT, division by libjpeg's tables — with the *cubic* rounding
round(u) + (u − round(u))³ rather than a straight-through one: a straight-through rounding makes
the whole proxy the identity (every other step is linear), while the cubic one passes little
gradient to a coefficient the quantiser zeroes and so tells the markers which coefficients survive.
Resizing, blur and noise are differentiable as they are.

Every attack takes and returns (B, 3, H, W) in [-1, 1]; the caller quantises to 8 bits first, as
a written PNG would be. Randomness comes from a NumPy generator, so a step's attacks follow from
its seed (resumable training).
"""

from __future__ import annotations

import io
import math

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from mlcore.watermark.augment import _DCT, gaussian_blur, quality_tables


def quantise(x: torch.Tensor) -> torch.Tensor:
    """To 8-bit levels in the forward pass (a written PNG), the identity backward."""
    levels = ((x.clamp(-1, 1) + 1) * 127.5).round() / 127.5 - 1
    return x + (levels - x).detach()


def _cubic_round(u: torch.Tensor) -> torch.Tensor:
    r = torch.round(u)
    return r.detach() + (u - r.detach()) ** 3


def jpeg_proxy(x: torch.Tensor, quality: float) -> torch.Tensor:
    """A differentiable JPEG at ``quality`` with 4:2:0 chroma (H and W padded to multiples of 16)."""
    _, _, h, w = x.shape
    ph, pw = (-h) % 16, (-w) % 16
    rgb = F.pad((x + 1) * 127.5, (0, pw, 0, ph), mode="replicate")
    r, g, bl = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    y = 0.299 * r + 0.587 * g + 0.114 * bl - 128
    cb = -0.168736 * r - 0.331264 * g + 0.5 * bl
    cr = 0.5 * r - 0.418688 * g - 0.081312 * bl
    chroma = F.avg_pool2d(torch.stack([cb, cr], 1), 2)  # 4:2:0
    tables = quality_tables(quality).to(x)
    d = _DCT.to(x)

    def code(plane: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        n, c, hh, ww = plane.shape
        blocks = plane.reshape(n, c, hh // 8, 8, ww // 8, 8).permute(0, 1, 2, 4, 3, 5)
        coeffs = _cubic_round((d @ blocks @ d.T) / table) * table
        return (d.T @ coeffs @ d).permute(0, 1, 2, 4, 3, 5).reshape(n, c, hh, ww)

    y = code(y[:, None], tables[0])[:, 0] + 128
    chroma = F.interpolate(code(chroma, tables[1]), scale_factor=2, mode="nearest")
    cb, cr = chroma[:, 0], chroma[:, 1]
    out = torch.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], 1)
    return (out[..., :h, :w] / 127.5 - 1).clamp(-1, 1)


def jpeg_real(x: torch.Tensor, quality: int) -> torch.Tensor:
    """Pillow's JPEG (libjpeg, 4:2:0) of each image, decoded again; no gradient."""
    out = []
    for image in ((x.detach().clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).cpu().numpy():
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=quality)
        out.append(np.asarray(Image.open(buffer).convert("RGB")))
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).to(x) / 127.5 - 1.0


def jpeg(x: torch.Tensor, quality: int) -> torch.Tensor:
    """The real JPEG's value with the proxy's gradient (see the module docstring)."""
    proxy = jpeg_proxy(x, quality)
    return proxy + (jpeg_real(x, quality) - proxy).detach()


def rescale(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Down (or up) by ``factor`` with an antialiased bicubic, quantised, then back with a bilinear.

    The 0.5 resize the bench applies (Pillow bicubic down) read back by the reader's bilinear
    resize to the working grid; ``factor`` > 1 emulates a mark computed on the working grid and
    written at a larger photo size, then read at the working grid again.
    """
    h, w = x.shape[-2:]
    size = (max(4, round(h * factor)), max(4, round(w * factor)))
    other = F.interpolate(x, size=size, mode="bicubic", antialias=factor < 1, align_corners=False)
    other = quantise(other)
    return F.interpolate(other, size=(h, w), mode="bilinear", antialias=factor > 1, align_corners=False)


#: Attack name → probability in a training batch.
ATTACK_MIX: dict[str, float] = {
    "none": 0.2,
    "jpeg": 0.25,
    "photo-jpeg": 0.1,
    "resize": 0.2,
    "resize-jpeg": 0.1,
    "blur": 0.08,
    "noise": 0.07,
}


def attack(x: torch.Tensor, name: str, rng: np.random.Generator) -> torch.Tensor:
    """One named attack at a random strength, the same for the whole of ``x``."""
    if name == "none":
        return x
    if name == "jpeg":
        return jpeg(x, int(rng.integers(50, 91)))
    if name == "photo-jpeg":
        # The mark upsampled to a larger photo, compressed there, read back at the working grid.
        factor = float(rng.uniform(1.2, 2.5))
        h, w = x.shape[-2:]
        big = quantise(F.interpolate(x, scale_factor=factor, mode="bicubic", align_corners=False))
        big = jpeg(big, int(rng.integers(50, 91)))
        return F.interpolate(big, size=(h, w), mode="bilinear", antialias=True, align_corners=False)
    if name == "resize":
        return rescale(x, float(rng.uniform(0.4, 0.8)))
    if name == "resize-jpeg":
        return jpeg(quantise(rescale(x, float(rng.uniform(0.5, 0.8)))), int(rng.integers(60, 91)))
    if name == "blur":
        return gaussian_blur(x, float(rng.uniform(0.4, 1.0)))
    if name == "noise":
        noise = torch.from_numpy(rng.standard_normal(x.shape)).to(x)
        return (x + noise * float(rng.uniform(0.0, 0.03))).clamp(-1, 1)
    raise ValueError(f"unknown attack {name!r}")


def random_attacks(x: torch.Tensor, rng: np.random.Generator, *, mix: dict[str, float] | None = None) -> torch.Tensor:
    """Each image of ``x`` under its own attack drawn from ``mix`` (default :data:`ATTACK_MIX`)."""
    mix = mix or ATTACK_MIX
    names = list(mix)
    weights = np.array([mix[n] for n in names])
    choice = rng.choice(len(names), size=len(x), p=weights / weights.sum())
    return torch.cat([attack(x[i : i + 1], names[c], rng) for i, c in enumerate(choice)])


def psnr_of_mark(mark: torch.Tensor) -> float:
    """PSNR (dB, on the [0, 1] scale) of adding ``mark`` (in [-1, 1] units) to an image."""
    mse = float(((mark / 2) ** 2).mean())
    return 10 * math.log10(1 / max(mse, 1e-12))
