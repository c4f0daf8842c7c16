"""A secret random phase of the embed grid per image, and a reader that reads at any phase
(``mlcore.watermark.embed``: ``random_offset``, ``offset_residual``, ``reading_origins``; the joint
training's random-phase tiles and shifted forgeries in ``mlcore.watermark.residual_train``)."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from mlcore.watermark import embed, image_io
from mlcore.watermark.extractor import Extractor
from mlcore.watermark.generator import from_uint8
from mlcore.watermark.pipeline import key_tensor, load_bundle
from mlcore.watermark.residual_train import (
    ResidualTrainConfig,
    patch_pool,
    patch_side,
    random_corners,
    random_tiles,
    shift_fields,
    train_jointly,
)
from mlcore.watermark.verification import decode
from tests.mlcore.watermark.test_embed import photo
from tests.mlcore.watermark.tiny import tiny_vae

TILE = 16  # the tiny test VAE's tiles
STRIDE = TILE - embed.OVERLAP
KEY = key_tensor("".join(np.random.default_rng(4).choice(["0", "1"], 48)), 48)


pytestmark = pytest.mark.usefixtures("small_working_grid")


@pytest.fixture(scope="module")
def fixed(embed_bundle_dir):
    """A bundle as every one before the option: no offset key in its extractor's config."""
    return load_bundle(embed_bundle_dir)


@pytest.fixture(scope="module")
def offset_dir(embed_bundle_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("offset") / "bundle"
    shutil.copytree(embed_bundle_dir, folder)
    config = json.loads((folder / "extractor" / "config.json").read_text())
    (folder / "extractor" / "config.json").write_text(json.dumps({**config, embed.OFFSET_KEY: "random"}))
    return folder


@pytest.fixture(scope="module")
def offset(offset_dir):
    return load_bundle(offset_dir)


def _pattern_tiles(monkeypatch, seed: int = 0) -> torch.Tensor:
    """Every tile's residual the same fixed pattern: the content-independent part of a mark, alone."""
    pattern = torch.randn(3, TILE, TILE, generator=torch.Generator().manual_seed(seed))
    monkeypatch.setattr(embed, "tile_residuals", lambda _b, tiles, _k: pattern.expand(len(tiles), -1, -1, -1).clone())
    return pattern


def _periodic_energy(field: torch.Tensor) -> float:
    """Mean square of the field's stride-periodic part (the field folded onto one stride × stride cell)."""
    inner = field[..., TILE : TILE + 6 * STRIDE, TILE : TILE + 6 * STRIDE]
    cells = inner.reshape(*inner.shape[:-2], 6, STRIDE, 6, STRIDE).mean((-4, -2))
    return float((cells - cells.mean((-2, -1), keepdim=True)).pow(2).mean())


# -- the option is recorded, and bundles without it behave as before --------------------------------


def test_the_option_is_read_from_the_extractor_config_and_absent_means_the_fixed_grid(fixed, offset):
    assert not embed.random_offset(fixed.extractor)
    assert embed.random_offset(offset.extractor)
    # Saved again, the key survives (a private config key that diffusers keeps).
    assert offset.extractor.config[embed.OFFSET_KEY] == "random"


def test_old_bundles_mark_and_read_exactly_as_before(fixed):
    pixels = photo(96, 120, seed=3)
    source = image_io.SourceImage(name="p.png", format="PNG", pixels=pixels)
    first = embed.mark_image(fixed, source, KEY, target_psnr=32.0)
    again = embed.mark_image(fixed, source, KEY, target_psnr=32.0)
    assert np.array_equal(first.image.pixels, again.image.pixels)  # no offset drawn: deterministic
    x = from_uint8(pixels[None])
    grid = embed.grid_for(96, 120, TILE)
    work = embed.to_working(x, grid)
    assert torch.equal(
        embed.residual_for(fixed, x, KEY),
        torch.nn.functional.interpolate(
            embed.working_residual(fixed, work, KEY), size=(96, 120), mode="bicubic", align_corners=False
        ),
    )
    # The reader: the fixed grid's tiles, their mean logits, less the extractor's leaning.
    marked = from_uint8(first.image.pixels[None])
    tiles = torch.stack([embed.to_working(marked, grid)[0, :, y : y + 16, x : x + 16] for y, x in grid.origins()])
    with torch.no_grad():
        expected = fixed.extractor(tiles).mean(0) - embed.tile_bias(fixed.extractor)
    assert torch.allclose(embed.read_logits(fixed.extractor, marked), expected, atol=1e-5)


def test_an_offset_of_zero_is_the_fixed_grid_itself(fixed):
    work = from_uint8(photo(96, 96, seed=1)[None])
    assert torch.equal(
        embed.working_residual(fixed, work, KEY, offset=(0, 0)), embed.working_residual(fixed, work, KEY)
    )


# -- marking at an offset ---------------------------------------------------------------------------


@pytest.mark.parametrize("shift", [(3, 5), (7, 1), (4, 0)])
def test_an_offset_shifts_the_tiling_by_exactly_that_many_pixels(monkeypatch, shift):
    _pattern_tiles(monkeypatch)
    bundle = SimpleNamespace(extractor=SimpleNamespace(image_size=TILE))
    work = torch.zeros(1, 3, 96, 96)
    base = embed.working_residual(bundle, work, KEY)
    moved = embed.working_residual(bundle, work, KEY, offset=shift)
    assert moved.shape == base.shape
    dy, dx = shift
    # Away from the image's borders (where the fixed grid has a single tile) the field is the
    # fixed grid's own field, moved by (dy, dx).
    inner = (slice(None), slice(None), slice(TILE, 96 - TILE), slice(TILE, 96 - TILE))
    assert torch.allclose(moved[inner], torch.roll(base, (dy, dx), (-2, -1))[inner], atol=1e-6)
    assert not torch.allclose(moved[inner], base[inner], atol=1e-3)  # the test can fail: it did move


def test_shifted_tiles_leave_no_seam_at_the_images_edges(monkeypatch):
    # Each tile a different constant: a step would show wherever the padded tiling met the image.
    levels = torch.linspace(-1, 1, 400)[torch.randperm(400, generator=torch.Generator().manual_seed(0))]
    monkeypatch.setattr(
        embed, "tile_residuals", lambda _b, tiles, _k: levels[: len(tiles), None, None, None].expand(-1, 3, TILE, TILE)
    )
    bundle = SimpleNamespace(extractor=SimpleNamespace(image_size=TILE))
    field = embed.working_residual(bundle, torch.zeros(1, 3, 96, 104), KEY, offset=(5, 2))
    jump = max(float(field.diff(dim=-1).abs().max()), float(field.diff(dim=-2).abs().max()))
    assert jump < 0.5 * float(levels.diff().abs().max())


def test_each_marking_draws_a_fresh_offset_that_only_a_search_recovers(offset, monkeypatch):
    pixels = photo(96, 96, seed=5)
    source = image_io.SourceImage(name="p.png", format="PNG", pixels=pixels)
    marks = [embed.mark_image(offset, source, KEY, target_psnr=30.0).image.pixels for _ in range(3)]
    # Three draws from 64 phases: all the same would be a 1-in-4096 accident (or a stored offset).
    assert not (np.array_equal(marks[0], marks[1]) and np.array_equal(marks[1], marks[2]))
    # The round trip, on a mark whose every tile is one fixed pattern (so that the phase shows): a
    # seeded draw, recovered by trying every phase; exactly one reproduces the marked photo.
    _pattern_tiles(monkeypatch)
    drawn = embed.draw_offset(STRIDE, np.random.default_rng(11))
    marked = embed.mark_image(offset, source, KEY, target_psnr=30.0, offset_rng=np.random.default_rng(11))
    x = from_uint8(pixels[None])

    def written(shift: tuple[int, int]) -> np.ndarray:
        r = embed.residual_for(offset, x, KEY, offset=shift)[0].permute(1, 2, 0).numpy()
        return np.clip(np.rint(pixels + r * marked.strength * 127.5), 0, 255)

    phases = [(dy, dx) for dy in range(STRIDE) for dx in range(STRIDE)]
    assert [p for p in phases if np.abs(written(p) - marked.image.pixels).max() <= 1] == [drawn]


def test_averaging_marks_at_random_offsets_washes_out_their_periodic_part(fixed, offset):
    # The tiny VAE's residual has a content-independent, tile-periodic part. Averaged over 12 photos
    # on the fixed grid it stays; at independent random offsets it must fall to a fraction of it.
    photos = [photo(96, 96, seed=20 + i) for i in range(12)]
    rng = np.random.default_rng(0)

    def mean_mark(bundle) -> torch.Tensor:
        total = torch.zeros(1, 3, 96, 96)
        for pixels in photos:
            source = image_io.SourceImage(name="p.png", format="PNG", pixels=pixels)
            marked = embed.mark_image(bundle, source, KEY, target_psnr=30.0, offset_rng=rng)
            total += from_uint8(marked.image.pixels[None]) - from_uint8(pixels[None])
        return total / len(photos)

    on_grid, at_random = _periodic_energy(mean_mark(fixed)), _periodic_energy(mean_mark(offset))
    assert on_grid > 0  # the test can fail: there is a periodic part to wash out
    assert at_random < 0.2 * on_grid


# -- reading at any phase ---------------------------------------------------------------------------


def test_the_reading_grid_covers_every_phase_evenly_inside_the_image():
    grid = embed.grid_for(200, 300, 32)
    origins = embed.reading_origins(grid, phases=2)
    assert {(y % grid.stride, x % grid.stride) for y, x in origins} == {(0, 0), (0, 12), (12, 0), (12, 12)}
    assert all(y + 32 <= grid.height and x + 32 <= grid.width for y, x in origins)
    assert set(grid.origins()) <= set(origins)


def test_a_photo_marked_at_a_secret_offset_is_read_by_the_phase_vote_through_the_portal(offset):
    from PIL import Image

    pixels = photo(96, 112, seed=7)
    source = image_io.SourceImage(name="p.png", format="PNG", pixels=pixels)
    marked = embed.mark_image(offset, source, KEY, target_psnr=30.0)
    written = image_io.read(image_io.encode(marked.image)).pixels
    x = from_uint8(written[None])
    grid = embed.grid_for(96, 112, TILE)
    work = embed.to_working(x, grid)
    tiles = torch.stack([work[0, :, y : y + 16, x_ : x_ + 16] for y, x_ in embed.reading_origins(grid)])
    assert len(tiles) > len(grid.origins())  # more than the fixed grid's tiles
    with torch.no_grad():
        expected = offset.extractor(tiles).mean(0) - embed.tile_bias(offset.extractor)
    assert torch.allclose(embed.read_logits(offset.extractor, x), expected, atol=1e-5)
    probabilities = decode(offset.extractor, [Image.fromarray(written)])[0]
    assert np.allclose(probabilities, torch.sigmoid(expected).numpy(), atol=1e-5)


# -- training at random phases ----------------------------------------------------------------------


def test_training_tiles_are_cut_at_random_phases_inside_the_patch():
    side = patch_side(32)
    corners = random_corners(50, 32, torch.Generator().manual_seed(0))
    assert corners.shape == (50, 4, 2) and corners.min() >= 0 and corners.max() < 24
    assert len({tuple(c) for c in corners.reshape(-1, 2).tolist()}) > 100  # many phases, not a few
    patches = torch.arange(2 * 3 * side * side, dtype=torch.float32).reshape(2, 3, side, side)
    tiles = random_tiles(patches, 32, corners[:2])
    y, x = corners[1, 2].tolist()
    assert tiles.shape == (8, 3, 32, 32) and torch.equal(tiles[6], patches[1, :, y : y + 32, x : x + 32])


def test_a_shifted_field_moves_a_periodic_pattern_by_its_offset_and_averaging_blurs_it():
    period = torch.randn(3, 8, 8, generator=torch.Generator().manual_seed(1))
    field = period.repeat(1, 7, 7)[None].expand(16, -1, -1, -1)  # 56 px, period 8
    shifts = torch.randint(0, 8, (16, 2), generator=torch.Generator().manual_seed(2))
    moved = shift_fields(field, shifts, 8)
    dy, dx = shifts[3].tolist()
    assert torch.allclose(moved[3, :, 8:48, 8:48], torch.roll(field[3], (dy, dx), (-2, -1))[:, 8:48, 8:48])
    ac = (period - period.mean((-2, -1), keepdim=True)).pow(2).mean()
    mean = moved.mean(0)[:, 8:48, 8:48]
    assert (mean - mean.mean((-2, -1), keepdim=True)).pow(2).mean() < 0.25 * ac


def test_joint_training_at_random_phases_runs_and_reports_the_phase_free_forgery():
    from mlcore.watermark.extractor import Extractor
    from mlcore.watermark.markers import Markers

    torch.set_num_threads(1)
    vae = tiny_vae()
    g = torch.Generator().manual_seed(0)
    side = patch_side(TILE)
    pool = patch_pool(vae, torch.rand(6, 3, side, side, generator=g) * 2 - 1, TILE)
    held = patch_pool(vae, torch.rand(4, 3, side, side, generator=g) * 2 - 1, TILE)
    torch.manual_seed(1)
    markers = Markers.for_vae(vae, num_adapters=16, rank=2, init_scale=0.5, shift_scale=0.0)
    markers.attach(vae)
    torch.manual_seed(2)
    extractor = Extractor(num_bits=48, image_size=TILE, channels=(8, 8), head_channels=4, hidden=16)
    config = ResidualTrainConfig(steps=2, patches=4, forge_group=2, eval_every=2, random_offset=True)
    try:
        history = train_jointly(vae, markers, extractor, pool, held, config, log=lambda row: None)
    finally:
        markers.detach()
    assert [row["step"] for row in history] == [2]
    assert 0.0 <= history[0]["forgery_vote_bits"] <= 1.0 and 0.0 <= history[0]["tile_none"] <= 1.0


class _TemplateReader(torch.nn.Module):
    """A reader that needs the phase: every bit reads ± the correlation of a tile with one template."""

    def __init__(self, template: torch.Tensor, key: torch.Tensor, mode: str | None) -> None:
        super().__init__()
        self.template = torch.nn.Parameter(template.flatten(), requires_grad=False)
        self.signs = 2 * key - 1
        self.image_size, self.num_bits = template.shape[-1], len(key)
        self.config = {embed.OFFSET_KEY: mode} if mode else {}

    def forward(self, tiles: torch.Tensor) -> torch.Tensor:
        return (tiles.flatten(1) @ self.template)[:, None] * self.signs / 50


def test_the_phase_search_finds_a_secret_offset_that_a_fixed_grid_reader_misses(monkeypatch):
    pattern = _pattern_tiles(monkeypatch, seed=3)  # the mark: one fixed pattern per tile
    searching = _TemplateReader(pattern, KEY, "random-search")
    monkeypatch.setattr(embed, "tile_bias", lambda extractor: torch.zeros(48))
    bundle = SimpleNamespace(extractor=searching)
    grey = np.full((96, 96, 3), 128, np.uint8)  # no content: only the mark is read
    source = image_io.SourceImage(name="p.png", format="PNG", pixels=grey)
    marked = embed.mark_image(bundle, source, KEY, target_psnr=30.0, offset_rng=np.random.default_rng(2))
    drawn = embed.draw_offset(STRIDE, np.random.default_rng(2))
    assert drawn != (0, 0)
    x = from_uint8(marked.image.pixels[None])
    grid = embed.grid_for(96, 96, TILE)
    assert embed.search_phase(searching, embed.to_working(x, grid), grid) == drawn
    found = embed.read_logits(searching, x)
    assert torch.equal((found > 0).float(), KEY)
    # The same reader on the fixed grid reads the mark a few pixels off its template: a weaker vote.
    fixed_reader = _TemplateReader(pattern, KEY, None)
    assert embed.read_logits(fixed_reader, x).abs().mean() < 0.7 * found.abs().mean()


def _template_extractor(pattern: torch.Tensor, key: torch.Tensor) -> Extractor:
    """A real extractor whose logits are its linear read-out alone, the template ±pattern per key bit."""
    extractor = Extractor(num_bits=48, image_size=TILE, channels=(4, 4), head_channels=2, hidden=4, linear_readout=True)
    with torch.no_grad():
        extractor.head[-1].weight.zero_()
        extractor.head[-1].bias.zero_()
        extractor.readout.weight.copy_((2 * key - 1)[:, None] * pattern.flatten()[None] / 50)
    extractor.register_to_config(**{embed.OFFSET_KEY: "random-search"})
    return extractor.eval()


def test_the_template_votes_of_every_phase_are_the_read_outs_of_that_phases_tiles():
    torch.manual_seed(0)
    extractor = Extractor(num_bits=48, image_size=TILE, channels=(4, 4), head_channels=2, hidden=4, linear_readout=True)
    torch.nn.init.normal_(extractor.readout.weight, std=0.05)
    grid = embed.Grid(76, 90, TILE, whole=False)
    work = torch.rand(1, 3, grid.height, grid.width) * 2 - 1
    votes = embed.template_votes(extractor, work, grid)
    assert votes.shape == (STRIDE, STRIDE, 48)
    x = work[0]
    detail = x - torch.nn.functional.avg_pool2d(x[None], 3, stride=1, padding=1, count_include_pad=False)[0]
    # 61 corners per column and 75 per row: the phases before (5, 3) hold one more tile than those past them.
    for phase in [(0, 0), (4, 2), (5, 3), (4, 3), (5, 2), (STRIDE - 1, STRIDE - 1)]:
        tiles = torch.stack([detail[:, y : y + TILE, x0 : x0 + TILE] for y, x0 in grid.origins(phase)])
        direct = (tiles.flatten(1) @ extractor.readout.weight.T + extractor.readout.bias).mean(0)
        torch.testing.assert_close(votes[phase] + extractor.readout.bias, direct, atol=1e-5, rtol=1e-5)


def test_a_template_reader_finds_every_secret_offset_over_all_phases_and_reads_the_key(monkeypatch):
    pattern = _pattern_tiles(monkeypatch, seed=5)
    extractor = _template_extractor(pattern, KEY)
    monkeypatch.setattr(embed, "tile_bias", lambda extractor: torch.zeros(48))
    bundle = SimpleNamespace(extractor=extractor)
    grey = np.full((96, 96, 3), 128, np.uint8)
    grid = embed.grid_for(96, 96, TILE)
    for seed in range(4):
        source = image_io.SourceImage(name="p.png", format="PNG", pixels=grey)
        marked = embed.mark_image(bundle, source, KEY, target_psnr=30.0, offset_rng=np.random.default_rng(seed))
        drawn = embed.draw_offset(STRIDE, np.random.default_rng(seed))
        x = from_uint8(marked.image.pixels[None])
        work = embed.to_working(x, grid)
        assert embed.find_phase(extractor, work, grid) == drawn == embed.key_phase(extractor, work, grid, KEY)
        assert torch.equal((embed.read_logits(extractor, x) > 0).float(), KEY)


def test_an_unknown_offset_option_is_refused_rather_than_read_on_the_fixed_grid():
    reader = SimpleNamespace(config={embed.OFFSET_KEY: "sometimes"})
    with pytest.raises(ValueError, match="sometimes"):
        embed.random_offset(reader)
