"""Training the generator MOLM then watermarks: the VAE (and an independent one) and the latent UNet.

Both run on :func:`mlcore.data.images.image_crops` and are resumable (a ``state.pt`` every
``checkpoint_every`` steps), because the zoo recipe trains them on a shared CPU.

- VAE (Kingma & Welling 2014; the LDM autoencoder of Rombach et al. 2022, section 3.1 without the
  adversarial term): L = ‖x − D(z)‖² + β·KL(q(z|x) ‖ N(0, I)), z ~ q(z|x). β is tiny, so the latent
  is nearly deterministic; ``scaling_factor`` is set to 1 / std(z) afterwards, as in Stable Diffusion.
- Latent UNet (DDPM, Ho et al. 2020, eq. 14): L = ‖ε − ε_θ(√ᾱ_t z_0 + √(1−ᾱ_t) ε, t)‖² on scaled latents.
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
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, tmp)
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
    with torch.no_grad():
        recon = vae.decode(vae.encode(images).latent_dist.mean).sample.clamp(-1, 1)
    mse = F.mse_loss((recon + 1) / 2, (images + 1) / 2).item()
    return 10 * math.log10(1 / max(mse, 1e-10))


def train_vae(vae: Any, workdir: Path, config: LoopConfig, *, kl_weight: float = 1e-6, log: Log = print) -> Any:
    """Train ``vae`` in place (resuming from ``workdir/state.pt``); returns it with ``scaling_factor`` set."""
    torch.manual_seed(config.seed)
    optimizer = torch.optim.AdamW(vae.parameters(), lr=config.lr, weight_decay=0.0)
    state_path = workdir / "state.pt"
    start = _resume(state_path, vae, optimizer)
    held = from_uint8(image_crops(64, vae.config.sample_size, seed=12345, split="test"))
    batches = crop_batches(config.batch_size, seed=config.seed + start, size=vae.config.sample_size)
    vae.train()
    clock = time.perf_counter()
    for step in range(start, config.steps):
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, config)
        x = next(batches)
        posterior = vae.encode(x).latent_dist
        recon = vae.decode(posterior.sample()).sample
        rec = F.mse_loss(recon, x)
        kl = posterior.kl().mean() / x[0].numel()
        loss = rec + kl_weight * kl
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        optimizer.step()
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            vae.eval()
            log(
                {
                    "stage": "vae",
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
    _save(state_path, vae, optimizer, config.steps)
    vae.eval().requires_grad_(False)
    with torch.no_grad():
        z = torch.cat([vae.encode(held[i : i + 64]).latent_dist.mean for i in range(0, len(held), 64)])
    vae.register_to_config(scaling_factor=float(1.0 / z.std().clamp_min(1e-6)))
    return vae


def encode_pool(vae: Any, n: int, *, seed: int, split: str = "train") -> torch.Tensor:
    """``n`` unscaled posterior-mean latents of seeded crops (the latent model's training set)."""
    pixels = from_uint8(image_crops(n, vae.config.sample_size, seed=seed, split=split))
    with torch.no_grad():
        return torch.cat([vae.encode(pixels[i : i + 256]).latent_dist.mean for i in range(0, n, 256)])


def train_unet(
    unet: Any, latents: torch.Tensor, scaling_factor: float, workdir: Path, config: LoopConfig, *, log: Log = print
) -> Any:
    """DDPM ε-prediction training of ``unet`` on ``latents`` × ``scaling_factor`` (resumable)."""
    from diffusers import DDPMScheduler

    torch.manual_seed(config.seed)
    noise_schedule = DDPMScheduler(num_train_timesteps=1000, beta_schedule="squaredcos_cap_v2")
    optimizer = torch.optim.AdamW(unet.parameters(), lr=config.lr, weight_decay=0.0)
    state_path = workdir / "state.pt"
    start = _resume(state_path, unet, optimizer)
    data = latents * scaling_factor
    rng = np.random.default_rng(config.seed + start)
    unet.train()
    clock, running = time.perf_counter(), []
    for step in range(start, config.steps):
        for group in optimizer.param_groups:
            group["lr"] = _lr_at(step, config)
        z0 = data[torch.from_numpy(rng.integers(0, len(data), config.batch_size))]
        # Random flips of the latent are flips of the image for this translation-equivariant VAE.
        z0 = torch.where(torch.rand(len(z0), 1, 1, 1) < 0.5, z0, z0.flip(-1))
        noise = torch.randn_like(z0)
        t = torch.randint(0, 1000, (len(z0),))
        loss = F.mse_loss(unet(noise_schedule.add_noise(z0, noise, t), t).sample, noise)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0)
        optimizer.step()
        running.append(loss.item())
        if (step + 1) % config.log_every == 0 or step + 1 == config.steps:
            log(
                {
                    "stage": "unet",
                    "step": step + 1,
                    "loss": round(float(np.mean(running)), 5),
                    "seconds": round(time.perf_counter() - clock, 1),
                }
            )
            running = []
        if (step + 1) % config.checkpoint_every == 0:
            _save(state_path, unet, optimizer, step + 1)
    _save(state_path, unet, optimizer, config.steps)
    return unet.eval().requires_grad_(False)
