"""The post-hoc baseline: ``invisible-watermark``'s DWT-DCT (ShieldMnt/invisible-watermark, MIT).

DWT-DCT embeds each bit in the largest AC coefficient of a 4×4 DCT block of the Haar LL band of
the U and V channels; it refuses images under 256×256 pixels, so our 32×32 generations are
upscaled (bicubic) to 256×256 before embedding and every attack then acts at 256×256 — the
baseline's native operating size, which favours it on resolution-relative attacks.
"""

from __future__ import annotations

import numpy as np
from PIL import Image

BASELINE_SIZE = 256


def upscale(pixels: np.ndarray, size: int = BASELINE_SIZE) -> np.ndarray:
    return np.stack([np.asarray(Image.fromarray(p).resize((size, size), Image.Resampling.BICUBIC)) for p in pixels])


def dwtdct_embed(pixels: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Embed key bits (n, M) into (n, H, W, 3) uint8 RGB images (upscaled to 256×256 first)."""
    from imwatermark import WatermarkEncoder

    out = []
    for image, key in zip(upscale(pixels), keys, strict=True):
        encoder = WatermarkEncoder()
        encoder.set_watermark("bits", [int(b) for b in key])
        bgr = encoder.encode(np.ascontiguousarray(image[..., ::-1]), "dwtDct")
        out.append(np.clip(bgr[..., ::-1], 0, 255).astype(np.uint8))
    return np.stack(out)


def dwtdct_decode(pixels: np.ndarray, num_bits: int) -> np.ndarray:
    """(n, M) decoded bits as 0/1 floats (DWT-DCT gives hard bits) from (n, H, W, 3) uint8 RGB."""
    from imwatermark import WatermarkDecoder

    decoder = WatermarkDecoder("bits", num_bits)
    out = []
    for image in pixels:
        if image.shape[0] * image.shape[1] < BASELINE_SIZE**2:
            image = upscale(image[None])[0]
        bits = decoder.decode(np.ascontiguousarray(image[..., ::-1]), "dwtDct")
        out.append(np.asarray(bits, dtype=np.float32))
    return np.stack(out)
