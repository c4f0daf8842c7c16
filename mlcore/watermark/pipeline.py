"""Procedures on a watermark-markers directory: load it, generate under a key, read keys back.

A ``watermark-markers`` directory (the zoo's ``molm-tiny``, or one a ``watermark-train`` job
registered) holds the generator (``vae/``, optionally ``unet/`` + ``scheduler/``), ``markers/``,
``extractor/``, ``card.json`` and optionally ``ae2/`` (an independently trained autoencoder used
only by the regeneration attack).

A bundle loads on the CPU; ``load_bundle(..., device=...)`` or :meth:`Bundle.to` moves every model.
The procedures here take and return CPU data (latents on any device, uint8 arrays, numpy bits).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlcore.watermark.extractor import Extractor, load_extractor
from mlcore.watermark.generator import Generator, GeneratorError, load_generator, load_vae, to_uint8
from mlcore.watermark.markers import Markers

#: The shortest key MOLM may carry here: 28 bits cannot reach a low FPR among many keys (card §2).
MIN_KEY_BITS = 48


@dataclass
class Bundle:
    generator: Generator
    markers: Markers
    extractor: Extractor
    card: dict[str, Any] = field(default_factory=dict)
    independent_vae: Any | None = None

    @property
    def num_bits(self) -> int:
        return self.markers.num_bits

    def to(self, device: torch.device | str) -> Bundle:
        """Every model of the bundle on ``device`` (in place); returns self. The markers follow the VAE they hook."""
        self.generator.to(device)
        self.markers.to(device)
        self.extractor.to(device)
        if self.independent_vae is not None:
            self.independent_vae.to(device)
        return self


def load_bundle(folder: Path, *, need_unet: bool = False, device: torch.device | str = "cpu") -> Bundle:
    """Everything in a watermark-markers directory on ``device``, markers attached; ``GeneratorError`` if not."""
    folder = Path(folder)
    for part in ("markers", "extractor"):
        if not (folder / part / "config.json").is_file():
            raise GeneratorError(f"{folder.name} is not a watermark-markers directory: {part}/config.json is missing")
    generator = load_generator(folder, need_unet=need_unet)
    markers = Markers.from_pretrained(folder / "markers", torch_dtype=torch.float32).eval().requires_grad_(False)
    try:
        markers.attach(generator.vae)
    except ValueError as exc:
        raise GeneratorError(f"{folder.name}: {exc}") from None
    extractor = load_extractor(folder / "extractor")
    if extractor.num_bits != markers.num_bits:
        raise GeneratorError(
            f"{folder.name}: the extractor reads {extractor.num_bits} bits, the markers carry {markers.num_bits}"
        )
    card = json.loads((folder / "card.json").read_text()) if (folder / "card.json").is_file() else {}
    ae2 = load_vae(folder / "ae2") if (folder / "ae2" / "config.json").is_file() else None
    bundle = Bundle(generator=generator, markers=markers, extractor=extractor, card=card, independent_vae=ae2)
    return bundle.to(device)


@torch.no_grad()
def decode_under_keys(
    bundle: Bundle, latents: torch.Tensor, keys: torch.Tensor | None, *, batch_size: int = 256
) -> np.ndarray:
    """(n, H, W, 3) uint8 images of ``latents``, watermarked with ``keys`` ((n, M) or (M,)); clean if None."""
    out = []
    for start in range(0, len(latents), batch_size):
        z = latents[start : start + batch_size]
        if keys is None:
            x = bundle.generator.decode(z)
        else:
            k = keys if keys.ndim == 1 else keys[start : start + batch_size]
            with bundle.markers.keyed(k):
                x = bundle.generator.decode(z)
        out.append(to_uint8(x))
    return np.concatenate(out) if out else np.zeros((0, 1, 1, 3), np.uint8)


@torch.no_grad()
def read_bits(extractor: Extractor, pixels: np.ndarray, *, batch_size: int = 512) -> np.ndarray:
    """(n, M) bit probabilities for uint8 images (n, H, W, 3) — the same path as :meth:`Extractor.decode`."""
    from mlcore.watermark.generator import from_uint8

    extractor.eval()
    out = []
    for start in range(0, len(pixels), batch_size):
        batch = from_uint8(pixels[start : start + batch_size]).to(extractor.device)
        out.append(torch.sigmoid(extractor(batch)).cpu().numpy())
    return np.concatenate(out) if out else np.zeros((0, extractor.num_bits), np.float32)


def key_tensor(bits: str, num_bits: int) -> torch.Tensor:
    """A '0101…' key as an (M,) float tensor; ``ValueError`` naming the mismatch otherwise."""
    from mlcore.watermark.markers import parse_key

    return torch.from_numpy(parse_key(bits, num_bits))
