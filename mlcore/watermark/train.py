"""Training MOLM's markers and extractor jointly (paper section 3, "Training"; method card section 2.5).

At every step a **fresh random key** κ is drawn per image, the frozen decoder runs with the
adapters κ selects, and

    L = BCE(η(T(x̃_κ)), κ) + λ · L_imp(x̃_κ, x)          x = D(z) frozen, x̃_κ = D_{Φ+ΔΦ(κ)}(z)

is minimised over the adapters and η only (the generator never changes). T is a random
differentiable distortion (:mod:`mlcore.watermark.augment`), L_imp = MSE + (1 − SSIM).

The schedule is the card's CPU curriculum (section 4): the key loss alone and no distortions for
the first ``key_only_fraction`` of the steps (the paper uses 2,000 steps of key loss only), then λ
and the distortion strength ramp linearly to their targets over ``ramp_fraction``. Latents are the
VAE's encodings of seeded photo crops (or of the user's images, see ``crops``); the frozen decodes are computed once.

``device``, ``bf16`` and ``deadline`` behave as in :mod:`mlcore.watermark.pretrain`: indices, keys and
distortion parameters are drawn from the CPU generator ``g`` exactly as before (a CPU run is
unchanged; a GPU run trains on the same sequence), the latent pool lives on the device, and
``state.pt`` holds CPU tensors.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from mlcore.watermark.augment import random_distortion
from mlcore.watermark.extractor import Extractor
from mlcore.watermark.generator import Generator
from mlcore.watermark.markers import Markers
from mlcore.watermark.pretrain import WallBudgetSpent, autocast, cpu_state, device_of, past
from mlcore.watermark.quality import imperceptibility, psnr, ssim

Log = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, kw_only=True)
class MolmConfig:
    num_adapters: int = 8  # P: log2(P) bits per slot
    rank: int = 8
    alpha: float = 1.0
    init_scale: float = 0.3  # B's initial scale (the paper: 0); see Markers
    bitwise_init: bool = True  # one ±direction per key bit at initialisation; see Markers
    shift_scale: float | None = None  # per-adapter bias shifts (content-independent part); see Markers
    linear_readout: bool = False  # the extractor's matched-filter path; see Extractor
    steps: int  # no default: the watermark-train job's spec, the zoo recipe and the benchmark each give theirs
    batch_size: int = 16
    lr_markers: float = 3e-3
    lr_extractor: float = 1e-3
    lam: float = 0.5  # λ at the end of the ramp
    key_only_fraction: float = 0.3
    ramp_fraction: float = 0.4
    aug_p: float = 0.6  # share of images distorted once distortions are on
    pool: int = 2048  # training latents (encoded crops)
    eval_images: int = 128
    eval_every: int = 50
    checkpoint_every: int = 50
    seed: int = 0

    def schedule(self, step: int) -> tuple[float, float]:
        """(λ, distortion strength) at ``step``: 0 during key-only warm-up, then a linear ramp."""
        start = self.key_only_fraction * self.steps
        ramp = max(1.0, self.ramp_fraction * self.steps)
        t = min(1.0, max(0.0, (step - start) / ramp))
        return self.lam * t, t


@dataclass
class MolmResult:
    markers: Markers
    extractor: Extractor
    config: MolmConfig
    history: list[dict[str, Any]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


#: Where crops come from: ``(n, size, seed=, split=) -> (n, size, size, 3) uint8``, as
#: :func:`mlcore.data.images.image_crops` (the default) or a user's images
#: (:class:`mlcore.watermark.training_images.CropSource`).
Crops = Callable[..., Any]


def latent_pool(
    generator: Generator, n: int, *, seed: int, split: str = "train", crops: Crops | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(latents, frozen decodes) of ``n`` seeded crops, on the generator's device: MOLM's training (held-out) inputs."""
    from mlcore.data.images import image_crops
    from mlcore.watermark.generator import from_uint8

    cut = image_crops if crops is None else crops
    pixels = from_uint8(cut(n, generator.image_size, seed=seed, split=split)).to(generator.vae.device)
    with torch.no_grad():
        z = torch.cat([generator.encode(pixels[i : i + 256]) for i in range(0, n, 256)])
        x = torch.cat([generator.decode(z[i : i + 256]) for i in range(0, n, 256)])
    return z, x


@torch.no_grad()
def evaluate(
    generator: Generator,
    markers: Markers,
    extractor: Extractor,
    latents: torch.Tensor,
    frozen: torch.Tensor,
    *,
    seed: int,
) -> dict[str, float]:
    """Clean bit accuracy on fresh random keys, and PSNR/SSIM of watermarked vs frozen decodes."""
    g = torch.Generator().manual_seed(seed)
    keys = markers.random_keys(len(latents), g)
    was = extractor.training
    extractor.eval()
    marked = []
    for i in range(0, len(latents), 128):
        with markers.keyed(keys[i : i + 128]):
            marked.append(generator.decode(latents[i : i + 128]))
    x = torch.cat(marked)
    # Quantise as a PNG would: the extractor always sees 8-bit images at verification time.
    x = torch.round((x + 1) * 127.5) / 127.5 - 1
    bits = (extractor(x) > 0).float()
    extractor.train(was)
    return {
        "bit_accuracy": (bits == keys.to(bits.device)).float().mean().item(),
        "psnr": psnr(x, frozen).item(),
        "ssim": ssim(x, frozen).item(),
    }


def _state_path(workdir: Path | None) -> Path | None:
    return None if workdir is None else workdir / "state.pt"


def train_molm(
    generator: Generator,
    config: MolmConfig,
    *,
    workdir: Path | None = None,
    log: Log = print,
    on_step: Callable[[int, MolmResult], None] | None = None,
    markers: Markers | None = None,
    extractor: Extractor | None = None,
    device: torch.device | str | None = None,
    bf16: bool = False,
    deadline: float | None = None,
    crops: Crops | None = None,
) -> MolmResult:
    """Train markers for ``generator``'s decoder and an extractor (resumes from ``workdir/state.pt``).

    ``crops`` cuts the training and held-out images (default: the built-in photo crops).

    ``markers``/``extractor`` continue from trained ones (fine-tuning at another λ); otherwise new.
    ``device`` (default: the generator's) receives the generator, the markers and the extractor — the
    caller's objects are moved in place. Raises :class:`~mlcore.watermark.pretrain.WallBudgetSpent`
    (state saved when there is a ``workdir``) once ``deadline`` has passed.
    """
    device = device_of(generator.vae, device)
    torch.manual_seed(config.seed)
    # Module by module rather than a Generator method: a process that imported an older generator.py
    # (a long benchmark run) must be able to import this module and call it.
    for module in (generator.vae, generator.unet):
        if module is not None:
            module.to(device)
    if markers is None:
        markers = Markers.for_vae(
            generator.vae,
            num_adapters=config.num_adapters,
            rank=config.rank,
            alpha=config.alpha,
            init_scale=config.init_scale,
            bitwise_init=config.bitwise_init,
            shift_scale=config.shift_scale,
        )
    markers.to(device)  # initialised on the CPU above (the same draws on every device), then moved
    markers.attach(generator.vae)
    if extractor is None:
        extractor = Extractor(
            num_bits=markers.num_bits, image_size=generator.image_size, linear_readout=config.linear_readout
        )
    extractor.to(device)
    optimizer = torch.optim.AdamW(
        [
            {"params": markers.parameters(), "lr": config.lr_markers, "weight_decay": 0.0},
            {"params": extractor.parameters(), "lr": config.lr_extractor, "weight_decay": 1e-4},
        ]
    )
    result = MolmResult(markers=markers, extractor=extractor, config=config)
    state_path = _state_path(workdir)
    start = 0
    if state_path is not None and state_path.is_file():
        state = torch.load(state_path, map_location="cpu", weights_only=False)
        markers.load_state_dict(state["markers"])
        extractor.load_state_dict(state["extractor"])
        optimizer.load_state_dict(state["optimizer"])  # moves its moments to the parameters' device
        result.history = state["history"]
        start = int(state["step"])
    saved = start

    def save(step: int) -> None:
        if state_path is None:
            return
        state_path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(
            {
                "markers": cpu_state(markers.state_dict()),
                "extractor": cpu_state(extractor.state_dict()),
                "optimizer": cpu_state(optimizer.state_dict()),
                "history": result.history,
                "step": step,
            },
            state_path.with_suffix(".tmp"),
        )
        state_path.with_suffix(".tmp").replace(state_path)

    latents, frozen = latent_pool(generator, config.pool, seed=config.seed + 1000, crops=crops)
    held_z, held_x = latent_pool(generator, config.eval_images, seed=config.seed + 2000, split="test", crops=crops)
    g = torch.Generator().manual_seed(config.seed * 7919 + start)
    base_lrs = [config.lr_markers, config.lr_extractor]  # not the resumed groups' decayed values
    extractor.train()
    clock = time.perf_counter()
    # Detached tensors, read back only at evaluation: a .item() per step would stall a GPU every step.
    running: dict[str, list[torch.Tensor]] = {"loss_key": [], "loss_imp": [], "train_bit_accuracy": []}
    for step in range(start, config.steps):
        if past(deadline):
            if step > saved:
                save(step)
            raise WallBudgetSpent("molm", step, config.steps)
        lam, strength = config.schedule(step)
        decay = 0.5 * (1 + math.cos(math.pi * step / config.steps)) * 0.9 + 0.1  # cosine to 10 %
        for group, lr in zip(optimizer.param_groups, base_lrs, strict=True):
            group["lr"] = lr * decay
        idx = torch.randint(0, len(latents), (config.batch_size,), generator=g)
        keys = markers.random_keys(config.batch_size, g)  # a fresh key per image, every step
        idx, target = idx.to(device), keys.to(device)
        with markers.keyed(keys), autocast(device, bf16):
            marked = generator.vae.decode(latents[idx]).sample.clamp(-1, 1)
        marked = marked.float()  # distortions (the JPEG's rounding above all) and losses in float32
        distorted = random_distortion(marked, strength=strength, p=config.aug_p, g=g)
        with autocast(device, bf16):
            logits = extractor(distorted)
        logits = logits.float()
        loss_key = F.binary_cross_entropy_with_logits(logits, target)
        loss_imp = imperceptibility(marked, frozen[idx])
        loss = loss_key + lam * loss_imp
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([*markers.parameters(), *extractor.parameters()], 5.0)
        optimizer.step()
        running["loss_key"].append(loss_key.detach())
        running["loss_imp"].append(loss_imp.detach())
        running["train_bit_accuracy"].append(((logits.detach() > 0).float() == target).float().mean())
        last = step + 1 == config.steps
        if (step + 1) % config.eval_every == 0 or last:
            row: dict[str, Any] = {
                "stage": "molm",
                "step": step + 1,
                "lam": round(lam, 4),
                "strength": round(strength, 3),
            }
            for k, v in running.items():
                values = [t.item() for t in v]
                row[k] = round(sum(values) / max(1, len(values)), 4)
            row.update(
                {
                    f"heldout_{k}": round(v, 4)
                    for k, v in evaluate(generator, markers, extractor, held_z, held_x, seed=config.seed).items()
                }
            )
            row["seconds"] = round(time.perf_counter() - clock, 1)
            result.history.append(row)
            log(row)
            running = {k: [] for k in running}
        if (step + 1) % config.checkpoint_every == 0 or last:
            save(step + 1)
            saved = step + 1
        if on_step is not None:
            on_step(step, result)
    extractor.eval()
    final = evaluate(generator, markers, extractor, held_z, held_x, seed=config.seed + 1)
    result.metrics = {**final, "num_bits": float(markers.num_bits)}
    return result


def save_molm(result: MolmResult, folder: Path) -> None:
    """``markers/``, ``extractor/`` (diffusers ``save_pretrained``) and ``card.json`` with the figures.

    The weights are written from the CPU (safetensors, as always); the modules return to their device after.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name, module in (("markers", result.markers), ("extractor", result.extractor)):
        device = module.device
        module.to("cpu").save_pretrained(folder / name)
        module.to(device)
    markers = result.markers
    card = {
        "num_bits": markers.num_bits,
        "P": markers.config.num_adapters,
        "bits_per_symbol": markers.bits_per_symbol,
        "rank": markers.config.rank,
        "routed_blocks": sorted({slot.rsplit(".", 1)[0] for slot in markers.config.slots}),
        "slots": list(markers.config.slots),
        "image_size": result.extractor.image_size,
        "training": asdict(result.config),
        "figures": result.metrics,
        "history": result.history[-1:] if result.history else [],
    }
    (folder / "card.json").write_text(json.dumps(card, indent=1))


def load_molm(folder: Path) -> tuple[Markers, Extractor, dict[str, Any]]:
    """Markers, extractor (eval, CPU, fp32) and card from a ``molm-tiny``-style directory."""
    from mlcore.watermark.extractor import load_extractor

    markers = Markers.from_pretrained(folder / "markers", torch_dtype=torch.float32).eval()
    extractor = load_extractor(folder / "extractor")
    card = json.loads((folder / "card.json").read_text()) if (folder / "card.json").is_file() else {}
    return markers, extractor, card
