"""Marking a user's own image at its own size: the residual of the key-routed decoder, tiled without seams.

MOLM marks images the generator makes: x̃ = D_{Φ+ΔΦ(κ)}(z). A user's photo has no latent, and
decoding its encoding would replace the photo by the VAE's reconstruction (about 25 dB on the zoo
VAE). So the photo keeps its own pixels and receives only what the key changes:

    r(x) = D_{Φ+ΔΦ(κ)}(E(x)) − D_Φ(E(x))            (the mark, a residual)
    x̃ = x + s · U(r(R(x)))

with R a resize to a canonical *working grid* and U the resize back to the image's own size (the
mark is computed once, on the working grid, whatever the image's size) and s a strength (1 = the
decoder's own perturbation).

**The working grid.** The image is resized so that its short side is ``WORK_SIDE`` pixels (the
long side keeps the aspect ratio, rounded to whole tiles). Because that grid depends on the aspect
ratio only, a resized copy of a marked image maps onto the same grid: the reader undoes a rescale
by construction. Images whose short side is at most ``SMALL_SIDE`` (the zoo generator's own 32-pixel
images) are read and marked whole, at the extractor's input size, as before.

**Tiles without seams.** The markers and the extractor were trained on ``tile`` × ``tile`` images
(32 on the zoo). The working image is cut into such tiles at a stride of ``tile − OVERLAP``, so
neighbours overlap by ``OVERLAP`` pixels; each tile's residual is weighted by the separable window
:func:`window` (1 inside, a sin² ramp over the overlap), the two ramps of an overlap sum to exactly
1 (sin² + cos²), and the field is Σ wᵢ rᵢ / Σ wᵢ: every pixel's mark is a smooth blend of the tiles
that cover it, with no step where a tile ends (tested: the residual's jumps across tile borders are
no larger than inside tiles, where naive tiling doubles them).

**Reading** (:func:`read_logits`): the same working grid and tiles, the extractor's logits
averaged over every tile (a soft vote: a bit's evidence adds up across tiles, so more of the image
means a more certain read, and a crop or a local edit loses only the tiles it touches).

**A secret phase per image** (an option of the bundle: the extractor's config says
``"_embed_grid_offset": "random"``; bundles without it mark and read exactly as above). On the
fixed grid every photo's mark is laid on the same tiles, so whatever part of the residual does not
depend on the content (the decoder's answer to a tile's borders, say) repeats with the tile period
at the same place in every photo, and the mean of a few marked photos' residuals forges it. With the
option, each marking draws a fresh offset (dy, dx) ∈ [0, stride)² from the operating system's
entropy, never stored, and shifts the whole tiling by it (:func:`offset_residual`: the working image
is reflect-padded so that the shifted tiles still cover it, and the padding's residual is dropped).
The mean of N photos marked at independent phases holds a tile-periodic component p as
(1/N) Σᵢ p(· − dᵢ), which tends to p's mean over one period, a constant: a content-independent
pattern no longer adds up. The reader cannot know the phase, so it must not need it: an extractor
trained on tiles cut at random phases to the mark's tiling (:mod:`mlcore.watermark.residual_train`,
``random_offset``), whose vote :func:`read_logits` takes over the tiles of several phases of its
own grid (:data:`READ_PHASES` per axis). The option's other value, ``"random-search"``, is for an
extractor trained on the mark's own tiling, which needs the phase: the reader searches for it
(:func:`find_phase`: the phase whose vote is the most confident — over every phase at once through
the extractor's linear template read-out, :func:`template_phase`, or for an extractor without one
on a coarse-to-fine lattice of the tiles near the centre, :func:`search_phase`) and votes over the
grid at that phase. The phase is hidden only from a forger who averages
as he finds the photos: one who holds the originals sees each residual's tile-periodic part, can
line the phases up first, and averages a fixed-grid mark again (bench/results/watermark-forgery.md).

**Per-tile keys from the content** (the extractor's config holds :data:`TILE_KEYS`, a seed). Every
tile of the fixed grid carries the key with some of its bits flipped, and which bits depends on the
tile's own content: with c(t) the tile's colour averaged over :data:`TILE_KEY_POOL` ² cells (less
the tile's mean, then less the mean of that over the image's tiles) and W a (3·POOL², M) Gaussian
matrix drawn from the seed, bit b of tile t is flipped where ⟨W_b, c(t)⟩ < 0:

    κ_t = κ ⊕ [c(t)ᵀW < 0],        r(x) = blend_t( D_{Φ+ΔΦ(κ_t)}(E(x_t)) − D_Φ(E(x_t)) )

The reader computes the same projections on the image it is given and undoes the flips softly,
trusting a tile's bit by how far its projection is from the decision (:data:`TILE_KEY_SCALE`):

    v_b = Σ_t ℓ_{t,b} · tanh(⟨W_b, c(t)⟩ / σ) / Σ_t |tanh(⟨W_b, c(t)⟩ / σ)|

This is spread-spectrum reading. The low-pass cells survive JPEG and resizing, so the flips are
found again. What a photo's content makes every tile's logits lean towards (one direction for the
whole image, which the fixed ``tile_bias`` removes only on average) is multiplied by signs that
change from tile to tile and averages out. And a forger's mean of N marks is the key scrambled by N
other photos' content: on a new photo the reader unscrambles it with that photo's own flips, which
agree with it no more than a coin does — unless the forger pastes so much of those photos' content
with it that the new photo's flips move towards theirs (bench/results/watermark-forgery.md measures
both). The marks line up on the fixed grid, so no phase is searched. The seed is part of the
markers' files, as private or as public as their weights.

**Folded projections** (:data:`TILE_KEYS` given as a scheme, :class:`TileKeys`). A forger who
pastes the mean of N marked photos onto a new one, their content with it (he has no originals), adds
g = mean of their projections to the new photo's p_t. With a flip where p < 0, the new photo's flips
then lean towards the sign of g, which is the majority of the sources' flips: the stamp's flips and
the reader's agree more often than a coin's (bench/results/watermark-forgery.md measured 0.12 of clean
targets forged by ten photos so). The scheme's ``period`` q folds each projection,

    φ_q(p) = (q/π) · sin(π p / q),        bit b of tile t flips where φ_q(⟨W_b, c(t)⟩) < 0,

so a bit flips where ⌊p / q⌋ is odd. A photo's projections spread over several periods, so the parity
of p_t + g no longer follows g, and neither sign is favoured. Near p = 0, φ_q(p) ≈ p, so the reader's
trust tanh(φ_q / σ) is as before; a tile is discounted near each of the (more numerous) boundaries.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from mlcore.watermark.image_io import SourceImage

if TYPE_CHECKING:
    from mlcore.watermark.extractor import Extractor
    from mlcore.watermark.pipeline import Bundle

#: The working grid's short side in pixels, roughly (it is rounded to whole tile strides).
WORK_SIDE = 256
#: Images whose short side is at most this are marked and read whole, at the extractor's size.
SMALL_SIDE = 64
#: Pixels by which neighbouring tiles overlap; the window ramps between them there.
OVERLAP = 8
#: Tiles per forward pass of the VAE or the extractor (memory, not results, depends on it).
TILE_BATCH = 256
#: The extractor config key that says a bundle marks at a secret per-image phase and reads at any phase.
#: A private (underscored) key: diffusers keeps it in ``config.json`` without passing it to the
#: constructor, so older code loads such an extractor, and extractors without it keep the fixed grid.
OFFSET_KEY = "_embed_grid_offset"
#: Phases of the reading grid per axis when the marks sit at random phases (evenly spaced in a stride).
READ_PHASES = 2
#: The phase search (``"random-search"``): a coarse lattice of this step, then every phase within
#: ``SEARCH_STEP // 2`` of its best, each judged on the ``SEARCH_TILES`` tiles nearest the centre.
SEARCH_STEP = 4
SEARCH_TILES = 6
#: The extractor config key that gives each tile a key flipped by its own content (see "Per-tile keys"):
#: the seed of the projections W. Private for the same reason as :data:`OFFSET_KEY`.
TILE_KEYS = "_embed_tile_keys"
#: A tile's content descriptor: its colour averaged over TILE_KEY_POOL × TILE_KEY_POOL cells.
TILE_KEY_POOL = 4
#: σ of the reader's trust tanh(⟨W_b, c(t)⟩ / σ), on the [-1, 1] pixel scale: the median projection of a
#: photo tile is about 0.35, so most tiles count fully and only those near a flip's boundary are discounted.
TILE_KEY_SCALE = 0.05


@dataclass(frozen=True)
class Grid:
    """Where an image of a given size is marked and read: the working size, tile side and stride."""

    height: int
    width: int
    tile: int
    whole: bool  # a small image: one tile, the whole image resized to tile × tile

    @property
    def stride(self) -> int:
        return self.tile - OVERLAP

    def origins(self, phase: tuple[int, int] = (0, 0)) -> list[tuple[int, int]]:
        """Every tile's top-left corner on the working image; with ``phase`` (dy, dx), the grid's corners
        moved by it, those that stay inside the working image."""
        if self.whole and phase == (0, 0):
            return [(0, 0)]
        return [
            (y, x)
            for y in range(phase[0], self.height - self.tile + 1, self.stride)
            for x in range(phase[1], self.width - self.tile + 1, self.stride)
        ]


def grid_for(height: int, width: int, tile: int, *, work_side: int | None = None) -> Grid:
    """The working grid of an image of ``height`` × ``width`` pixels (see the module docstring)."""
    work_side = work_side or WORK_SIDE
    if min(height, width) <= SMALL_SIDE:
        return Grid(tile, tile, tile, whole=True)
    stride = tile - OVERLAP
    scale = work_side / min(height, width)

    def side(length: int) -> int:
        # n tiles at this stride cover n·stride + overlap pixels exactly.
        n = max(1, round((length * scale - OVERLAP) / stride))
        return n * stride + OVERLAP

    return Grid(side(height), side(width), tile, whole=False)


def offset_mode(extractor: object) -> str | None:
    """The extractor's :data:`OFFSET_KEY`: None (the fixed grid), "random" or "random-search"."""
    config = getattr(extractor, "config", None)
    mode = config.get(OFFSET_KEY) if config else None
    if mode not in (None, "random", "random-search"):
        raise ValueError(f"unknown {OFFSET_KEY} {mode!r} in the extractor's config")
    return mode


@dataclass(frozen=True)
class TileKeys:
    """How an extractor's tiles draw their keys (see "Per-tile keys"): the seed of W, the fold period q
    (None: a bit flips where its projection is negative) and the reader's trust scale σ, both in the
    projections' units."""

    seed: int
    period: float | None = None
    trust: float = TILE_KEY_SCALE

    @classmethod
    def from_config(cls, value: object) -> TileKeys:
        """A :data:`TILE_KEYS` value: a seed (no fold: the first scheme) or a mapping ``{"seed", "period",
        "trust"}`` (every key but the seed optional)."""
        if not isinstance(value, dict):
            return cls(seed=_seed(value))
        unknown = set(value) - {"seed", "period", "trust"}
        if unknown:
            raise ValueError(f"{TILE_KEYS} has unknown settings {sorted(unknown)}")
        keys = cls(seed=_seed(value.get("seed")), period=value.get("period"), trust=value.get("trust", TILE_KEY_SCALE))
        for name in ("period", "trust"):
            number = getattr(keys, name)
            if number is None and name == "period":
                continue
            if isinstance(number, bool) or not isinstance(number, int | float) or not 0 < number < math.inf:
                raise ValueError(f"{TILE_KEYS} {name} must be a positive number, not {number!r}")
        return keys

    def projections(self, tiles: torch.Tensor, num_bits: int) -> torch.Tensor:
        """(n, M) the folded projections φ_q(⟨W_b, c(t)⟩) of one image's (n, 3, T, T) tiles; bit b of tile
        t is flipped where its projection is negative."""
        cells = F.adaptive_avg_pool2d(tiles.float(), TILE_KEY_POOL)
        content = (cells - cells.mean((2, 3), keepdim=True)).flatten(1)
        # Centred over the image: a tilt that runs through the whole photo (light from one side) would
        # otherwise flip the same bits in most of its tiles, and in most photos lit the same way.
        content = content - content.mean(0, keepdim=True)
        w = np.random.default_rng(self.seed).standard_normal((content.shape[1], num_bits))
        p = content @ torch.from_numpy(w).float()
        return p if self.period is None else torch.sin(math.pi * p / self.period) * (self.period / math.pi)

    def keys(self, tiles: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
        """(n, M) each tile's key: ``key`` ((M,) of 0/1) with the bits its content flips flipped."""
        key = key.float().cpu()
        return torch.where(self.projections(tiles, len(key)) < 0, 1 - key, key)


def _seed(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{TILE_KEYS} must hold a non-negative integer seed, not {value!r}")
    return value


def tile_key_scheme(extractor: object) -> TileKeys | None:
    """The extractor's :data:`TILE_KEYS` scheme, or None where tiles carry the key as it is. Per-tile keys
    lie on the fixed grid, so a config that also asks for a random phase is refused."""
    config = getattr(extractor, "config", None)
    value = config.get(TILE_KEYS) if config else None
    if value is None:
        return None
    scheme = TileKeys.from_config(value)
    if offset_mode(extractor) is not None:
        raise ValueError(f"{TILE_KEYS} and {OFFSET_KEY} cannot both be set: per-tile keys lie on the fixed grid")
    return scheme


def random_offset(extractor: object) -> bool:
    """Whether marks for this extractor are laid at a secret random phase (see the module docstring)."""
    return offset_mode(extractor) is not None


def draw_offset(stride: int, rng: np.random.Generator | None = None) -> tuple[int, int]:
    """A fresh (dy, dx) ∈ [0, stride)²: from the operating system's entropy unless ``rng`` is given."""
    rng = rng if rng is not None else np.random.default_rng()
    dy, dx = rng.integers(0, stride, 2)
    return int(dy), int(dx)


def window(tile: int) -> torch.Tensor:
    """(tile, tile) separable weight: 1 inside, a sin² ramp to ~0 over the ``OVERLAP`` pixels at each edge.

    Where two tiles overlap their ramps are sin² and cos² of the same angle, so they sum to 1; the
    residual field Σ wᵢ rᵢ / Σ wᵢ is therefore a blend with no step at any tile's edge.
    """
    t = torch.arange(tile, dtype=torch.float32)
    ramp = torch.sin(math.pi / 2 * ((t + 0.5) / OVERLAP).clamp(max=1.0)) ** 2
    w = torch.minimum(ramp, ramp.flip(0))
    return w[:, None] * w[None, :]


def _batches(tiles: torch.Tensor) -> Iterator[torch.Tensor]:
    for start in range(0, len(tiles), TILE_BATCH):
        yield tiles[start : start + TILE_BATCH]


def to_working(image: torch.Tensor, grid: Grid) -> torch.Tensor:
    """(1, 3, H, W) in [-1, 1] → the working grid (antialiased bilinear), same range."""
    if image.shape[-2:] == (grid.height, grid.width):
        return image
    return F.interpolate(image, size=(grid.height, grid.width), mode="bilinear", antialias=True, align_corners=False)


@torch.no_grad()
def tile_residuals(bundle: Bundle, tiles: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """(n, 3, t, t) tiles in [-1, 1] → D_κ(E(x)) − D(E(x)) for each tile, on the CPU; ``key`` is one
    key (M,) for every tile or one per tile (n, M)."""
    device = bundle.generator.device
    out = []
    for start, batch in zip(range(0, len(tiles), TILE_BATCH), _batches(tiles), strict=True):
        z = bundle.generator.encode(batch.to(device))
        clean = bundle.generator.vae.decode(z).sample
        with bundle.markers.keyed(key if key.ndim == 1 else key[start : start + len(batch)]):
            marked = bundle.generator.vae.decode(z).sample
        out.append((marked - clean).float().cpu())
    return torch.cat(out)


@torch.no_grad()
def working_residual(
    bundle: Bundle,
    work: torch.Tensor,
    key: torch.Tensor,
    *,
    blend: bool = True,
    offset: tuple[int, int] | None = None,
) -> torch.Tensor:
    """The mark on the working grid, (1, 3, h, w): the tiles' residuals blended by :func:`window`.

    ``offset`` (dy, dx) shifts the tiling by that many pixels (:func:`offset_residual`); None keeps
    the tiles at the grid's own corners. ``blend=False`` pastes each tile's residual unweighted
    (later tiles over earlier ones): kept only so a test can show the seams the window removes.
    """
    if offset is not None:
        return offset_residual(bundle, work, key, offset, blend=blend)
    _, c, h, w = work.shape
    grid = Grid(h, w, bundle.extractor.image_size, whole=False)
    t = grid.tile
    tiles = _tiles_at(work, grid, grid.origins())
    scheme = tile_key_scheme(bundle.extractor)
    residuals = tile_residuals(bundle, tiles, key if scheme is None else scheme.keys(tiles, key))
    weight = window(t) if blend else torch.ones(t, t)
    field = torch.zeros(1, c, h, w)
    total = torch.zeros(1, 1, h, w)
    for (y, x), r in zip(grid.origins(), residuals, strict=True):
        if blend:
            field[0, :, y : y + t, x : x + t] += r * weight
            total[0, 0, y : y + t, x : x + t] += weight
        else:
            field[0, :, y : y + t, x : x + t] = r
    return field / total.clamp_min(1e-6) if blend else field


def offset_padding(length: int, tile: int, shift: int) -> tuple[int, int]:
    """(before, after): the padding of one axis of ``length`` pixels whose tiling is shifted by ``shift``.

    The padded axis is n · stride + ``OVERLAP`` long, so the grid's own corners (multiples of the
    stride) on it are the shifted tiling, and the tiles cover every pixel of the unpadded axis.
    """
    stride = tile - OVERLAP
    before = (stride - shift % stride) % stride  # offset 0: no padding, the grid's own tiling
    n = max(1, math.ceil((before + length - OVERLAP) / stride))
    return before, n * stride + OVERLAP - before - length


@torch.no_grad()
def offset_residual(
    bundle: Bundle, work: torch.Tensor, key: torch.Tensor, offset: tuple[int, int], *, blend: bool = True
) -> torch.Tensor:
    """The mark on ``work`` with its tiling shifted by ``offset`` = (dy, dx): tiles at (dy + i·s, dx + j·s).

    The tiles that would stick out of the image read its mirror image there (reflect padding: the
    VAE sees photo-like content, not a black border), and their residual outside the image is dropped.
    """
    _, _, h, w = work.shape
    tile = bundle.extractor.image_size
    top, bottom = offset_padding(h, tile, offset[0])
    left, right = offset_padding(w, tile, offset[1])
    padded = F.pad(work, (left, right, top, bottom), mode="reflect")
    field = working_residual(bundle, padded, key, blend=blend)
    return field[..., top : top + h, left : left + w]


@torch.no_grad()
def residual_for(
    bundle: Bundle,
    image: torch.Tensor,
    key: torch.Tensor,
    *,
    strength: float = 1.0,
    offset: tuple[int, int] | None = None,
) -> torch.Tensor:
    """The mark to add to ``image`` ((1, 3, H, W) in [-1, 1], any size), at the image's own size, on the CPU.

    ``offset`` shifts the working grid's tiling (:func:`offset_residual`); a small image, read whole,
    has no tiling to shift and ignores it.
    """
    height, width = image.shape[-2:]
    grid = grid_for(height, width, bundle.extractor.image_size)
    work = to_working(image.float().cpu(), grid)
    r = tile_residuals(bundle, work, key) if grid.whole else working_residual(bundle, work, key, offset=offset)
    r = r * strength
    if r.shape[-2:] != (height, width):
        # Bicubic: the mark stays smooth at the photo's size (bilinear would leave a faint grid).
        r = F.interpolate(r, size=(height, width), mode="bicubic", align_corners=False)
    return r


@torch.no_grad()
def read_logits(extractor: Extractor, image: torch.Tensor) -> torch.Tensor:
    """(M,) bit logits of one image ((1, 3, H, W) in [-1, 1], any size): the mean over its tiles.

    A small image (short side ≤ ``SMALL_SIDE``) is read whole, exactly as :meth:`Extractor.forward`
    reads it; a larger one tile by tile on its working grid, each tile's logits centred on the
    extractor's mean logits over unmarked photo tiles (:func:`tile_bias`) before the vote: an
    extractor answers unmarked content with the same leaning in every tile, and a vote over many
    tiles would otherwise add that leaning up into the same "decoded" bits for every photo. An
    extractor trained for marks at a random phase (:func:`random_offset`) votes over the tiles of
    :data:`READ_PHASES` ² phases of the grid (:func:`reading_origins`) instead of the grid's own.
    """
    tile = extractor.image_size
    height, width = image.shape[-2:]
    grid = grid_for(height, width, tile)
    device = next(extractor.parameters()).device
    if grid.whole:
        return extractor(image.float().to(device))[0].float().cpu()
    work = to_working(image.float().cpu(), grid)
    mode = offset_mode(extractor)
    if mode == "random":
        tiles = _tiles_at(work, grid, reading_origins(grid))
    elif mode == "random-search":
        tiles = _tiles_at(work, grid, grid.origins(find_phase(extractor, work, grid)))
    else:
        tiles = _tiles_at(work, grid, grid.origins())
        scheme = tile_key_scheme(extractor)
        if scheme is not None:
            return _unscrambled_vote(extractor, tiles, scheme)
    return _mean_logits(extractor, tiles) - tile_bias(extractor)


def _unscrambled_vote(extractor: Extractor, tiles: torch.Tensor, scheme: TileKeys) -> torch.Tensor:
    """(M,) the vote v_b over tiles whose keys their content flipped (see "Per-tile keys")."""
    trust = torch.tanh(scheme.projections(tiles, extractor.num_bits) / scheme.trust)
    logits = _shared_logits(extractor, tiles) - tile_bias(extractor)
    return (logits * trust).sum(0) / trust.abs().sum(0).clamp_min(1e-6)


@dataclass
class _TileReads:
    weights: dict[int, str] = field(default_factory=dict)  # id(extractor) → its weights' digest
    logits: dict[tuple[str, str], torch.Tensor] = field(default_factory=dict)  # (weights, tiles) → logits


_tile_reads: ContextVar[_TileReads | None] = ContextVar("_tile_reads", default=None)


@contextmanager
def shared_tile_reads() -> Iterator[None]:
    """Within it, per-tile-key readers with the same weights read the same tiles once. The portal reads
    every check with each scheme it serves, and schemes on one extractor's weights cut the same tiles
    of the fixed grid: only their votes differ, so the extractor runs once for all of them."""
    token = _tile_reads.set(_TileReads())
    try:
        yield
    finally:
        _tile_reads.reset(token)


def _shared_logits(extractor: Extractor, tiles: torch.Tensor) -> torch.Tensor:
    """:func:`_logits`, looked up by the weights' and the tiles' bytes inside :func:`shared_tile_reads`."""
    reads = _tile_reads.get()
    if reads is None:
        return _logits(extractor, tiles)
    if id(extractor) not in reads.weights:
        reads.weights[id(extractor)] = _digest(t.detach().cpu() for t in extractor.state_dict().values())
    key = (reads.weights[id(extractor)], _digest([tiles]))
    if key not in reads.logits:
        reads.logits[key] = _logits(extractor, tiles)
    return reads.logits[key]


def _digest(tensors: Iterator[torch.Tensor] | list[torch.Tensor]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for t in tensors:
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())  # any dtype, bf16 too
    return h.hexdigest()


@torch.no_grad()
def read_logits_for_key(
    extractor: Extractor, image: torch.Tensor, key: torch.Tensor, votes: torch.Tensor | None = None
) -> torch.Tensor:
    """:func:`read_logits` for a reader that checks one known ``key``: a ``"random-search"`` extractor with
    a template read-out reads at that key's best phase (:func:`key_phase`; ``votes`` as there) instead of the
    most confident one; every other extractor reads exactly as :func:`read_logits`. Benchmark only."""
    height, width = image.shape[-2:]
    grid = grid_for(height, width, extractor.image_size)
    if grid.whole or offset_mode(extractor) != "random-search" or getattr(extractor, "readout", None) is None:
        return read_logits(extractor, image)
    work = to_working(image.float().cpu(), grid)
    return vote_at(extractor, work, grid, key_phase(extractor, work, grid, key, votes))


@torch.no_grad()
def vote_at(extractor: Extractor, work: torch.Tensor, grid: Grid, phase: tuple[int, int]) -> torch.Tensor:
    """(M,) the extractor's vote over the working image's grid at ``phase``, less :func:`tile_bias`."""
    return _mean_logits(extractor, _tiles_at(work, grid, grid.origins(phase))) - tile_bias(extractor)


def _tiles_at(work: torch.Tensor, grid: Grid, origins: list[tuple[int, int]]) -> torch.Tensor:
    """The tiles of a (1, C, h, w) working image at ``origins`` (top-left corners), stacked."""
    t = grid.tile
    return torch.stack([work[0, :, y : y + t, x : x + t] for y, x in origins])


def _mean_logits(extractor: Extractor, tiles: torch.Tensor) -> torch.Tensor:
    device = next(extractor.parameters()).device
    total = torch.zeros(extractor.num_bits)
    for batch in _batches(tiles):
        total += extractor(batch.to(device)).float().sum(0).cpu()
    return total / len(tiles)


def _logits(extractor: Extractor, tiles: torch.Tensor) -> torch.Tensor:
    """The extractor's logits of every tile, batched on its device, (n, bits) on the CPU."""
    device = next(extractor.parameters()).device
    return torch.cat([extractor(b.to(device)).float().cpu() for b in _batches(tiles)])


@torch.no_grad()
def search_phase(extractor: Extractor, work: torch.Tensor, grid: Grid) -> tuple[int, int]:
    """The phase (dy, dx) ∈ [0, stride)² at which the extractor's vote is most confident.

    Confidence: the mean |logit| of the vote (less :func:`tile_bias`) over the :data:`SEARCH_TILES`
    tiles nearest the centre, first on a lattice of step :data:`SEARCH_STEP`, then around its best.
    """
    stride = grid.stride
    cy, cx = (grid.height - grid.tile) / 2, (grid.width - grid.tile) / 2
    inner = [
        (y, x)
        for y, x in grid.origins()
        if y + stride + grid.tile <= grid.height and x + stride + grid.tile <= grid.width
    ]
    near = sorted(inner or grid.origins(), key=lambda o: (o[0] - cy) ** 2 + (o[1] - cx) ** 2)[:SEARCH_TILES]
    bias = tile_bias(extractor)

    def best(phases: list[tuple[int, int]]) -> tuple[int, int]:
        origins = [
            (min(y + py, grid.height - grid.tile), min(x + px, grid.width - grid.tile))
            for py, px in phases
            for y, x in near
        ]
        logits = _logits(extractor, _tiles_at(work, grid, origins))
        votes = logits.reshape(len(phases), len(near), -1).mean(1) - bias
        return phases[int(votes.abs().mean(1).argmax())]

    coarse = best([(py, px) for py in range(0, stride, SEARCH_STEP) for px in range(0, stride, SEARCH_STEP)])
    reach = range(-(SEARCH_STEP // 2), SEARCH_STEP // 2 + 1)
    return best(sorted({((coarse[0] + a) % stride, (coarse[1] + b) % stride) for a in reach for b in reach}))


@torch.no_grad()
def template_votes(extractor: Extractor, work: torch.Tensor, grid: Grid) -> torch.Tensor:
    """(stride, stride, M): for every phase (dy, dx) of the grid, the vote of the extractor's linear
    read-out (its matched filter, ``extractor.readout``) over the tiles of the grid at that phase.

    The read-out of a tile at (y, x) is ⟨W_b, h(tile)⟩ per bit b, h the high-pass x − blur(x), and a
    phase's vote is its tiles' mean. Summed over the tiles first, h folds with the stride's period into
    an (S + T − 1)² window per axis (S the stride, T the tile), and all S² phases' sums are one small
    cross-correlation of that window with the templates (:func:`_phase_sums`): the cost no longer
    grows with the image past the fold. The high-pass is taken on the whole working image, so a tile's
    outermost ring of pixels sees its neighbours where the extractor, reading the tile alone, does not
    (a difference on 1/8 of a 32-pixel tile's pixels).
    """
    if extractor.readout is None:
        raise ValueError("the template phase search needs an extractor with a linear read-out")
    x = work[0].float().cpu()
    detail = x - F.avg_pool2d(x[None], 3, stride=1, padding=1, count_include_pad=False)[0]
    templates = extractor.readout.weight.detach().float().cpu().reshape(-1, 3, grid.tile, grid.tile)
    sums, counts = _phase_sums(detail, templates, grid.stride)
    return (sums / counts).permute(1, 2, 0)


def _phase_sums(detail: torch.Tensor, templates: torch.Tensor, stride: int) -> tuple[torch.Tensor, torch.Tensor]:
    """((M, S, S) sums of ⟨W_b, h(tile)⟩ over the tiles of each phase, (S, S) tile counts) of a (3, H, W)
    high-pass. Along an axis of P = H − T + 1 corners, every phase has n − 1 tiles (n = ⌈P / S⌉) and
    the first r = P − (n − 1)·S phases one more, the n-th: the first n − 1 fold into one window, the
    last row (column) of tiles is a window of its own, and the four combinations are added."""
    tile = templates.shape[-1]

    def axis(length: int) -> tuple[int, int]:
        n = max(1, -(-(length - tile + 1) // stride))
        return n, length - tile + 1 - (n - 1) * stride

    (ny, ry), (nx, rx) = axis(detail.shape[1]), axis(detail.shape[2])

    def fold(x: torch.Tensor, dim: int, n: int, r: int, extra: bool) -> torch.Tensor:
        if extra:  # the last tiles along dim, at the r phases that hold them
            return x.narrow(dim, (n - 1) * stride, r + tile - 1)
        shape = list(x.shape)
        shape[dim] = stride + tile - 1
        window = x.new_zeros(shape)
        for m in range(n - 1):
            window += x.narrow(dim, m * stride, stride + tile - 1)
        return window

    sums = torch.zeros(len(templates), stride, stride)
    for last_row in (False, True):
        rows = fold(detail, 1, ny, ry, last_row)
        for last_col in (False, True):
            part = F.conv2d(fold(rows, 2, nx, rx, last_col)[None], templates)[0]
            sums[:, : part.shape[1], : part.shape[2]] += part
    phases = torch.arange(stride)
    counts = (ny - 1 + (phases < ry)).float()[:, None] * (nx - 1 + (phases < rx)).float()[None, :]
    return sums, counts


def template_phase(extractor: Extractor, work: torch.Tensor, grid: Grid) -> tuple[int, int]:
    """The phase whose template vote (:func:`template_votes`) is the most confident: the mean |vote| over
    the bits, each bit's vote centred on its mean over all phases (what the content gives every phase)."""
    votes = template_votes(extractor, work, grid)
    stride = votes.shape[0]
    confidence = (votes - votes.mean((0, 1))).abs().mean(-1)
    best = int(confidence.argmax())
    return best // stride, best % stride


def key_phase(
    extractor: Extractor, work: torch.Tensor, grid: Grid, key: torch.Tensor, votes: torch.Tensor | None = None
) -> tuple[int, int]:
    """The phase whose template vote agrees best with ``key`` ((M,) bits): the mean of each bit's
    centred vote signed by the key bit. A reader that knows which key it checks for finds that key's
    phase far more often than :func:`template_phase`, which must guess it from confidence alone —
    but a match then maximises over every phase, so its false-positive rate is not one read's
    binomial tail: the portal's thresholds do not cover it, and only the benchmark uses it. ``votes``:
    this image's :func:`template_votes`, when a caller checks several keys against it."""
    votes = template_votes(extractor, work, grid) if votes is None else votes
    stride = votes.shape[0]
    agreement = ((votes - votes.mean((0, 1))) * (2 * key.float() - 1)).mean(-1)
    best = int(agreement.argmax())
    return best // stride, best % stride


def find_phase(extractor: Extractor, work: torch.Tensor, grid: Grid) -> tuple[int, int]:
    """The phase a ``"random-search"`` reader reads at: every phase through the template read-out
    (:func:`template_phase`) where the extractor has one, else the coarse-to-fine :func:`search_phase`."""
    if getattr(extractor, "readout", None) is not None:
        return template_phase(extractor, work, grid)
    return search_phase(extractor, work, grid)


def reading_origins(grid: Grid, phases: int | None = None) -> list[tuple[int, int]]:
    """Tile corners of ``phases`` ² shifted copies of the grid (shifts k · stride / phases per axis), inside it."""
    phases = phases or READ_PHASES
    shifts = sorted({round(k * grid.stride / phases) for k in range(phases)})
    return [o for sy in shifts for sx in shifts for o in grid.origins((sy, sx))]


_bias: dict[int, tuple[Extractor, torch.Tensor]] = {}


def forget_tile_bias(extractor: Extractor) -> None:
    """Drop the cached :func:`tile_bias` of an extractor whose weights changed (training it)."""
    _bias.pop(id(extractor), None)


@torch.no_grad()
def tile_bias(extractor: Extractor, *, n: int = 512) -> torch.Tensor:
    """The extractor's mean logits over ``n`` unmarked photo crops (fixed seed), once per extractor object."""
    cached = _bias.get(id(extractor))
    if cached is not None and cached[0] is extractor:
        return cached[1]
    from mlcore.data.images import image_crops
    from mlcore.watermark.generator import from_uint8

    was_training = extractor.training
    extractor.eval()
    crops = from_uint8(image_crops(n, extractor.image_size, seed=7, split="train"))
    bias = _logits(extractor, crops).mean(0)
    extractor.train(was_training)
    _bias[id(extractor)] = (extractor, bias)
    return bias


#: The most the mark is ever amplified to reach a target PSNR (beyond the decoder's own perturbation).
MAX_STRENGTH = 2.0


@dataclass(frozen=True)
class Marked:
    image: SourceImage
    strength: float  # the factor s the residual was scaled by to meet the target PSNR


@torch.no_grad()
def mark_image(
    bundle: Bundle,
    source: SourceImage,
    key: torch.Tensor,
    *,
    target_psnr: float,
    offset_rng: np.random.Generator | None = None,
) -> Marked:
    """``source`` with the mark of ``key`` added, scaled so the mark alone is ``target_psnr`` dB.

    The mark is computed on the image as shown (EXIF orientation applied) and turned back to the
    stored orientation; a grey image receives the residual's mean over the colour channels; alpha
    and metadata are untouched (:mod:`mlcore.watermark.image_io`). When the bundle marks at a
    random phase (:func:`random_offset`), a fresh offset is drawn for this image and forgotten;
    ``offset_rng`` draws it instead (a test or a benchmark that must repeat itself).
    """
    from mlcore.watermark.image_io import from_display, to_display

    stored = source.pixels.astype(np.float64)
    shown = to_display(stored, source.orientation) / source.maxval * 2 - 1
    x = torch.from_numpy(np.ascontiguousarray(shown)).float().permute(2, 0, 1)[None]
    if x.shape[1] == 1:
        x = x.expand(1, 3, *x.shape[-2:])
    offset = None
    if random_offset(bundle.extractor):
        offset = draw_offset(bundle.extractor.image_size - OVERLAP, offset_rng)
    r = residual_for(bundle, x, key, offset=offset)
    if source.pixels.shape[2] == 1:
        r = r.mean(1, keepdim=True)
    # PSNR of the mark alone on the [0, 1] scale: images in [-1, 1] differ by r / 2 there.
    mse = float(((r / 2) ** 2).mean())
    strength = MAX_STRENGTH if mse <= 0 else min(MAX_STRENGTH, math.sqrt(10 ** (-target_psnr / 10) / mse))
    delta = (r[0] * strength).permute(1, 2, 0).double().numpy() * source.maxval / 2
    pixels = np.clip(np.rint(stored + from_display(delta, source.orientation)), 0, source.maxval)
    return Marked(image=source.with_pixels(pixels.astype(source.pixels.dtype)), strength=strength)
