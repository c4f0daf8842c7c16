"""Differentiable distortions T(·) for MOLM training (paper section 3: BCE(η(T(x̃)), κ)).

Each image of a batch gets one distortion drawn from :data:`AUGMENTATIONS` (or none), with a random
strength up to ``strength`` × its maximum, so the curriculum can ramp them in. All operate on
(B, 3, H, W) tensors in [-1, 1] and pass gradients to the markers; JPEG is the usual differentiable
stand-in (Shin & Song 2017): 8×8 block DCT of YCbCr, division by libjpeg's quality-scaled tables
and a straight-through rounding (the forward pass rounds, the backward pass is the identity).
Kornia, which the card mentions, is not needed for these few operations.

The randomness (which distortion, its strength, noise, erased squares) always comes from the CPU
generator ``g``; the tensors it produces are moved to the images' device, so a batch on a GPU gets
the same distortions it would on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

Augmentation = Callable[[torch.Tensor, float, torch.Generator], torch.Tensor]

# libjpeg's base quantisation tables (ITU T.81 Annex K).
_LUMA = torch.tensor(
    [
        16,
        11,
        10,
        16,
        24,
        40,
        51,
        61,
        12,
        12,
        14,
        19,
        26,
        58,
        60,
        55,
        14,
        13,
        16,
        24,
        40,
        57,
        69,
        56,
        14,
        17,
        22,
        29,
        51,
        87,
        80,
        62,
        18,
        22,
        37,
        56,
        68,
        109,
        103,
        77,
        24,
        35,
        55,
        64,
        81,
        104,
        113,
        92,
        49,
        64,
        78,
        87,
        103,
        121,
        120,
        101,
        72,
        92,
        95,
        98,
        112,
        100,
        103,
        99,
    ],
    dtype=torch.float32,
).reshape(8, 8)
_CHROMA = torch.full((8, 8), 99.0)
_CHROMA[:4, :4] = torch.tensor([[17, 18, 24, 47], [18, 21, 26, 66], [24, 26, 56, 99], [47, 66, 99, 99]])


def _dct_matrix(n: int = 8) -> torch.Tensor:
    k = torch.arange(n, dtype=torch.float32)
    m = torch.cos(math.pi * (2 * k[None, :] + 1) * k[:, None] / (2 * n)) * math.sqrt(2 / n)
    m[0] /= math.sqrt(2)
    return m


_DCT = _dct_matrix()


def quality_tables(quality: float) -> torch.Tensor:
    """(3, 8, 8) quantisation steps for Y, Cb, Cr at a libjpeg quality in [1, 100]."""
    q = max(1.0, min(100.0, quality))
    scale = 5000 / q if q < 50 else 200 - 2 * q
    tables = torch.stack([_LUMA, _CHROMA, _CHROMA])
    return ((tables * scale + 50) / 100).floor().clamp(1, 255)


def _round_ste(x: torch.Tensor) -> torch.Tensor:
    return x + (torch.round(x) - x).detach()


def jpeg_differentiable(x: torch.Tensor, quality: float) -> torch.Tensor:
    """Differentiable JPEG at ``quality`` (no chroma subsampling); H and W are padded to multiples of 8."""
    b, _, h, w = x.shape
    ph, pw = (-h) % 8, (-w) % 8
    rgb = F.pad((x + 1) * 127.5, (0, pw, 0, ph), mode="replicate")
    r, g, bl = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    y = 0.299 * r + 0.587 * g + 0.114 * bl
    cb = -0.168736 * r - 0.331264 * g + 0.5 * bl + 128
    cr = 0.5 * r - 0.418688 * g - 0.081312 * bl + 128
    ycc = torch.stack([y, cb, cr], 1) - 128  # (B, 3, H, W)
    H, W = ycc.shape[-2:]
    blocks = ycc.reshape(b, 3, H // 8, 8, W // 8, 8).permute(0, 1, 2, 4, 3, 5)  # (B, 3, h, w, 8, 8)
    d = _DCT.to(x)
    coeffs = d @ blocks @ d.T
    table = quality_tables(quality).to(x)[None, :, None, None]
    coeffs = _round_ste(coeffs / table) * table
    ycc = (d.T @ coeffs @ d).permute(0, 1, 2, 4, 3, 5).reshape(b, 3, H, W) + 128
    y, cb, cr = ycc[:, 0], ycc[:, 1] - 128, ycc[:, 2] - 128
    rgb = torch.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], 1)
    return (rgb[..., :h, :w] / 127.5 - 1).clamp(-1, 1)


def _uniform(g: torch.Generator, lo: float, hi: float) -> float:
    return lo + (hi - lo) * torch.rand((), generator=g).item()


def _affine(x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    grid = F.affine_grid(theta.expand(len(x), 2, 3), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def resized_crop(x: torch.Tensor, scale: float, cx: float = 0.0, cy: float = 0.0) -> torch.Tensor:
    """Keep a square covering ``scale`` of the side (offset cx, cy in [-1, 1] of the slack), resize back."""
    slack = 1 - scale
    theta = torch.tensor([[scale, 0, cx * slack], [0, scale, cy * slack]], dtype=x.dtype, device=x.device)
    return _affine(x, theta[None])


def rotate(x: torch.Tensor, degrees: float) -> torch.Tensor:
    a = math.radians(degrees)
    theta = torch.tensor(
        [[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0]], dtype=x.dtype, device=x.device
    )
    return _affine(x, theta[None])


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    radius = max(1, math.ceil(2 * sigma))
    coords = torch.arange(-radius, radius + 1, dtype=x.dtype)
    k = torch.exp(-(coords**2) / (2 * sigma**2))
    k = (k / k.sum()).to(x)
    c = x.shape[1]
    x = F.pad(x, (radius, radius, radius, radius), mode="reflect")
    x = F.conv2d(x, k.view(1, 1, 1, -1).expand(c, 1, 1, -1), groups=c)
    return F.conv2d(x, k.view(1, 1, -1, 1).expand(c, 1, -1, 1), groups=c)


def resize(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Down- (or up-) scale by ``factor`` and back to the original size (information lost on the way)."""
    h, w = x.shape[-2:]
    small = F.interpolate(
        x,
        size=(max(4, round(h * factor)), max(4, round(w * factor))),
        mode="bilinear",
        antialias=True,
        align_corners=False,
    )
    return F.interpolate(small, size=(h, w), mode="bilinear", align_corners=False)


def brightness_contrast(x: torch.Tensor, brightness: float, contrast: float) -> torch.Tensor:
    """On [0, 1]: y = clamp((x − m)·contrast + m) · brightness, m the image mean."""
    u = (x + 1) / 2
    m = u.mean(dim=(1, 2, 3), keepdim=True)
    u = ((u - m) * contrast + m) * brightness
    return u.clamp(0, 1) * 2 - 1


def erase(x: torch.Tensor, fraction: float, g: torch.Generator) -> torch.Tensor:
    h, w = x.shape[-2:]
    side = max(1, round(math.sqrt(fraction) * h))
    top = int(torch.randint(0, h - side + 1, (), generator=g))
    left = int(torch.randint(0, w - side + 1, (), generator=g))
    mask = torch.ones_like(x[:1, :1])
    mask[..., top : top + side, left : left + side] = 0
    return x * mask


# Each training distortion at strength s ∈ [0, 1] (1 = the hardest setting trained on).
AUGMENTATIONS: dict[str, Augmentation] = {
    "jpeg": lambda x, s, g: jpeg_differentiable(x, 95 - s * _uniform(g, 0, 55)),
    "crop": lambda x, s, g: resized_crop(x, 1 - s * _uniform(g, 0, 0.5), _uniform(g, -1, 1), _uniform(g, -1, 1)),
    "rotate": lambda x, s, g: rotate(x, s * _uniform(g, -30, 30)),
    "resize": lambda x, s, g: resize(x, 1 - s * _uniform(g, 0, 0.5)),
    "blur": lambda x, s, g: gaussian_blur(x, 0.3 + s * _uniform(g, 0, 0.9)),
    "noise": lambda x, s, g: (x + torch.randn(x.shape, generator=g).to(x) * 2 * s * _uniform(g, 0, 0.06)).clamp(-1, 1),
    "color": lambda x, s, g: brightness_contrast(x, 1 + s * _uniform(g, -0.3, 0.6), 1 + s * _uniform(g, -0.3, 0.6)),
    "erase": lambda x, s, g: erase(x, s * _uniform(g, 0, 0.25), g),
}


def random_distortion(x: torch.Tensor, *, strength: float, p: float, g: torch.Generator) -> torch.Tensor:
    """T(x): split the batch into len(AUGMENTATIONS) + 1 groups; group 0 stays clean (probability 1 − p)."""
    if strength <= 0 or p <= 0:
        return x
    names = list(AUGMENTATIONS)
    clean = torch.rand(len(x), generator=g) >= p
    choice = torch.randint(0, len(names), (len(x),), generator=g)
    out = x.clone()
    for i, name in enumerate(names):
        idx = torch.nonzero((choice == i) & ~clean).flatten().to(x.device)
        if len(idx):
            out[idx] = AUGMENTATIONS[name](x[idx], strength, g)
    return out
