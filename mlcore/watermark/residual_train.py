"""Training MOLM's markers and extractor together on the embed path: residual-marked photo patches.

The embed path (:mod:`mlcore.watermark.embed`) adds to a photo x only what the key changes in the
decoder, r_κ(x) = D_κ(E(x)) − D(E(x)), blended over overlapping tiles and scaled to a fixed PSNR,
and reads it back by a vote of the extractor η over the tiles of a working grid. Training the
extractor alone on such residuals (:mod:`mlcore.watermark.embed_train`) leaves it reading what
markers trained for another task happen to write. Here both are trained for this task, end to end,
as Stable Signature fine-tunes a decoder for one key and MOLM's routed adapters do per key:

    x̂ = T(Q(x + s · W[r_κ(x)]))          L = BCE(η(x̂), κ) + β · L_null + μ · L_energy

- **r_κ** is the key-routed LoRA perturbation *without* the content-independent bias shift (the
  paper's markers, ``shift_scale = 0``): the shift is the same in every image, so the mean of a
  few marked images' residuals forges it (:mod:`mlcore.watermark.markers`).
- **W** blends the residuals of a 2 × 2 block of overlapping tiles with the embed path's own
  sin² window into a 56-pixel patch, exactly as :func:`~mlcore.watermark.embed.working_residual`
  does on the working grid, so each tile the extractor reads carries its neighbours' marks at its
  edges; the four tiles share one key, as the tiles of a marked photo do.
- **s** is *fixed by fidelity*: the batch's mark is scaled to the target PSNR (38 dB), as
  :func:`~mlcore.watermark.embed.mark_image` scales each photo's, so the loss cannot buy accuracy with
  energy. L_energy = (log ‖r‖ / ‖r‖_target)² keeps the markers' natural residual near that energy,
  so the embed path's strength stays near 1 and never reaches its cap.
- **Q** rounds to 8 bits (straight through) and **T** is a real attack with a differentiable stand-in
  for its gradient (:mod:`mlcore.watermark.residual_attacks`): JPEG at the working grid and at a
  larger photo size, downscale-and-back, the two together, blur, noise, or nothing.
- **L_null** is a BCE towards ½ (no opinion) on two kinds of unmarked patches: clean photo patches,
  so the extractor has no leaning of its own that a vote over hundreds of tiles would add up into
  the same bits for every photo (the per-bit bias that capped the extractor-only fine-tune), and
  *forged* patches — the mean mark of four patches marked under one key, rescaled to a real mark's
  energy and added to another photo, which is the averaging forgery the bench measures. Its
  gradient reaches the markers too: a mark whose mean over images reads as the key is penalised,
  so training favours marks tied to the content they were made for.

**A secret phase** (``random_offset``; :mod:`mlcore.watermark.embed`'s per-image random offset).
The marked patch keeps its tiles where the embed path puts them, but the extractor reads tiles cut
at random positions in [0, stride)² of the patch (:func:`random_tiles`): the reader's tiles then sit
at a random phase to the mark's tiling, as on a photo marked at a secret offset, so the extractor
must read the mark wherever the tile borders fall. The forged patches average marks each shifted by
its own random offset (:func:`shift_fields`), as an attacker's mean of photos marked at independent
phases does, and the held-out evaluation reads and forges the same way.

**Schedule.** The mark starts stronger (``psnr_start``) and anneals to the target over
``ramp_fraction`` of the steps while the attacks ramp in (``attack_ramp``); the forged patches' weight
ramps in from ``forge_start``. Penalising the forgery from the first step, with an extractor that
has only its CNN, never left chance at our CPU budget: nothing is readable yet, so the null loss
simply teaches the extractor to answer zero everywhere (``content-only`` in
:mod:`mlcore.zoo.molm_residual`).

The clean decodes D(E(x)) of the training patches are computed once; a step then costs one keyed
decode with its backward pass and the extractor's. Every step's randomness derives from (seed,
step), so a resumed run continues exactly. ``python -m mlcore.zoo train molm-residual``
(:mod:`mlcore.zoo.molm_residual`) is the recipe.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mlcore.watermark.embed import OVERLAP, window
from mlcore.watermark.extractor import Extractor
from mlcore.watermark.markers import Markers
from mlcore.watermark.residual_attacks import ATTACK_MIX, jpeg_real, quantise, random_attacks, rescale

Log = Callable[[dict[str, Any]], None]

#: Tiles per patch side: a 2 × 2 block, so every tile has marked neighbours along two edges.
TILES_PER_SIDE = 2


def patch_side(tile: int) -> int:
    """The side of a block of ``TILES_PER_SIDE`` overlapping tiles at the embed path's stride."""
    return TILES_PER_SIDE * (tile - OVERLAP) + OVERLAP


def tile_origins(tile: int) -> list[tuple[int, int]]:
    """Top-left corners of a patch's tiles, row-major (the order of :meth:`embed.Grid.origins`)."""
    stride = tile - OVERLAP
    return [(i * stride, j * stride) for i in range(TILES_PER_SIDE) for j in range(TILES_PER_SIDE)]


def cut_tiles(patches: torch.Tensor, tile: int) -> torch.Tensor:
    """(P, C, S, S) patches → (P · T², C, tile, tile) tiles, patch by patch in :func:`tile_origins` order."""
    tiles = [patches[:, :, y : y + tile, x : x + tile] for y, x in tile_origins(tile)]
    return torch.stack(tiles, 1).flatten(0, 1)


def blend_tiles(residuals: torch.Tensor, tile: int) -> torch.Tensor:
    """(P · T², C, t, t) tile residuals → (P, C, S, S): Σ wᵢ rᵢ / Σ wᵢ, as the embed path blends them.

    Differentiable (a sum of padded copies), so the markers receive the gradient of the blended mark.
    """
    side = patch_side(tile)
    w = window(tile).to(residuals)
    per_patch = residuals.reshape(-1, TILES_PER_SIDE**2, *residuals.shape[1:])
    field = torch.zeros(per_patch.shape[0], residuals.shape[1], side, side, dtype=residuals.dtype)
    total = torch.zeros(side, side, dtype=residuals.dtype)
    for i, (y, x) in enumerate(tile_origins(tile)):
        pad = (x, side - x - tile, y, side - y - tile)
        field = field + F.pad(per_patch[:, i] * w, pad)
        total = total + F.pad(w, pad)
    return field / total.clamp_min(1e-6)


def random_corners(n: int, tile: int, g: torch.Generator, per: int = TILES_PER_SIDE**2) -> torch.Tensor:
    """(n, per, 2) tile corners in [0, stride)² for ``per`` tiles of each of ``n`` patches: random phases."""
    return torch.randint(0, tile - OVERLAP, (n, per, 2), generator=g)


def random_shifts(fields: torch.Tensor, tile: int, g: torch.Generator, share: float = 1.0) -> torch.Tensor:
    """``fields`` each moved by a random phase in [0, stride)² (:func:`shift_fields`); with ``share`` < 1
    (the curriculum) each keeps its grid, a shift of 0, with probability 1 − share."""
    shifts = torch.randint(0, tile - OVERLAP, (len(fields), 2), generator=g)
    if share < 1:
        shifts = shifts * (torch.rand(len(fields), 1, generator=g) < share)
    return shift_fields(fields, shifts, tile - OVERLAP)


def mixed_corners(n: int, tile: int, g: torch.Generator, share: float) -> torch.Tensor:
    """:func:`random_corners`, each tile left on the mark's grid (:func:`tile_origins`) with probability 1 − share."""
    corners = random_corners(n, tile, g)
    if share >= 1:
        return corners
    aligned = torch.rand(n, TILES_PER_SIDE**2, generator=g) >= share
    grid = torch.tensor(tile_origins(tile)).expand(n, -1, -1)
    return torch.where(aligned[..., None], grid, corners)


def random_tiles(patches: torch.Tensor, tile: int, corners: torch.Tensor) -> torch.Tensor:
    """(P, C, S, S) patches → (P · per, C, tile, tile): patch p's tiles at ``corners[p]``, patch by patch.

    Differentiable (slices), so the gradient of what the extractor reads reaches the marks.
    """
    return torch.stack(
        [patches[p, :, y : y + tile, x : x + tile] for p in range(len(patches)) for y, x in corners[p].tolist()]
    )


def shift_fields(fields: torch.Tensor, shifts: torch.Tensor, stride: int) -> torch.Tensor:
    """Each (C, S, S) field of ``fields`` moved by its (dy, dx) in ``shifts`` ((n, 2), in [0, stride)).

    The field is reflect-padded by ``stride`` first, so the shifted copy has content everywhere; a
    tile-periodic pattern moves by exactly (dy, dx) inside the patch.
    """
    padded = F.pad(fields, (stride, stride, stride, stride), mode="reflect")
    h, w = fields.shape[-2:]
    return torch.stack(
        [
            padded[i, :, stride - dy : stride - dy + h, stride - dx : stride - dx + w]
            for i, (dy, dx) in enumerate(shifts.tolist())
        ]
    )


def target_rms(psnr: float) -> float:
    """The RMS (in [-1, 1] units) of a mark whose PSNR on the [0, 1] scale is ``psnr`` dB."""
    return 2 * 10 ** (-psnr / 20)


@dataclass
class PatchPool:
    """Photo patches with their tiles' latents and clean decodes, computed once."""

    photos: torch.Tensor  # (n, 3, S, S) in [-1, 1]
    latents: torch.Tensor  # (n · T², c, h, w)
    clean: torch.Tensor  # (n · T², 3, t, t): D(E(tile))

    def __len__(self) -> int:
        return len(self.photos)

    def tiles_of(self, index: torch.Tensor) -> torch.Tensor:
        """Tile indices of patches ``index``, patch by patch."""
        per = TILES_PER_SIDE**2
        return (index[:, None] * per + torch.arange(per)).flatten()


@torch.no_grad()
def patch_pool(vae: Any, photos: torch.Tensor, tile: int, *, batch: int = 256) -> PatchPool:
    """Encode every tile of ``photos`` (its posterior mean, as the embed path does) and decode it unmarked."""
    tiles = cut_tiles(photos, tile)
    latents, clean = [], []
    for start in range(0, len(tiles), batch):
        z = vae.encode(tiles[start : start + batch]).latent_dist.mean
        latents.append(z)
        clean.append(vae.decode(z).sample)
    return PatchPool(photos=photos, latents=torch.cat(latents), clean=torch.cat(clean))


def marked_fields(
    vae: Any, markers: Markers, pool: PatchPool, index: torch.Tensor, keys: torch.Tensor, tile: int
) -> torch.Tensor:
    """(P, 3, S, S) blended residual of patches ``index`` under ``keys`` ((P, M)), at the markers' own strength."""
    tiles = pool.tiles_of(index)
    with markers.keyed(keys.repeat_interleave(TILES_PER_SIDE**2, 0)):
        marked = vae.decode(pool.latents[tiles]).sample
    return blend_tiles(marked - pool.clean[tiles], tile)


def rms(x: torch.Tensor) -> torch.Tensor:
    return x.pow(2).mean().sqrt()


class MarkSchedule:
    """The schedule every embed-path training shares (this module's and the learned baselines'): the
    mark annealed from ``psnr_start`` to ``psnr`` over ``ramp_fraction`` of the steps, the attacks
    ramped in alongside (``attack_ramp``), a linear warm-up and a cosine decay to 0.55 of the rate.
    A mixin for the frozen configs below, which hold these fields."""

    steps: int
    warmup: int
    psnr: float
    psnr_start: float
    ramp_fraction: float
    attack_ramp: bool

    def ramp(self, step: int) -> float:
        return min(1.0, step / max(1.0, self.ramp_fraction * self.steps))

    def psnr_at(self, step: int) -> float:
        return self.psnr_start + (self.psnr - self.psnr_start) * self.ramp(step)

    def attack_mix(self, step: int) -> dict[str, float]:
        """The attack mix at ``step``: with ``attack_ramp``, 'none' starts three times likelier than all else."""
        if not self.attack_ramp:
            return ATTACK_MIX
        return {**ATTACK_MIX, "none": ATTACK_MIX["none"] + 2.2 * (1 - self.ramp(step))}

    def lr_factor(self, step: int) -> float:
        warm = min(1.0, step / max(1, self.warmup))
        return warm * (0.55 + 0.45 * math.cos(math.pi * min(1.0, step / self.steps)))


@dataclass(frozen=True, kw_only=True)
class ResidualTrainConfig(MarkSchedule):
    steps: int = 3000
    patches: int = 8  # marked patches per step (× 4 tiles); the first ``forge_group`` share one key
    forge_group: int = 4
    clean_patches: int = 1  # unmarked patches per step for L_null
    forged_patches: int = 1  # forged patches per step for L_null
    lr_markers: float = 1e-3
    lr_extractor: float = 1.5e-3
    warmup: int = 50
    psnr: float = 38.0  # the mark's PSNR: fidelity fixed by construction
    psnr_start: float = 32.0  # a stronger mark first, annealed to ``psnr`` over ``ramp_fraction``
    ramp_fraction: float = 0.3
    null_weight: float = 0.2  # β on clean patches
    forged_weight: float = 0.5  # β on forged patches, once ramped in
    forge_start: float = 0.4  # the forged patches' weight ramps from 0 at this fraction of the steps ...
    forge_ramp: float = 0.2  # ... to ``forged_weight`` over this fraction (0 and 0: from the first step)
    attack_ramp: bool = True  # mostly unattacked patches early; the full mix by the end of the PSNR ramp
    forge_vote: bool = False  # penalise the forged tiles' *vote* for the key (see :func:`forged_vote_loss`)
    random_offset: bool = False  # read tiles at random phases to the mark's tiling (see "A secret phase")
    phase_ramp: float = 0.0  # with random_offset: the share of tiles at a random phase grows 0 → 1 over this fraction
    energy_weight: float = 0.05  # μ
    eval_every: int = 150
    readback_every: int = 300  # whole held-out photos through the embed path (0: never)
    checkpoint_every: int = 50
    seed: int = 0

    def forged_weight_at(self, step: int) -> float:
        t = (step / self.steps - self.forge_start) / self.forge_ramp if self.forge_ramp > 0 else 1.0
        return self.forged_weight * min(1.0, max(0.0, t)) if step / self.steps >= self.forge_start else 0.0

    def random_share(self, step: int) -> float:
        """The share of tiles read (and forged marks shifted) at a random phase; the rest on the mark's grid."""
        if self.phase_ramp <= 0:
            return 1.0
        return min(1.0, step / max(1.0, self.phase_ramp * self.steps))


def step_randomness(seed: int, step: int) -> tuple[torch.Generator, np.random.Generator]:
    """This step's draws (patches, keys, attacks) from (seed, step) alone: resuming changes nothing."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step), np.random.default_rng((seed, step, 23))


def step_keys(config: ResidualTrainConfig, num_bits: int, g: torch.Generator) -> torch.Tensor:
    """(patches, M) keys: the first ``forge_group`` patches share one key (for the forged patch), the rest their own."""
    distinct = config.patches - config.forge_group + 1
    keys = torch.randint(0, 2, (distinct, num_bits), generator=g).float()
    return torch.cat([keys[:1].expand(config.forge_group, -1), keys[1:]])


def forged(fields: torch.Tensor, photos: torch.Tensor, scale_to: float) -> torch.Tensor:
    """The averaging forgery: the mean of ``fields`` (one key), rescaled to ``scale_to`` RMS, on each of ``photos``."""
    mean = fields.mean(0, keepdim=True)
    mean = mean * (scale_to / rms(mean).clamp_min(1e-8))
    return quantise((photos + mean).clamp(-1, 1))


def null_loss(logits: torch.Tensor) -> torch.Tensor:
    """BCE towards ½ minus its floor log 2: zero when the extractor has no opinion."""
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, 0.5)) - math.log(2)


def forged_vote_loss(logits: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """How far the forged tiles' vote leans towards the forged key: mean over bits of relu(v_j · (2κ_j − 1)).

    The reader decides on the mean logit over hundreds of tiles, so a per-tile null loss (which is
    satisfied by small logits) leaves a small consistent leaning that the vote adds up; this term
    acts on the vote itself, linearly, so it does not fade as the leaning gets small.
    """
    return F.relu(logits.mean(0) * (2 * key - 1)).mean()


Checkpoint = Callable[[int, torch.optim.Optimizer, list[dict[str, Any]]], None]
Readback = Callable[[], dict[str, Any]]


def train_jointly(
    vae: Any,
    markers: Markers,
    extractor: Extractor,
    pool: PatchPool,
    held: PatchPool,
    config: ResidualTrainConfig,
    *,
    log: Log = print,
    out_of_time: Callable[[], bool] | None = None,
    start_step: int = 0,
    optimizer_state: dict[str, Any] | None = None,
    history: list[dict[str, Any]] | None = None,
    on_checkpoint: Checkpoint | None = None,
    readback: Readback | None = None,
) -> list[dict[str, Any]]:
    """Train ``markers`` (attached to ``vae``, no shift) and ``extractor`` in place; returns the eval history.

    ``out_of_time`` is asked after every step: once it says so, the state is checkpointed and the loop
    returns early (the caller sees the step in the last checkpoint). ``readback`` (optional) marks
    and reads whole held-out photos through the embed path every ``readback_every`` steps.
    """
    if markers.has_shift:
        raise ValueError("joint residual training is for markers without the bias shift (markers.without_shift())")
    tile = extractor.image_size
    vae.requires_grad_(False)
    markers.requires_grad_(True)
    extractor.requires_grad_(True)
    optimizer = torch.optim.AdamW(
        [
            {"params": list(markers.parameters()), "lr": config.lr_markers, "weight_decay": 0.0},
            {"params": list(extractor.parameters()), "lr": config.lr_extractor, "weight_decay": 1e-4},
        ]
    )
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    base_lrs = [config.lr_markers, config.lr_extractor]
    history = list(history or [])
    running: dict[str, list[float]] = {
        "loss_bits": [],
        "loss_clean": [],
        "loss_forged": [],
        "train_bits": [],
        "raw_psnr": [],
    }
    started = time.monotonic()
    step = start_step
    for step in range(start_step + 1, config.steps + 1):
        markers.train()
        extractor.train()
        g, rng = step_randomness(config.seed, step)
        for group, lr in zip(optimizer.param_groups, base_lrs, strict=True):
            group["lr"] = lr * config.lr_factor(step)
        psnr = config.psnr_at(step)
        goal = target_rms(psnr)
        index = torch.randint(0, len(pool), (config.patches,), generator=g)
        keys = step_keys(config, markers.num_bits, g)
        fields = marked_fields(vae, markers, pool, index, keys, tile)
        raw = rms(fields)
        fields = fields * (goal / raw)  # s: the batch's mark at the target PSNR
        marked = quantise((pool.photos[index] + fields).clamp(-1, 1))
        others = torch.randint(0, len(pool), (config.clean_patches + config.forged_patches,), generator=g)
        nulls = [quantise(pool.photos[others[: config.clean_patches]])]
        group = fields[: config.forge_group]
        share = config.random_share(step)
        if config.random_offset and config.forged_patches:
            group = random_shifts(group, tile, g, share)
        if config.forged_patches:
            nulls.append(forged(group, pool.photos[others[config.clean_patches :]], goal))
        batch = random_attacks(torch.cat([marked, *nulls]), rng, mix=config.attack_mix(step))
        if config.random_offset:
            logits = extractor(random_tiles(batch, tile, mixed_corners(len(batch), tile, g, share)))
        else:
            logits = extractor(cut_tiles(batch, tile))
        n_marked = len(marked) * TILES_PER_SIDE**2
        target = keys.repeat_interleave(TILES_PER_SIDE**2, 0)
        loss_bits = F.binary_cross_entropy_with_logits(logits[:n_marked], target)
        n_clean = config.clean_patches * TILES_PER_SIDE**2
        loss_clean = null_loss(logits[n_marked : n_marked + n_clean]) if n_clean else logits.new_zeros(())
        forged_logits = logits[n_marked + n_clean :]
        if not config.forged_patches:
            loss_forged = logits.new_zeros(())
        elif config.forge_vote:
            loss_forged = forged_vote_loss(forged_logits, keys[0])
        else:
            loss_forged = null_loss(forged_logits)
        loss_null = config.null_weight * loss_clean + config.forged_weight_at(step) * loss_forged
        loss_energy = torch.log(raw / target_rms(config.psnr)) ** 2
        loss = loss_bits + loss_null + config.energy_weight * loss_energy
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_([*markers.parameters(), *extractor.parameters()], 5.0)
        optimizer.step()
        running["loss_bits"].append(loss_bits.item())
        running["loss_clean"].append(loss_clean.item())
        running["loss_forged"].append(loss_forged.item())
        running["train_bits"].append(((logits[:n_marked] > 0).float() == target).float().mean().item())
        running["raw_psnr"].append(20 * math.log10(2 / max(raw.item(), 1e-12)))
        if step % config.eval_every == 0 or step == config.steps:
            row: dict[str, Any] = {"stage": "joint", "step": step, "psnr_trained": round(psnr, 2)}
            row.update({k: round(float(np.mean(v)), 4) for k, v in running.items()})
            running = {k: [] for k in running}
            row.update(
                evaluate(
                    vae,
                    markers,
                    extractor,
                    held,
                    psnr=config.psnr,
                    seed=config.seed,
                    random_offset=config.random_offset,
                )
            )
            if (
                readback is not None
                and config.readback_every
                and (step % config.readback_every == 0 or step == config.steps)
            ):
                row["photos"] = readback()
            row["seconds"] = round(time.monotonic() - started, 1)
            history.append(row)
            log(row)
        if on_checkpoint is not None and (step % config.checkpoint_every == 0 or step == config.steps):
            on_checkpoint(step, optimizer, history)
        if out_of_time is not None and out_of_time():
            if on_checkpoint is not None:
                on_checkpoint(step, optimizer, history)
            log({"stage": "stopped at the time budget", "step": step})
            break
    markers.eval().requires_grad_(False)
    extractor.eval().requires_grad_(False)
    return history


@torch.no_grad()
def evaluate(
    vae: Any,
    markers: Markers,
    extractor: Extractor,
    held: PatchPool,
    *,
    psnr: float,
    seed: int,
    chunk: int = 32,
    random_offset: bool = False,
) -> dict[str, Any]:
    """Held-out patches at ``psnr``, one key each: per-tile and per-patch-vote bit accuracy clean, after
    JPEG-75 and after a 0.5 resize; the worst bit; the extractor's leaning on clean tiles; and the
    averaging forgery — the mean mark of ``half`` the patches under one key on the other half, read by
    a vote over all their tiles (bit accuracy against that key: ½ means the forgery reads nothing).
    With ``random_offset`` the tiles are read at seeded random phases and the forger's marks are each
    shifted by a random offset before they are averaged (see "A secret phase").
    """
    was = markers.training, extractor.training
    markers.eval()
    extractor.eval()
    tile = extractor.image_size
    per = TILES_PER_SIDE**2
    g = torch.Generator().manual_seed(seed + 77)
    n = len(held)
    keys = torch.randint(0, 2, (n, markers.num_bits), generator=g).float()
    goal = target_rms(psnr)
    fields = torch.cat(
        [
            marked_fields(vae, markers, held, torch.arange(s, min(n, s + chunk)), keys[s : s + chunk], tile)
            for s in range(0, n, chunk)
        ]
    )
    fields = fields * (goal / rms(fields))
    marked = quantise((held.photos + fields).clamp(-1, 1))

    phases = torch.Generator().manual_seed(seed + 78)

    def read(images: torch.Tensor) -> torch.Tensor:
        if random_offset:
            tiles = random_tiles(images, tile, random_corners(len(images), tile, phases, per))
        else:
            tiles = cut_tiles(images, tile)
        return torch.cat([extractor(tiles[s : s + 256]) for s in range(0, len(tiles), 256)])

    out: dict[str, Any] = {}
    target = keys.repeat_interleave(per, 0)
    for name, images in (
        ("none", marked),
        ("jpeg75", jpeg_real(marked, 75)),
        ("resize05", quantise(rescale(marked, 0.5))),
    ):
        logits = read(images)
        correct = ((logits > 0).float() == target).float()
        out[f"tile_{name}"] = round(correct.mean().item(), 4)
        vote = logits.reshape(n, per, -1).mean(1)
        out[f"patch_{name}"] = round(((vote > 0).float() == keys).float().mean().item(), 4)
        if name == "none":
            out["worst_bit_tile"] = round(correct.mean(0).min().item(), 4)
    clean = read(quantise(held.photos))
    out["clean_leaning"] = round(clean.mean(0).abs().max().item(), 3)  # the largest per-bit mean logit
    out["clean_logit_std"] = round(clean.std().item(), 3)
    # The averaging forgery under one key: the first half marked with keys[0], their mean mark on the rest.
    half = n // 2
    one = keys[:1].expand(half, -1)
    pattern = torch.cat(
        [
            marked_fields(vae, markers, held, torch.arange(s, min(half, s + chunk)), one[s : s + chunk], tile)
            for s in range(0, half, chunk)
        ]
    )
    pattern = pattern * (goal / rms(pattern))
    if random_offset:
        pattern = random_shifts(pattern, tile, phases)
    mean = pattern.mean(0, keepdim=True)
    out["forgery_pattern_psnr"] = round(20 * math.log10(2 / max(rms(mean).item(), 1e-12)), 2)
    victims = quantise((held.photos[half:] + mean).clamp(-1, 1))
    vote = read(victims).mean(0)
    out["forgery_vote_bits"] = round(((vote > 0).float() == keys[0]).float().mean().item(), 4)
    markers.train(was[0])
    extractor.train(was[1])
    return out


def extractor_for_residuals(base: Extractor) -> Extractor:
    """A fresh extractor of ``base``'s CNN shape with its CNN weights, and *no* linear template read-out.

    The read-out is a matched filter for one fixed pattern per bit: it can only read the part of a
    mark that is the same in every image, which is exactly the part averaging forges.
    """
    config = {k: v for k, v in base.config.items() if not k.startswith("_")}
    extractor = Extractor(**{**config, "linear_readout": False})
    weights = {k: v for k, v in base.state_dict().items() if not k.startswith("readout.")}
    extractor.load_state_dict(weights)
    return extractor
