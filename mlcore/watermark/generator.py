"""The generator MOLM watermarks: a diffusers ``AutoencoderKL`` plus a latent ``UNet2DModel`` and a scheduler.

A generator directory is laid out like a diffusers pipeline folder — ``vae/`` (AutoencoderKL),
``unet/`` (UNet2DModel, class-unconditional, on the VAE's latents), ``scheduler/`` (any diffusers
scheduler config; DDIM by default) — so a user's real diffusers directory loads unchanged. A
directory that *is* a VAE (``config.json`` of an AutoencoderKL) is accepted wherever only the
decoder is needed (training markers, regeneration attacks).

Sampling is the textbook latent-diffusion loop (Rombach et al. 2022, section 3.3): z_T ~ N(0, I),
``scheduler.step`` down to z_0, then x = D(z_0 / scaling_factor). With markers attached to the
decoder (:mod:`mlcore.watermark.markers`) the same call yields watermarked images; the latent
model itself is never touched, which is MOLM's point (zero extra inference cost).

A generator loads on the CPU; :meth:`Generator.to` moves its models to another device. Its methods
accept tensors on any device and compute where the models are; sampling noise is drawn from a
seeded CPU generator and moved, so a seed gives the same latents' starting points everywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image


class GeneratorError(ValueError):
    """A directory that is not a usable generator; the message says what is missing."""


#: Our zoo VAE: 32×32 RGB ↔ 4×8×8 latents; 8 decoder ResNet blocks (16 routed convolutions).
TINY_VAE_CONFIG: dict[str, Any] = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=("DownEncoderBlock2D",) * 3,
    up_block_types=("UpDecoderBlock2D",) * 3,
    block_out_channels=(16, 32, 64),
    layers_per_block=1,
    latent_channels=4,
    norm_num_groups=8,
    sample_size=32,
)

#: Our zoo latent denoiser on 4×8×8 latents (epsilon prediction).
TINY_UNET_CONFIG: dict[str, Any] = dict(
    sample_size=8,
    in_channels=4,
    out_channels=4,
    block_out_channels=(32, 64),
    layers_per_block=1,
    down_block_types=("DownBlock2D", "AttnDownBlock2D"),
    up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    norm_num_groups=8,
    attention_head_dim=32,
)


def tiny_vae(seed: int = 0, **overrides: Any) -> Any:
    from diffusers import AutoencoderKL

    torch.manual_seed(seed)
    return AutoencoderKL(**{**TINY_VAE_CONFIG, **overrides})


def tiny_unet(seed: int = 0, **overrides: Any) -> Any:
    from diffusers import UNet2DModel

    torch.manual_seed(seed)
    return UNet2DModel(**{**TINY_UNET_CONFIG, **overrides})


def _is_vae_dir(folder: Path) -> bool:
    config = folder / "config.json"
    return config.is_file() and json.loads(config.read_text()).get("_class_name") == "AutoencoderKL"


def load_vae(folder: Path) -> Any:
    """The ``AutoencoderKL`` of a generator directory (``vae/``) or of a VAE directory, frozen, eval, fp32."""
    from diffusers import AutoencoderKL

    folder = Path(folder)
    target = folder if _is_vae_dir(folder) else folder / "vae"
    if not _is_vae_dir(target):
        raise GeneratorError(f"{folder.name}: no AutoencoderKL found (expected vae/config.json or config.json)")
    try:
        vae = AutoencoderKL.from_pretrained(target, torch_dtype=torch.float32)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        raise GeneratorError(f"{folder.name}: the VAE does not load ({str(exc).splitlines()[0][:200]})") from None
    return vae.eval().requires_grad_(False)


@dataclass
class Generator:
    """A loaded generator: the VAE, and (when the directory has one) the latent UNet and scheduler."""

    vae: Any
    unet: Any | None = None
    scheduler: Any | None = None

    @property
    def image_size(self) -> int:
        return int(self.vae.config.sample_size)

    @property
    def scaling_factor(self) -> float:
        return float(self.vae.config.scaling_factor)

    @property
    def device(self) -> torch.device:
        """Where the VAE (and the UNet, moved with it by :meth:`to`) computes."""
        return self.vae.device

    def to(self, device: torch.device | str) -> Generator:
        """Move the VAE and the UNet to ``device`` (in place, like ``nn.Module.to``); returns self."""
        self.vae.to(device)
        if self.unet is not None:
            self.unet.to(device)
        return self

    def decode(self, latents: torch.Tensor) -> torch.Tensor:
        """Unscaled VAE latents → images in [-1, 1], on the generator's device (keyed markers act here)."""
        return self.vae.decode(latents.to(self.device)).sample.clamp(-1, 1)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """Images in [-1, 1] → the posterior mean latents (unscaled), on the generator's device."""
        return self.vae.encode(images.to(self.device)).latent_dist.mean

    @torch.no_grad()
    def sample_latents(self, n: int, *, seed: int, steps: int = 20, batch_size: int = 256) -> torch.Tensor:
        """``n`` unscaled latents from the latent model (on its device): z_T ~ N(0, I) stepped down by the scheduler."""
        if self.unet is None or self.scheduler is None:
            raise GeneratorError("this generator has no latent model (unet/ and scheduler/); it can only decode")
        config = self.unet.config
        size = config.sample_size if isinstance(config.sample_size, int) else config.sample_size[0]
        generator = torch.Generator().manual_seed(seed)
        out = []
        for start in range(0, n, batch_size):
            count = min(batch_size, n - start)
            z = torch.randn((count, config.in_channels, size, size), generator=generator).to(self.device)
            z = z * float(getattr(self.scheduler, "init_noise_sigma", 1.0))
            self.scheduler.set_timesteps(steps)
            for t in self.scheduler.timesteps:
                eps = self.unet(self.scheduler.scale_model_input(z, t), t).sample
                z = self.scheduler.step(eps, t, z).prev_sample
            out.append(z / self.scaling_factor)
        return torch.cat(out)


def load_generator(folder: Path, *, need_unet: bool = False) -> Generator:
    """A generator directory (``vae/``, ``unet/``, ``scheduler/``) or a bare VAE directory."""
    from diffusers import SchedulerMixin, UNet2DModel

    folder = Path(folder)
    vae = load_vae(folder)
    unet = scheduler = None
    if (folder / "unet" / "config.json").is_file():
        try:
            unet = UNet2DModel.from_pretrained(folder / "unet", torch_dtype=torch.float32).eval().requires_grad_(False)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise GeneratorError(
                f"{folder.name}/unet does not load as a UNet2DModel ({str(exc).splitlines()[0][:200]}); "
                "only class-unconditional latent UNets are supported"
            ) from None
        config_path = folder / "scheduler" / "scheduler_config.json"
        if not config_path.is_file():
            raise GeneratorError(f"{folder.name}: unet/ needs a scheduler/scheduler_config.json beside it")
        scheduler = _scheduler_from_config(json.loads(config_path.read_text()), SchedulerMixin)
    elif need_unet:
        raise GeneratorError(
            f"{folder.name} has no latent model (unet/ + scheduler/): it cannot sample new images; pick a generator"
        )
    if unet is not None and unet.config.in_channels != vae.config.latent_channels:
        raise GeneratorError(
            f"{folder.name}: the UNet takes {unet.config.in_channels} channels but the VAE's latents have "
            f"{vae.config.latent_channels}"
        )
    return Generator(vae=vae, unet=unet, scheduler=scheduler)


def _scheduler_from_config(config: dict[str, Any], base: type) -> Any:
    import diffusers

    name = config.get("_class_name", "DDIMScheduler")
    cls = getattr(diffusers, name, None)
    if cls is None or not issubclass(cls, base):
        raise GeneratorError(f"unknown scheduler {name!r} in scheduler_config.json")
    return cls.from_config(config)


def to_uint8(images: torch.Tensor) -> np.ndarray:
    """(B, 3, H, W) in [-1, 1] → (B, H, W, 3) uint8 (round to nearest, as a PNG stores them)."""
    return ((images.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).cpu().numpy()


def from_uint8(pixels: np.ndarray) -> torch.Tensor:
    """(B, H, W, 3) uint8 → (B, 3, H, W) float in [-1, 1]."""
    return torch.from_numpy(np.ascontiguousarray(pixels)).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def to_pil(images: torch.Tensor) -> list[Image.Image]:
    return [Image.fromarray(a) for a in to_uint8(images)]
