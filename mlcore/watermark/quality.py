"""Image fidelity: PSNR, SSIM, and MOLM's imperceptibility loss.

- PSNR = 10·log10(1 / MSE) on images scaled to [0, 1].
- SSIM (Wang et al. 2004, eq. 13) with an 11×11 Gaussian window, σ = 1.5, C1 = (0.01)², C2 = (0.03)²,
  averaged over channels and positions (no padding: only full windows count).
- L_imp = MSE + (1 − SSIM) between the routed and the frozen decoder's outputs: the method card's
  offline stand-in for LPIPS, whose weights would have to be downloaded.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def _gaussian_window(size: int = 11, sigma: float = 1.5, channels: int = 3) -> torch.Tensor:
    coords = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(coords**2) / (2 * sigma**2))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(channels, 1, size, size).contiguous()


def ssim(a: torch.Tensor, b: torch.Tensor, *, reduce: bool = True) -> torch.Tensor:
    """SSIM of (B, C, H, W) images in [-1, 1] (compared on the [0, 1] scale); per image if not ``reduce``."""
    x, y = (a + 1) / 2, (b + 1) / 2
    channels = x.shape[1]
    size = min(11, x.shape[-1], x.shape[-2])
    window = _gaussian_window(size, 1.5, channels).to(x)

    def blur(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, window, groups=channels)

    mu_x, mu_y = blur(x), blur(y)
    sigma_x = blur(x * x) - mu_x**2
    sigma_y = blur(y * y) - mu_y**2
    sigma_xy = blur(x * y) - mu_x * mu_y
    c1, c2 = 0.01**2, 0.03**2
    s = ((2 * mu_x * mu_y + c1) * (2 * sigma_xy + c2)) / ((mu_x**2 + mu_y**2 + c1) * (sigma_x + sigma_y + c2))
    per_image = s.flatten(1).mean(1)
    return per_image.mean() if reduce else per_image


def psnr(a: torch.Tensor, b: torch.Tensor, *, reduce: bool = True) -> torch.Tensor:
    """PSNR in dB of (B, C, H, W) images in [-1, 1] (on the [0, 1] scale); per image if not ``reduce``."""
    mse = (((a - b) / 2) ** 2).flatten(1).mean(1).clamp_min(1e-10)
    per_image = 10 * torch.log10(1 / mse)
    return per_image.mean() if reduce else per_image


def imperceptibility(routed: torch.Tensor, frozen: torch.Tensor) -> torch.Tensor:
    """L_imp = MSE + (1 − SSIM), the card's LPIPS substitute (section 2, "Perceptual loss")."""
    return F.mse_loss(routed, frozen) + (1 - ssim(routed, frozen))


def psnr_from_mse(mse: float) -> float:
    return 10 * math.log10(1 / max(mse, 1e-10))
