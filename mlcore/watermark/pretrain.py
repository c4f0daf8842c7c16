"""Training the generator MOLM then watermarks: the VAE (and an independent one) and the latent UNet.

Both run on :func:`mlcore.data.images.image_crops` and are resumable (a ``state.pt`` every
``checkpoint_every`` steps), because the zoo recipe trains them on a shared CPU.

- VAE (Kingma & Welling 2014; the LDM autoencoder of Rombach et al. 2022, section 3.1 without the
  adversarial term): L = ‖x − D(z)‖² + β·KL(q(z|x) ‖ N(0, I)), z ~ q(z|x). β is tiny, so the latent
  is nearly deterministic; ``scaling_factor`` is set to 1 / std(z) afterwards, as in Stable Diffusion.
- Latent UNet (DDPM, Ho et al. 2020, eq. 14): L = ‖ε − ε_θ(√ᾱ_t z_0 + √(1−ᾱ_t) ε, t)‖² on scaled latents.

**Devices.** Both loops (and :func:`mlcore.watermark.train.train_molm`) take a ``device``: batches
are drawn on the CPU exactly as before and moved, and every random number comes from the CPU
generators, so a CPU run is bit-for-bit what it was and a GPU run sees the same data, noise and
keys. ``state.pt`` always holds CPU tensors and is loaded with ``map_location="cpu"``, so a run
resumes on another device. ``bf16`` (off by default) autocasts the forward passes only; losses
are taken in float32. ``deadline`` (a ``time.perf_counter()`` instant) is a wall-clock budget
checked before every step: when it has passed, the loop saves its state and raises
:class:`WallBudgetSpent`, so the same call later resumes where it stopped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mlcore.data.images import image_crops
from mlcore.watermark.generator import from_uint8

Log = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class LoopConfig:
    steps: int
    batch_size: int = 16
    lr: float = 1e-3
    warmup: int = 50
    seed: int = 0
    checkpoint_every: int = 50
    log_every: int = 20


class WallBudgetSpent(RuntimeError):
    """A training loop reached its wall-clock deadline; its ``state.pt`` holds every finished step."""

    def __init__(self, stage: str, step: int, steps: int) -> None:
        super().__init__(f"{stage}: the wall-clock budget ran out after step {step} of {steps}; rerun to resume")
        self.stage, self.step, self.steps = stage, step, steps


def past(deadline: float | None) -> bool:
    """Whether the wall-clock ``deadline`` (a ``time.perf_counter()`` instant) has passed."""
    return deadline is not None and time.perf_counter() >= deadline


def device_of(module: torch.nn.Module, device: torch.device | str | None = None) -> torch.device:
    """``device`` as a ``torch.device``; None means wherever ``module`` already is."""
    return torch.device(device) if device is not None else next(module.parameters()).device


def autocast(device: torch.device, bf16: bool) -> Any:
    """bf16 autocast on ``device`` when asked; otherwise a no-op context (float32, as on the CPU)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)


def cpu_state(value: Any) -> Any:
    """``value`` (a state dict, nested dicts/lists of tensors) with every tensor on the CPU.

    Checkpoints stay loadable on a machine without the training device; on the CPU this returns the
    very same tensors, so the saved bytes do not change.
    """
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return type(value)((k, cpu_state(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(cpu_state(v) for v in value)
    return value


def _lr_at(step: int, config: LoopConfig) -> float:
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _resume(state_path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    if not state_path.is_file():
        return 0
    state = torch.load(state_path, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["step"])


def _save(state_path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    state_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = state_path.with_suffix(".tmp")
    torch.save(
        {"model": cpu_state(model.state_dict()), "optimizer": cpu_state(optimizer.state_dict()), "step": step}, tmp
    )
    tmp.replace(state_path)


def crop_batches(batch_size: int, *, seed: int, size: int = 32, chunk: int = 2048) -> Any:
    """An endless stream of (B, 3, size, size) training crops in [-1, 1], drawn ``chunk`` at a time."""
    round_ = 0
    while True:
        pixels = image_crops(chunk, size, seed=seed * 100_003 + round_, split="train")
        tensors = from_uint8(pixels)
        for start in range(0, chunk - batch_size + 1, batch_size):
            yield tensors[start : start + batch_size]
        round_ += 1


def psnr_of(vae: Any, images: torch.Tensor) -> float:
    images = images.to(vae.device)
    with torch.no_grad():
        recon = vae.decode(vae.encode(images).latent_dist.mean).sample.clamp(-1, 1)
    mse = F.mse_loss((recon + 1) / 2, (images + 1) / 2).item()
    return 10 * math.log10(1 / max(mse, 1e-10))


def train_vae(
    vae: Any,
    workdir: Path,
    config: LoopConfig,
    *,
    kl_weight: float = 1e-6,
    log: Log = print,
    device: torch.device | str | None = None,
    bf16: bool = False,
    deadline: float | None = None,
    stage: str = "vae",
) -> Any:
    """Train ``vae`` in place on ``device`` (resuming from ``workdir/state.pt``); returns it, ``scaling_factor`` set.

    Raises :class:`WallBudgetSpent` (state saved) when ``deadline`` passes; see the module docstring.
    """
    device = device_of(vae, device)
    torch.manual_seed(config.seed)
    vae.to(device)
    optimizer = torch.optim.AdamW(vae.parameters(), lr=config.lr, weight_decay=0.0)
    state_path = workdir / "state.pt"
    start = saved = _resume(state_path, vae, optimizer)
    held = from_uint8(image_crops(64, vae.config.sample_size, seed=12345, split="test")).to(device)
    batches = crop_batches(config.batch_size, seed=config.seed + start, size=vae.config.sample_size)
    vae.train()
    clock = time.perf_counter()
    for step in range(start, config.steps):
        if past(deadline):
            if step > saved:
                _save(state_path, vae, optimizer, step)
            raise WallBudgetSpent(stage, step, config.steps)
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, config)
        x = next(batches).to(device)
        with autocast(device, bf16):
            posterior = vae.encode(x).latent_dist
            # posterior.sample() would draw on the device's generator; this is the same draw from the CPU's.
            eps = torch.randn(posterior.mean.shape, dtype=posterior.mean.dtype).to(device)
            recon = vae.decode(posterior.mean + posterior.std * eps).sample
        rec = F.mse_loss(recon.float(), x)
        kl = posterior.kl().float().mean() / x[0].numel()
        loss = rec + kl_weight * kl
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            vae.eval()
            log(
                {
                    "stage": stage,
                    "step": step + 1,
                    "loss": round(loss.item(), 5),
                    "kl": round(kl.item(), 4),
                    "heldout_psnr": round(psnr_of(vae, held), 2),
                    "seconds": round(time.perf_counter() - clock, 1),
                }
            )
            vae.train()
        if (step + 1) % config.checkpoint_every == 0:
            _save(state_path, vae, optimizer, step + 1)
            saved = step + 1
    _save(state_path, vae, optimizer, config.steps)
    vae.eval().requires_grad_(False)
    with torch.no_grad():
        z = torch.cat([vae.encode(held[i : i + 64]).latent_dist.mean for i in range(0, len(held), 64)])
    vae.register_to_config(scaling_factor=float(1.0 / z.std().clamp_min(1e-6)))
    return vae


def encode_pool(vae: Any, n: int, *, seed: int, split: str = "train") -> torch.Tensor:
    """``n`` unscaled posterior-mean latents of seeded crops (the latent model's training set), on the CPU.

    Encoded on ``vae``'s device; returned to the CPU because the UNet loop draws its batches there.
    """
    pixels = from_uint8(image_crops(n, vae.config.sample_size, seed=seed, split=split))
    with torch.no_grad():
        return torch.cat(
            [vae.encode(pixels[i : i + 256].to(vae.device)).latent_dist.mean.cpu() for i in range(0, n, 256)]
        )


def train_unet(
    unet: Any,
    latents: torch.Tensor,
    scaling_factor: float,
    workdir: Path,
    config: LoopConfig,
    *,
    log: Log = print,
    device: torch.device | str | None = None,
    bf16: bool = False,
    deadline: float | None = None,
) -> Any:
    """DDPM ε-prediction training of ``unet`` on ``latents`` × ``scaling_factor`` (resumable; see the module doc)."""
    from diffusers import DDPMScheduler

    device = device_of(unet, device)
    torch.manual_seed(config.seed)
    noise_schedule = DDPMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2")
    unet.to(device)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=config.lr, weight_decay=0.0)
    state_path = workdir / "state.pt"
    start = saved = _resume(state_path, unet, optimizer)
    data = latents.cpu() * scaling_factor
    rng = np.random.default_rng(config.seed + start)
    unet.train()
    clock, running = time.perf_counter(), []
    for step in range(start, config.steps):
        if past(deadline):
            if step > saved:
                _save(state_path, unet, optimizer, step)
            raise WallBudgetSpent("unet", step, config.steps)
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, config)
        z0 = data[torch.from_numpy(rng.integers(0, len(data), config.batch_size))]
        # Random flips of the latent are flips of the image for this translation-equivariant VAE.
        z0 = torch.where(torch.rand(len(z0), 1, 1, 1) < 0.5, z0, z0.flip(-1))
        noise = torch.randn_like(z0)
        t = torch.randint(0, 1000, (len(z0),))
        z0, noise, t = z0.to(device), noise.to(device), t.to(device)
        with autocast(device, bf16):
            prediction = unet(noise_schedule.add_noise(z0, noise, t), t).sample
        loss = F.mse_loss(prediction.float(), noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        optimizer.step()
        running.append(loss.detach())  # read back only when logging: a .item() per step stalls a GPU
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            log(
                {
                    "stage": "unet",
                    "step": step + 1,
                    "loss": round(float(np.mean([v.item() for v in running])), 5),
                    "seconds": round(time.perf_counter() - clock, 1),
                }
            )
            running = []
        if (step + 1) % config.checkpoint_every == 0:
            _save(state_path, unet, optimizer, step + 1)
            saved = step + 1
    _save(state_path, unet, optimizer, config.steps)
    return unet.eval().requires_grad_(False)
