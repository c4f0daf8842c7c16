"""Train a video DiT on a user's clips (:mod:`mlcore.video.user_clips`), and judge what it makes.

- **Conditioning.** The DiT's first label (``num_digits``) is the user's class (one class without
  labels); its second (``num_directions``) has one value. The null class for classifier-free guidance
  stays the last row of each embedding, as for bouncing digits.
- **Training** is rectified flow on random training clips (SD3's logit-normal t, the same loss and
  auxiliary router losses as :func:`mlcore.video.pipeline.train`), drawn from seeded generators on
  the CPU so a run repeats.
- **Held-out loss** on the held-out clips at the fixed t grid with shared noise
  (:data:`mlcore.video.pipeline.HELDOUT_T`).
- **The judge** (labelled clips only): a :class:`~mlcore.video.classifier.ClipClassifier` trained on
  the training clips (greyscale) names a clip's class. Its accuracy on the held-out real clips says
  how far to trust it; it then grades generated clips (does a clip show its requested class?) and
  gives the Fréchet distance between its features of generated and held-out clips.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from mlcore.video.dit import AuxLosses, VideoDiT
from mlcore.video.pipeline import HELDOUT_T, TrainConfig, aux_total, make_optimiser, rectified_flow_loss
from mlcore.video.user_clips import ClipSet


@dataclass
class ClipTrainState:
    step: int = 0
    losses: list[list[float]] = field(default_factory=list)  # [step, rf loss, aux loss]
    cpu_seconds: float = 0.0


def train_on_clips(
    model: VideoDiT,
    config: TrainConfig,
    clips: ClipSet,
    *,
    optimiser: torch.optim.Optimizer | None = None,
    on_step: Callable[[ClipTrainState], None] | None = None,
) -> ClipTrainState:
    """Rectified-flow training of ``model`` in place on ``clips`` for ``config.steps`` steps."""
    device = model.device
    optimiser = optimiser or make_optimiser(model, config)
    data = torch.from_numpy(clips.clips)
    labels = torch.from_numpy(clips.labels)
    modes = config.attention_modes or (model.config.attention,)
    state = ClipTrainState()
    model.train()
    while state.step < config.steps:
        started = time.process_time()
        step = state.step
        for group in optimiser.param_groups:
            group["lr"] = config.lr * min(1.0, (step + 1) / max(1, config.warmup))
        gen = torch.Generator().manual_seed(config.seed * 7_919 + step)
        pick = torch.randint(len(data), (config.batch_size,), generator=gen)
        x0 = data[pick]
        flip = torch.rand(len(x0), generator=gen) < 0.5  # a horizontal flip: cheap augmentation for few clips
        x0 = torch.where(flip.view(-1, 1, 1, 1, 1), x0.flip(-1), x0).to(device)
        digits = labels[pick].to(device)
        drop = (torch.rand(len(x0), generator=gen) < config.cond_drop).to(device)
        digits = torch.where(drop, model.null_digit, digits)
        directions = torch.where(drop, model.null_direction, torch.zeros_like(digits))
        t = torch.sigmoid(torch.randn(len(x0), generator=gen)).to(device)
        noise = torch.randn(x0.shape, generator=gen).to(device)
        aux = AuxLosses()
        mode = modes[step % len(modes)]
        rf = rectified_flow_loss(model, x0, digits, directions, t, noise, attention=mode, aux=aux).mean()  # type: ignore[arg-type]
        extra = aux_total(aux, config, device)
        loss = rf + extra
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimiser.step()
        state.step += 1
        state.losses.append([step, float(rf.detach()), float(extra.detach())])
        state.cpu_seconds += time.process_time() - started
        if on_step is not None:
            on_step(state)
    return state


@torch.no_grad()
def heldout_loss_on(model: VideoDiT, clips: ClipSet, *, attention: Any = None, seed: int = 12345) -> float:
    """Mean RF loss on ``clips`` over the fixed t grid, with noise shared across t (and runs)."""
    model.eval()
    device = model.device
    x0 = torch.from_numpy(clips.clips)
    digits = torch.from_numpy(clips.labels)
    directions = torch.zeros_like(digits)
    noise = torch.randn(x0.shape, generator=torch.Generator().manual_seed(seed))
    losses = []
    for t_value in HELDOUT_T:
        for s in range(0, len(x0), 32):
            t = torch.full((len(x0[s : s + 32]),), t_value, device=device)
            losses.append(
                rectified_flow_loss(
                    model,
                    x0[s : s + 32].to(device),
                    digits[s : s + 32].to(device),
                    directions[s : s + 32].to(device),
                    t,
                    noise[s : s + 32].to(device),
                    attention=attention,
                )
            )
    model.train()
    return float(torch.cat(losses).mean())


def grey(clips: Tensor) -> Tensor:
    """[B, C, F, H, W] → [B, 1, F, H, W]: the judge looks at luminance."""
    return clips.mean(dim=1, keepdim=True)


def train_judge(clips: ClipSet, *, steps: int, seed: int = 0, width: int = 32, device: Any = "cpu") -> Any:
    """A :class:`~mlcore.video.classifier.ClipClassifier` naming the user's classes (direction head unused)."""
    from mlcore.video.classifier import ClipClassifier

    torch.manual_seed(seed)
    frames = clips.clips.shape[2]
    judge = ClipClassifier(width=width, num_digits=len(clips.class_names), num_directions=1, static=frames < 3)
    judge = judge.to(device)
    optimiser = torch.optim.AdamW(judge.parameters(), lr=3e-3, weight_decay=0.05)
    data, labels = grey(torch.from_numpy(clips.clips)), torch.from_numpy(clips.labels)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        pick = torch.randint(len(data), (min(32, len(data)),), generator=gen)
        x = data[pick]
        x = torch.where((torch.rand(len(x), generator=gen) < 0.5).view(-1, 1, 1, 1, 1), x.flip(-1), x)
        x = x + 0.05 * torch.randn(x.shape, generator=gen)
        judge.train()
        logits, _ = judge(x.to(device))
        loss = F.cross_entropy(logits, labels[pick].to(device))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
    return judge.eval()


@torch.no_grad()
def judge_accuracy(judge: Any, clips: Tensor, labels: Tensor) -> float:
    logits, _ = judge(grey(clips).to(judge.device))
    return float((logits.argmax(-1).cpu() == labels.cpu()).float().mean())


def frechet(judge: Any, a: Tensor, b: Tensor) -> float | None:
    """Fréchet distance between the judge's features of two clip sets; None when either has < 2 clips."""
    from mlcore.video.classifier import clip_features
    from mlcore.video.metrics import frechet_distance

    if len(a) < 2 or len(b) < 2:
        return None
    return frechet_distance(clip_features(judge, grey(a)), clip_features(judge, grey(b)))


def class_batch(clips: ClipSet) -> tuple[Tensor, Tensor]:
    """(labels, directions) to generate one clip per held-out clip, with its class."""
    labels = torch.from_numpy(np.asarray(clips.labels))
    return labels, torch.zeros_like(labels)
