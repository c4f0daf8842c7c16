"""The embed path: the residual of the key-routed decoder added to the user's own image, any size,
no seams, in the image's own format with its metadata (``mlcore.watermark.embed``, ``image_io``)."""

from __future__ import annotations

import io
import json
import struct
import zlib

import numpy as np
import pytest
import torch
from PIL import Image, ImageCms, ImageOps

from mlcore.jobs import InMemoryContext, JobError
from mlcore.jobs.registry import get_kind
from mlcore.watermark import embed, image_io
from mlcore.watermark.generator import from_uint8
from mlcore.watermark.keys import write_key_file
from mlcore.watermark.pipeline import key_tensor, load_bundle
from tests.mlcore.watermark.tiny import write_bundle

BITS = "".join(np.random.default_rng(3).choice(["0", "1"], 48))


pytestmark = pytest.mark.usefixtures("small_working_grid")


@pytest.fixture(scope="module")
def bundle(embed_bundle_dir):
    return load_bundle(embed_bundle_dir)


@pytest.fixture(scope="module")
def key():
    return key_tensor(BITS, 48)


def photo(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A smooth photo-like RGB image (gradients and blobs), so a seam would stand out."""
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
    rng = np.random.default_rng(seed)
    channels = [
        np.sin(6 * xx * rng.uniform(0.5, 2) + rng.uniform(0, 6)) * np.cos(5 * yy * rng.uniform(0.5, 2))
        for _ in range(3)
    ]
    return ((np.stack(channels, -1) + 1) * 110 + 15).round().astype(np.uint8)


def srgb_icc() -> bytes:
    return ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()


def exif_with_orientation(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[image_io.ORIENTATION_TAG] = orientation
    return exif.tobytes()


# -- the residual -----------------------------------------------------------------------------------


def test_two_overlapping_windows_sum_to_one_where_tiles_meet():
    tile = 32
    w = embed.window(tile)[0] / embed.window(tile)[0].max()
    stride = tile - embed.OVERLAP
    overlap = w[stride:] + w[: embed.OVERLAP]
    assert torch.allclose(overlap, torch.ones(embed.OVERLAP), atol=1e-6)


def test_blended_tiles_leave_no_seam_where_plain_tiling_does(bundle, key, monkeypatch):
    # Each tile's residual a different constant: plain tiling then steps at every tile border, and
    # the blend must turn every step into a ramp. (A VAE's residual has its own edges inside a tile,
    # which would blur what this test is about: the tiling.)
    levels = torch.linspace(-1, 1, 400)[torch.randperm(400, generator=torch.Generator().manual_seed(0))]

    def constant_tiles(_bundle, tiles, _key):
        return levels[: len(tiles), None, None, None].expand(len(tiles), 3, *tiles.shape[-2:]).clone()

    monkeypatch.setattr(embed, "tile_residuals", constant_tiles)
    work = from_uint8(photo(16 * 8 + 8, 16 * 10 + 8)[None])
    blended = embed.working_residual(bundle, work, key)
    pasted = embed.working_residual(bundle, work, key, blend=False)

    def largest_jump(field: torch.Tensor) -> float:
        across = (field[..., 1:] - field[..., :-1]).abs().max()
        down = (field[..., 1:, :] - field[..., :-1, :]).abs().max()
        return float(max(across, down))

    step = float((levels[:-1] - levels[1:]).abs().max())
    assert largest_jump(pasted) > 0.5 * step  # the test can fail: plain tiling steps at its borders
    # Blended, a step between two tiles is spread over the 8-pixel overlap: at most ~π/16 of it per pixel.
    assert largest_jump(blended) < 0.25 * largest_jump(pasted)


def test_the_output_is_the_original_plus_the_scaled_residual_only(bundle, key):
    pixels = photo(90, 120)
    source = image_io.SourceImage(name="p.png", format="PNG", pixels=pixels)
    marked = embed.mark_image(bundle, source, key, target_psnr=35.0)
    expected = embed.residual_for(bundle, from_uint8(pixels[None]), key)[0].permute(1, 2, 0).numpy()
    wanted = np.clip(pixels + expected * marked.strength * 127.5, 0, 255)
    # Rounding to whole levels is all that separates the two (after clipping to the valid range).
    assert np.abs(marked.image.pixels - wanted).max() <= 0.5 + 1e-4
    assert np.abs(marked.image.pixels.astype(int) - pixels).max() > 0


def test_markers_that_change_nothing_leave_the_photo_untouched(tmp_path, key):
    silent = load_bundle(write_bundle(tmp_path / "silent", init_scale=0.0))
    pixels = photo(80, 100)
    marked = embed.mark_image(silent, image_io.SourceImage(name="p", format="PNG", pixels=pixels), key, target_psnr=40)
    # Not the VAE's reconstruction: the residual of an inactive marker is zero, so is the change.
    assert np.array_equal(marked.image.pixels, pixels)


def test_any_size_is_marked_at_its_own_size_and_read_on_the_same_grid(bundle, key):
    pixels = photo(300, 517)
    marked = embed.mark_image(bundle, image_io.SourceImage(name="p", format="PNG", pixels=pixels), key, target_psnr=30)
    assert marked.image.pixels.shape == (300, 517, 3)
    grid = embed.grid_for(300, 517, 16)
    assert not grid.whole and (grid.height - embed.OVERLAP) % grid.stride == 0
    # A half-size copy maps onto the same working grid (the reader undoes a rescale).
    assert embed.grid_for(150, 258, 16) == grid
    logits = embed.read_logits(bundle.extractor, from_uint8(marked.image.pixels[None]))
    assert logits.shape == (48,) and torch.isfinite(logits).all()


def test_a_small_image_is_read_whole_exactly_as_before(bundle):
    pixels = photo(16, 16)
    whole = bundle.extractor(from_uint8(pixels[None]))[0]
    assert torch.allclose(embed.read_logits(bundle.extractor, from_uint8(pixels[None])), whole)


# -- formats and metadata ---------------------------------------------------------------------------


@pytest.mark.parametrize("orientation", range(1, 9))
def test_display_orientation_matches_pillow_and_inverts(orientation):
    pixels = np.arange(3 * 5 * 3, dtype=np.uint8).reshape(3, 5, 3)
    image = Image.fromarray(pixels)
    image.info["exif"] = exif_with_orientation(orientation)
    image.getexif()[image_io.ORIENTATION_TAG] = orientation
    expected = np.asarray(ImageOps.exif_transpose(image))
    shown = image_io.to_display(pixels, orientation)
    assert np.array_equal(shown, expected)
    assert np.array_equal(image_io.from_display(shown, orientation), pixels)


def _roundtrip(bundle, key, data: bytes, name: str):
    source = image_io.read(data, name=name)
    marked = embed.mark_image(bundle, source, key, target_psnr=36).image
    written = image_io.encode(marked)
    return source, written, image_io.read(written, name=name)


def test_a_16_bit_png_keeps_its_depth_alpha_and_icc_profile(bundle, key):
    import cv2

    rng = np.random.default_rng(1)
    rgb16 = (photo(70, 90).astype(np.uint16) * 257 + rng.integers(0, 257, (70, 90, 3))).astype(np.uint16)
    alpha = rng.integers(0, 65536, (70, 90)).astype(np.uint16)
    _, png = cv2.imencode(".png", np.dstack([rgb16[..., ::-1], alpha]))
    icc = srgb_icc()
    data = image_io._png_with_chunks(png.tobytes(), [(b"iCCP", b"ICC Profile\x00\x00" + zlib.compress(icc))])
    source, written, again = _roundtrip(bundle, key, data, "deep.png")
    assert source.depth == 16 and again.depth == 16 and again.pixels.dtype == np.uint16
    assert np.array_equal(again.alpha, alpha)
    assert again.icc == icc
    assert written[24] == 16  # IHDR bit depth
    # The mark lives below the 8-bit level too: values that are not multiples of 257 survive.
    assert np.any(again.pixels % 257 != 0)
    assert not np.array_equal(again.pixels, rgb16)


def test_a_jpeg_keeps_its_exif_orientation_icc_and_quality_tables(bundle, key):
    buffer = io.BytesIO()
    icc = srgb_icc()
    Image.fromarray(photo(80, 120)).save(buffer, "JPEG", quality=83, exif=exif_with_orientation(6), icc_profile=icc)
    _, written, _ = _roundtrip(bundle, key, buffer.getvalue(), "photo.jpg")
    with Image.open(io.BytesIO(written)) as out, Image.open(io.BytesIO(buffer.getvalue())) as original:
        assert out.format == "JPEG" and out.size == (120, 80)  # stored orientation unchanged
        assert out.getexif()[image_io.ORIENTATION_TAG] == 6
        assert out.info["icc_profile"] == icc
        assert out.quantization == original.quantization


def test_rgba_and_grey_pngs_keep_alpha_and_mode(bundle, key):
    rgba = np.dstack([photo(72, 96), np.random.default_rng(2).integers(0, 256, (72, 96), dtype=np.uint8)])
    buffer = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buffer, "PNG")
    _, written, again = _roundtrip(bundle, key, buffer.getvalue(), "a.png")
    assert Image.open(io.BytesIO(written)).mode == "RGBA"
    assert np.array_equal(again.alpha, rgba[..., 3])
    grey = io.BytesIO()
    Image.fromarray(photo(72, 96)[..., 0], "L").save(grey, "PNG")
    _, written, _ = _roundtrip(bundle, key, grey.getvalue(), "g.png")
    assert Image.open(io.BytesIO(written)).mode == "L"


def test_a_lossless_webp_stays_lossless(bundle, key):
    buffer = io.BytesIO()
    Image.fromarray(photo(72, 96)).save(buffer, "WEBP", lossless=True)
    source, written, again = _roundtrip(bundle, key, buffer.getvalue(), "w.webp")
    assert source.lossless and written[12:16] == b"VP8L"
    assert again.format == "WEBP"


def test_a_bomb_is_refused_before_decoding():
    header = (
        b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)
    )
    with pytest.raises(image_io.BadImage, match=r"bomb|limit"):
        image_io.read(header + b"\0" * 64, name="bomb.png")


# -- the job ---------------------------------------------------------------------------------------


def test_the_embed_job_marks_a_zip_and_measures_each_written_file(tmp_path, embed_bundle_dir):
    key_file = write_key_file(tmp_path / "key.json", id="k1", name="acme", bits=BITS)
    archive = tmp_path / "in"
    archive.mkdir()
    Image.fromarray(photo(300, 517)).save(archive / "big.png")
    Image.fromarray(photo(64, 80, seed=1)).save(archive / "small.jpg", quality=90)
    kind = get_kind("watermark-embed")
    ctx = InMemoryContext(workdir=tmp_path / "work")
    raw = {"key": "k1", "target_psnr": 34}
    metrics = kind.run(kind.spec.clean(raw), {"images": [archive], "model": embed_bundle_dir, "key": key_file}, ctx)
    assert metrics["images"] == 2
    out = tmp_path / "work" / "images"
    assert Image.open(out / "big.png").size == (517, 300)
    assert Image.open(out / "small.jpg").format == "JPEG"
    rows = json.loads((tmp_path / "work" / "report" / "results.json").read_text())["images"]
    assert {r["image"] for r in rows} == {"big.png", "small.jpg"}
    big = next(r for r in rows if r["image"] == "big.png")
    assert 32 < big["psnr"] < 36  # the target, measured on the written PNG (rounding costs a little)
    assert 0 <= big["bits_matched"] <= 48 and big["verdict"] in ("detected", "inconclusive", "not detected")
    assert "decoded_bits" not in big
    (registered,) = ctx.registrations
    assert registered.kind == "images"


def test_the_embed_job_refuses_public_markers_without_the_operators_consent(tmp_path):
    from pathlib import Path

    zoo = Path(__file__).resolve().parents[3] / "mlcore" / "zoo" / "checkpoints" / "molm"
    key_file = write_key_file(tmp_path / "key.json", id="k1", name="acme", bits=BITS, allow_public_weights=False)
    Image.fromarray(photo(80, 80)).save(tmp_path / "a.png")
    kind = get_kind("watermark-embed")
    with pytest.raises(JobError, match="public demo markers"):
        kind.run(
            kind.spec.clean({"key": "k1"}),
            {"images": [tmp_path / "a.png"], "model": zoo, "key": key_file},
            InMemoryContext(workdir=tmp_path / "w"),
        )


def test_a_zip_without_images_is_refused_with_a_sentence(tmp_path, embed_bundle_dir):
    key_file = write_key_file(tmp_path / "key.json", id="k1", name="acme", bits=BITS)
    empty = tmp_path / "unzipped"
    empty.mkdir()
    (empty / "readme.txt").write_text("no images")
    kind = get_kind("watermark-embed")
    with pytest.raises(JobError, match="hold no PNG, JPEG or WebP images"):
        kind.run(
            kind.spec.clean({"key": "k1"}),
            {"images": [empty], "model": embed_bundle_dir, "key": key_file},
            InMemoryContext(workdir=tmp_path / "w"),
        )


# -- honesty: a mark verify cannot read is never claimed ---------------------------------------------


def _scalars(**overrides):
    base = {"images": 4.0, "psnr": 38.2, "min_psnr": 37.9, "ssim": 0.99, "bit_accuracy": 0.53, "detected": 0.0}
    return {**base, "embed_trained": 0.0, **overrides}


def test_the_summary_says_plainly_that_unread_marks_are_not_readable_and_why():
    summarize = get_kind("watermark-embed").spec.summarize
    text = summarize(_scalars())
    assert "NOT readable" in text and "near chance" in text and "treat the files as unmarked" in text
    assert "not on residual-marked photos" in text
    assert not text.startswith("Marked")  # the files are not called marked
    partly = summarize(_scalars(bit_accuracy=0.8, detected=1.0))
    assert partly.startswith("Only 1 of 4 images carry a readable mark") and "near chance" not in partly


def test_the_summary_claims_the_mark_only_when_every_file_reads_and_names_no_untrained_reader_then():
    summarize = get_kind("watermark-embed").spec.summarize
    text = summarize(_scalars(bit_accuracy=0.97, detected=4.0, embed_trained=1.0))
    assert text.startswith("Marked 4 images") and "detected the mark in all 4" in text
    trained_but_unread = summarize(_scalars(embed_trained=1.0))
    assert "NOT readable" in trained_but_unread and "residual-marked" not in trained_but_unread


def test_a_job_whose_marks_do_not_read_reports_them_unreadable_everywhere(tmp_path, key):
    # Silent markers add nothing, so nothing can be read back: every output must say so.
    silent = write_bundle(tmp_path / "silent", init_scale=0.0)
    key_file = write_key_file(tmp_path / "key.json", id="k1", name="acme", bits=BITS)
    Image.fromarray(photo(80, 100)).save(tmp_path / "a.png")
    kind = get_kind("watermark-embed")
    ctx = InMemoryContext(workdir=tmp_path / "work")
    metrics = kind.run(
        kind.spec.clean({"key": "k1"}), {"images": [tmp_path / "a.png"], "model": silent, "key": key_file}, ctx
    )
    assert metrics["detected"] == 0 and metrics["embed_trained"] == 0
    assert "NOT readable" in kind.spec.summarize(metrics)
    report = json.loads((tmp_path / "work" / "report" / "results.json").read_text())
    assert report["readable"] == "unreadable" and report["images"][0]["readable"] is False
    assert "carry no mark verify can read" in report["note"] and "residual-marked photos" in report["note"]
    (registered,) = ctx.registrations
    assert "not readable" in registered.card["name"]
    assert any(line.startswith("WARNING: The mark in this image is NOT readable") for line in ctx.lines)
    assert "1 image," in registered.card["name"]
