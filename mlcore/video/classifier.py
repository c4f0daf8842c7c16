"""The judge: a small 3-D CNN, trained separately, that names a clip's digit and motion direction.

Used to grade generated clips (conditional accuracy: does the clip show the requested digit moving
in the requested direction?) and as the feature extractor of the Fréchet distance
(:func:`mlcore.video.metrics.frechet_distance`). It is *not* an I3D network, so the distance is
called a "Fréchet classifier distance" (FCD), never FVD.

The MoGA card asks that the judge reach ≥ 98% on real clips before it grades an 80% bar;
:func:`train_classifier` reports its held-out accuracy on glyphs it never saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import Tensor, nn

from mlcore.data.video import bouncing_digits


class ClipClassifier(ModelMixin, ConfigMixin):
    """[B, 1, F, H, W] in [−1, 1] → (digit logits [B, 10], direction logits [B, 4]); ``features`` [B, width]."""

    config_name = "config.json"

    @register_to_config
    def __init__(self, width: int = 32, num_digits: int = 10, num_directions: int = 4, static: bool = False) -> None:
        super().__init__()
        # Per-frame 2-D convolutions find the glyph (cheap: this machine is a shared CPU); temporal
        # kernels of 3 after the first downsampling see motion between neighbouring frames. A static
        # (image) judge uses temporal kernels of 1.
        kt = 1 if static else 3
        self.body = nn.Sequential(
            nn.Conv3d(1, width // 2, (1, 3, 3), padding=(0, 1, 1), stride=(1, 2, 2)),
            nn.GELU(),
            nn.Conv3d(width // 2, width, (kt, 3, 3), padding=(kt // 2, 1, 1), stride=(1, 2, 2)),
            nn.GELU(),
            nn.Conv3d(width, width, (kt, 3, 3), padding=(kt // 2, 1, 1)),
            nn.GELU(),
        )
        self.dropout = nn.Dropout(0.2)
        self.digit_head = nn.Linear(width, num_digits)
        self.direction_head = nn.Linear(width, num_directions)

    def features(self, x: Tensor) -> Tensor:
        return self.body(x).amax(dim=(2, 3, 4))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.dropout(self.features(x))
        return self.digit_head(h), self.direction_head(h)


@dataclass
class Judgement:
    digit_accuracy: float
    direction_accuracy: float
    accuracy: float  # both right


@torch.no_grad()
def judge(model: ClipClassifier, clips: Tensor, digits: Tensor, directions: Tensor, *, batch: int = 256) -> Judgement:
    """Grade clips and labels from any device: each batch moves to the judge's device (a CPU judge
    grades clips a GPU generated, and the other way round)."""
    model.eval()
    device = model.device
    d_hits, m_hits = [], []
    for start in range(0, len(clips), batch):
        d_logits, m_logits = model(clips[start : start + batch].to(device))
        d_hits.append(d_logits.argmax(-1) == digits[start : start + batch].to(device))
        m_hits.append(m_logits.argmax(-1) == directions[start : start + batch].to(device))
    d, m = torch.cat(d_hits), torch.cat(m_hits)
    static = bool(model.config.static)
    return Judgement(
        float(d.float().mean()), 1.0 if static else float(m.float().mean()), float((d & (m | static)).float().mean())
    )


@torch.no_grad()
def clip_features(model: ClipClassifier, clips: Tensor, *, batch: int = 256) -> np.ndarray:
    """Judge features [n, width] as float64 numpy, for clips on any device."""
    model.eval()
    device = model.device
    features = [model.features(clips[s : s + batch].to(device)) for s in range(0, len(clips), batch)]
    return torch.cat(features).double().cpu().numpy()


def as_batch(clips: np.ndarray) -> Tensor:
    """[n, F, H, W] numpy clips → [n, 1, F, H, W] float tensor."""
    return torch.from_numpy(clips).unsqueeze(1)


def train_classifier(
    *,
    frames: int = 8,
    size: int = 16,
    static: bool = False,
    steps: int = 600,
    batch: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    width: int = 32,
    on_step: Callable[[int, float], None] | None = None,
    device: torch.device | str = "cpu",
) -> tuple[ClipClassifier, Judgement]:
    """Train on fresh procedural clips each step; return the model (on ``device``) and its held-out judgement.

    Clips and their augmentation are drawn on the CPU as without a device and then moved, so a CPU
    run is unchanged. On CUDA, dropout draws from the CUDA generator instead of the global CPU one,
    so from the first step on the augmentation stream differs from a CPU run's.
    """
    torch.manual_seed(seed)
    model = ClipClassifier(width=width, static=static).to(device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=lr, total_steps=steps, pct_start=0.1)
    for step in range(steps):
        data = bouncing_digits(
            batch, frames=frames, size=size, split="train", seed=seed * 1_000_003 + step, static=static
        )
        x = as_batch(data.clips)
        # Augment (a per-clip ink gain, pixel noise) so the judge generalises to unseen writers and to
        # the slightly soft, noisy strokes a generator draws rather than memorising 1500 glyphs.
        gain = torch.empty(len(x), 1, 1, 1, 1).uniform_(0.6, 1.2)
        x = ((x + 1) * gain - 1 + 0.1 * torch.randn_like(x)).to(device)
        model.train()
        d_logits, m_logits = model(x)
        loss = F.cross_entropy(d_logits, torch.from_numpy(data.digits).to(device))
        if not static:
            loss = loss + F.cross_entropy(m_logits, torch.from_numpy(data.directions).to(device))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if on_step is not None:
            on_step(step, float(loss.detach()))
    held = bouncing_digits(1000, frames=frames, size=size, split="test", seed=seed + 7, static=static)
    result = judge(model, as_batch(held.clips), torch.from_numpy(held.digits), torch.from_numpy(held.directions))
    return model, result
