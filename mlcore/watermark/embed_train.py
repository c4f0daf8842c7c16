"""Teaching the extractor to read residual-marked photos (the embed path, :mod:`mlcore.watermark.embed`).

MOLM's extractor learns to read the marked decoder's *outputs* x̃ = D_κ(E(x)): a photo re-rendered by
the VAE, which carries the mark at full strength. The embed path adds only the residual
r = D_κ(E(x)) − D(E(x)) to the photo itself, at a strength s < 1 chosen for fidelity (≥ 38 dB), so
the extractor must find a weaker mark on unrendered content. Here the markers stay frozen and the
extractor is fine-tuned on exactly what the embed path produces:

    x̂ = T(x + s · (w ⊙ r + (1 − w) ⊙ r↔))          loss = BCE(η(x̂), κ)

with x photo tiles at the working grid's scale, w the blending window (the tile's edges carry a
neighbour's residual r↔, emulated by the tile's own residual shifted by one stride) and T a real,
non-differentiable distortion — JPEG at a random quality, a downscale-and-back, Gaussian noise or
nothing — since only η is trained, no gradient has to pass through T. A share of each batch keeps
the original task (the marked decode itself), so the extractor still reads generated images.

The residual pool is computed once (the VAE runs ``pool`` tiles under random keys; it can be cached
to disk chunk by chunk) and the steps then cost only the extractor's forward and backward pass.
Every step's randomness derives from (seed, step), so a resumed run continues exactly.
``python -m mlcore.zoo train molm-embed`` (:mod:`mlcore.zoo.molm_embed`) is the recipe.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from mlcore.watermark.embed import OVERLAP, tile_residuals, window
from mlcore.watermark.pipeline import Bundle

Log = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, kw_only=True)
class EmbedTrainConfig:
    steps: int = 600
    batch_size: int = 64
    pool: int = 4096
    lr: float = 1e-3
    strength_low: float = 0.25
    strength_high: float = 0.7
    decoded_share: float = 0.25  # the original task: marked decodes, read as generated images
    eval_every: int = 100
    seed: int = 0


@dataclass
class ResidualPool:
    photos: torch.Tensor  # (n, 3, t, t) in [-1, 1]
    residuals: torch.Tensor  # (n, 3, t, t)
    keys: torch.Tensor  # (n, M)


def residual_pool(
    bundle: Bundle,
    photos: torch.Tensor,
    *,
    seed: int,
    cache: Path | None = None,
    chunk: int = 256,
    log: Log | None = None,
) -> ResidualPool:
    """Each tile under its own random key: the residual the embed path would add to it.

    The keys are drawn up front from ``seed``, so the pool does not depend on how it is chunked.
    With ``cache`` (a folder), every ``chunk`` tiles' residuals are saved as they are computed and
    reused if present: building the pool is the costly part (three VAE passes per tile), and a run
    that is stopped, or resumed for more steps, computes no tile twice. A cached chunk is only reused
    for the same tiles and keys (checked by their sums), never for other photos.
    """
    g = torch.Generator().manual_seed(seed)
    keys = torch.randint(0, 2, (len(photos), bundle.num_bits), generator=g).float()
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    parts = []
    for start in range(0, len(photos), chunk):
        tiles, bits = photos[start : start + chunk], keys[start : start + chunk]
        stamp = [float(tiles.double().sum()), float(bits.sum()), len(tiles)]
        path = None if cache is None else cache / f"chunk-{start:06d}.pt"
        if path is not None and path.is_file():
            saved = torch.load(path, weights_only=True)
            if saved["stamp"] == stamp:
                parts.append(saved["residuals"])
                continue
        began = time.monotonic()
        residuals = tile_residuals(bundle, tiles, bits)
        parts.append(residuals)
        if path is not None:
            partial = path.with_suffix(".tmp")
            torch.save({"stamp": stamp, "residuals": residuals}, partial)
            partial.replace(path)  # a chunk is either whole on disk or absent
        if log is not None:
            seconds = round(time.monotonic() - began, 1)
            log({"stage": "pool", "tiles_done": start + len(tiles), "of": len(photos), "chunk_seconds": seconds})
    return ResidualPool(photos=photos, residuals=torch.cat(parts), keys=keys)


def _jpeg(batch: torch.Tensor, quality: int) -> torch.Tensor:
    out = []
    for image in ((batch.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy():
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=quality)
        out.append(np.asarray(Image.open(buffer).convert("RGB")))
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).float() / 127.5 - 1.0


def distort(batch: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """One random real distortion for the whole batch (the attacks the embed path is measured on)."""
    choice = rng.integers(0, 4)
    if choice == 0:
        return _jpeg(batch, int(rng.integers(50, 96)))
    if choice == 1:
        size = batch.shape[-1]
        small = max(8, round(size * rng.uniform(0.4, 0.8)))
        down = F.interpolate(batch, size=(small, small), mode="bilinear", antialias=True, align_corners=False)
        return F.interpolate(down, size=(size, size), mode="bicubic", align_corners=False).clamp(-1, 1)
    if choice == 2:
        noise = torch.from_numpy(rng.standard_normal(batch.shape)).to(batch.dtype)  # rng: resumable
        return (batch + noise * float(rng.uniform(0.0, 0.04))).clamp(-1, 1)
    return batch


def marked_batch(pool: ResidualPool, index: torch.Tensor, strength: torch.Tensor) -> torch.Tensor:
    """x + s · (w ⊙ r + (1 − w) ⊙ r shifted by a stride): a tile as the working grid's reader sees it."""
    r = pool.residuals[index]
    t = r.shape[-1]
    w = window(t)
    shift = t - OVERLAP
    neighbour = torch.roll(r, shifts=(shift, shift), dims=(-2, -1))
    blended = w * r + (1 - w) * neighbour
    return (pool.photos[index] + strength[:, None, None, None] * blended).clamp(-1, 1)


def evaluate(bundle: Bundle, pool: ResidualPool, *, strength: float, seed: int) -> dict[str, float]:
    """Bit accuracy per tile on ``pool`` at ``strength``: clean and after JPEG-75."""
    extractor = bundle.extractor
    extractor.eval()
    index = torch.arange(len(pool.keys))
    x = marked_batch(pool, index, torch.full((len(index),), strength))
    out: dict[str, float] = {}
    with torch.no_grad():
        for name, images in (("tile_bit_accuracy", x), ("tile_bit_accuracy_jpeg75", _jpeg(x, 75))):
            logits = torch.cat(
                [extractor(images[i : i + 256].to(extractor.device)).cpu() for i in range(0, len(x), 256)]
            )
            out[name] = float(((logits > 0).float() == pool.keys).float().mean())
    return out


def step_randomness(seed: int, step: int) -> tuple[torch.Generator, np.random.Generator]:
    """The batch's tiles/strengths and its distortion for one step, from (seed, step) alone.

    Each step draws from its own seeded generators, so a run resumed at step k takes exactly the
    batches an uninterrupted run would have taken from step k on.
    """
    return torch.Generator().manual_seed(seed * 1_000_003 + step), np.random.default_rng((seed, step))


#: Called with (step, optimizer, history) every ``checkpoint_every`` steps and at the end.
Checkpoint = Callable[[int, torch.optim.Optimizer, list[dict[str, Any]]], None]


def finetune_extractor(
    bundle: Bundle,
    config: EmbedTrainConfig,
    *,
    photos: torch.Tensor | None = None,
    held_out: torch.Tensor | None = None,
    pool: ResidualPool | None = None,
    test: ResidualPool | None = None,
    log: Log = print,
    deadline: float | None = None,
    start_step: int = 0,
    optimizer_state: dict[str, Any] | None = None,
    history: list[dict[str, Any]] | None = None,
    on_checkpoint: Checkpoint | None = None,
    checkpoint_every: int = 50,
) -> list[dict[str, Any]]:
    """Fine-tune ``bundle.extractor`` in place (markers frozen) on residual-marked ``photos`` tiles.

    Pass ``photos``/``held_out`` (the pools are built here) or ready ``pool``/``test`` pools (built
    once, e.g. cached by :func:`residual_pool`). ``start_step``, ``optimizer_state`` and
    ``history`` resume a run whose extractor weights the caller has already loaded.
    """
    started = time.monotonic()
    built = pool is None or test is None
    if pool is None:
        if photos is None:
            raise ValueError("pass photos or a residual pool")
        pool = residual_pool(bundle, photos, seed=config.seed)
    if test is None:
        if held_out is None:
            raise ValueError("pass held-out photos or a held-out residual pool")
        test = residual_pool(bundle, held_out, seed=config.seed + 1)
    if built:
        log({"stage": "pool", "tiles": len(pool.keys), "seconds": round(time.monotonic() - started, 1)})
    extractor = bundle.extractor
    extractor.requires_grad_(True)
    optimizer = torch.optim.AdamW(extractor.parameters(), lr=config.lr, weight_decay=1e-4)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    history = list(history or [])
    decoded = max(0, round(config.batch_size * config.decoded_share))
    step = start_step
    for step in range(start_step + 1, config.steps + 1):
        extractor.train()
        g, rng = step_randomness(config.seed, step)
        lr = config.lr * 0.5 * (1 + math.cos(math.pi * (step - 1) / config.steps))
        for group in optimizer.param_groups:
            group["lr"] = lr
        index = torch.randint(0, len(pool.keys), (config.batch_size,), generator=g)
        strength = config.strength_low + (config.strength_high - config.strength_low) * torch.rand(
            config.batch_size, generator=g
        )
        images = marked_batch(pool, index, strength)
        if decoded:
            # The marked decode itself (photo + the full residual on the VAE's reconstruction), as
            # generated images carry it: x̃ = D(E(x)) + r; approximated by x + r at full strength.
            images[:decoded] = (pool.photos[index[:decoded]] + pool.residuals[index[:decoded]]).clamp(-1, 1)
        images = distort(images, rng)
        logits = extractor(images.to(extractor.device))
        loss = F.binary_cross_entropy_with_logits(logits, pool.keys[index].to(logits.device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % config.eval_every == 0 or step == config.steps:
            row = {"step": step, "loss": loss.item(), **evaluate(bundle, test, strength=0.4, seed=config.seed)}
            row["seconds"] = round(time.monotonic() - started, 1)
            history.append(row)
            log(row)
        if on_checkpoint is not None and (step % checkpoint_every == 0 or step == config.steps):
            on_checkpoint(step, optimizer, history)
        if deadline is not None and time.monotonic() > deadline:
            if on_checkpoint is not None:
                on_checkpoint(step, optimizer, history)
            log({"stage": "stopped at the time budget", "step": step})
            break
    extractor.eval().requires_grad_(False)
    from mlcore.watermark import embed

    embed.forget_tile_bias(extractor)  # the leaning changed with the weights
    return history


READBACK_ATTACKS = ("none", "jpeg-75", "resize-0.5")


def held_out_photos(n: int, *, seed: int, low: int = 256, high: int = 384) -> list[np.ndarray]:
    """``n`` seeded crops (``low``–``high`` px a side, any aspect) of the held-out photos with a short side ≥ 256."""
    from mlcore.data.images import split_photos

    pool = [p.pixels for p in split_photos("test") if min(p.pixels.shape[:2]) >= low]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        pixels = pool[int(rng.integers(len(pool)))]
        h, w = pixels.shape[:2]
        ch, cw = (int(rng.integers(low, min(high, side) + 1)) for side in (h, w))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        out.append(np.ascontiguousarray(pixels[top : top + ch, left : left + cw]))
    return out


def _attacked(data: bytes, name: str) -> bytes:
    if name == "none":
        return data
    image = Image.open(io.BytesIO(data)).convert("RGB")
    buffer = io.BytesIO()
    if name == "jpeg-75":
        image.save(buffer, "JPEG", quality=75)
    else:
        image.resize((image.width // 2, image.height // 2), Image.Resampling.BICUBIC).save(buffer, "PNG")
    return buffer.getvalue()


def photo_readback(
    bundle: Bundle, extractors: dict[str, Any], images: list[np.ndarray], *, seed: int, target_psnr: float = 38.0
) -> dict[str, Any]:
    """Whole photos marked as ``watermark-embed`` marks them, read back as the portal reads them.

    Each photo is marked once under its own random key at ``target_psnr`` (the markers are frozen,
    so the marked file is the same whichever extractor reads it), written as a PNG, attacked
    (:data:`READBACK_ATTACKS`) and read by every extractor in ``extractors`` through
    :func:`mlcore.watermark.verification.decode`. Returns the mean bit accuracy per extractor and
    attack, and the mean PSNR of the written files.
    """
    from mlcore.watermark import image_io
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.verification import decode, open_image

    rng = np.random.default_rng(seed)
    scores: dict[str, dict[str, list[float]]] = {name: {a: [] for a in READBACK_ATTACKS} for name in extractors}
    psnrs = []
    for i, pixels in enumerate(images):
        key = torch.from_numpy(rng.integers(0, 2, bundle.num_bits)).float()
        source = image_io.SourceImage(name=f"{i}.png", format="PNG", pixels=pixels)
        # Seeded phase too (a secret-phase reader's marks): a rerun marks the same files.
        marked = mark_image(bundle, source, key, target_psnr=target_psnr, offset_rng=np.random.default_rng((seed, i)))
        data = image_io.encode(marked.image)
        written = image_io.read(data).pixels.astype(np.float64)
        psnrs.append(10 * math.log10(255**2 / max(float(((written - pixels) ** 2).mean()), 1e-10)))
        for attack in READBACK_ATTACKS:
            image = open_image(_attacked(data, attack))
            for name, extractor in extractors.items():
                bits = decode(extractor, [image])[0] > 0.5
                scores[name][attack].append(float((bits == (key.numpy() > 0.5)).mean()))
    return {
        "n": len(images),
        "target_psnr": target_psnr,
        "psnr": round(float(np.mean(psnrs)), 2) if psnrs else None,
        "bit_accuracy": {
            name: {attack: round(float(np.mean(v)), 4) for attack, v in by.items()} for name, by in scores.items()
        },
    }
