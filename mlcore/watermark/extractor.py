"""The MOLM extractor η (paper section 3, "Extractor"): an image in, one logit per key bit out.

The authors use a ResNet-50; on a CPU we use a small CNN built the way the method card's trial
suggests (section 4): BatchNorm after every convolution, strided convolutions down to a 4×4 map
and *no* global pooling before the head, so the spatial layout of a faint additive pattern
survives into the bit logits. Images enter as RGB in [-1, 1] (the VAE's output range) at
``image_size``; :meth:`Extractor.decode` converts any PIL image (mode, size) the same way the
training images were seen, so the portal, the verify queue and the jobs all read bits alike.

**Why a linear read-out** (``linear_readout=True``, the zoo's setting): on its
own the CNN did not learn even 48 *fixed* additive ±patterns at 36 dB PSNR within 160 steps — the
content dominates its activations and the strided bottleneck must discover each template. A linear
layer over the high-passed pixels is the matched filter for such patterns and learns them in tens of
steps, which also gives the markers a useful gradient from the start; the CNN path (zero-initialised
read-out, so nothing changes for old checkpoints) carries what is not a fixed template (crops, JPEG).

The class is a diffusers ``ModelMixin`` + ``ConfigMixin``: ``save_pretrained`` / ``from_pretrained``
round-trip it, and :func:`load_extractor` opens such a directory for inference.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from PIL import Image
from torch import nn


def _block(cin: int, cout: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class Extractor(ModelMixin, ConfigMixin):
    """η: (B, 3, H, W) images in [-1, 1] → (B, num_bits) logits; bit = 1 where the logit is positive."""

    @register_to_config
    def __init__(
        self,
        num_bits: int = 48,
        image_size: int = 32,
        channels: tuple[int, ...] = (32, 64, 96),
        head_channels: int = 32,
        hidden: int = 256,
        linear_readout: bool = False,
    ) -> None:
        super().__init__()
        if image_size % 2 ** len(channels):
            raise ValueError(f"image_size {image_size} must be divisible by 2**{len(channels)} (one halving per stage)")
        layers: list[nn.Module] = [_block(3, channels[0], 1)]
        cin = channels[0]
        for cout in channels:
            # Two 3×3 convolutions per stage, the second strided: stride replaces pooling.
            layers += [_block(cin, cout, 1), _block(cout, cout, 2)]
            cin = cout
        layers += [nn.Conv2d(cin, head_channels, 1), nn.BatchNorm2d(head_channels), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        side = image_size // 2 ** len(channels)
        self.head = nn.Sequential(
            nn.Flatten(),
            nn.Linear(head_channels * side * side, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_bits),
        )
        # A matched-filter path (see "Why a linear read-out" above): logits += W · vec(x − blur(x)).
        self.readout = nn.Linear(3 * image_size * image_size, num_bits) if linear_readout else None
        if self.readout is not None:
            nn.init.zeros_(self.readout.weight)
            nn.init.zeros_(self.readout.bias)

    @property
    def num_bits(self) -> int:
        return int(self.config.num_bits)

    @property
    def image_size(self) -> int:
        return int(self.config.image_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Bit logits. Images of another size are resized (bilinear, antialiased) to ``image_size``."""
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f"expected images of shape (B, 3, H, W), got {tuple(images.shape)}")
        size = self.image_size
        if images.shape[-2:] != (size, size):
            images = F.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False)
        logits = self.head(self.features(images))
        if self.readout is not None:
            # High-pass first: photos are smooth, so x − blur(x) keeps a faint pattern and drops most
            # of the content that would otherwise drown a per-pixel template.
            detail = images - F.avg_pool2d(images, 3, stride=1, padding=1, count_include_pad=False)
            logits = logits + self.readout(detail.flatten(1))
        return logits

    def to_tensor(self, images: Sequence[Image.Image]) -> torch.Tensor:
        """PIL images of any mode and size → (n, 3, S, S) in [-1, 1], resized exactly as in training."""
        size = self.image_size
        arrays = []
        for image in images:
            rgb = image.convert("RGB")
            if rgb.size != (size, size):
                rgb = rgb.resize((size, size), Image.Resampling.BILINEAR)
            arrays.append(np.asarray(rgb, dtype=np.float32))
        batch = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)
        return batch / 127.5 - 1.0

    @torch.no_grad()
    def decode(self, images: Sequence[Image.Image], *, batch_size: int = 256) -> np.ndarray:
        """(n, num_bits) float probabilities that each bit is 1, for PIL images of any size or mode."""
        if len(images) == 0:
            return np.zeros((0, self.num_bits), dtype=np.float32)
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        out = []
        for start in range(0, len(images), batch_size):
            batch = self.to_tensor(images[start : start + batch_size]).to(device)
            out.append(torch.sigmoid(self(batch)).float().cpu().numpy())
        self.train(was_training)
        return np.concatenate(out)


def load_extractor(directory: Path | str, **kwargs: Any) -> Extractor:
    """An :class:`Extractor` saved with ``save_pretrained``, in eval mode on the CPU, in float32."""
    directory = Path(directory)
    if not (directory / "config.json").is_file():
        raise FileNotFoundError(f"{directory.name} holds no extractor (config.json is missing)")
    model = Extractor.from_pretrained(directory, torch_dtype=torch.float32, **kwargs)
    return model.to("cpu").eval()
