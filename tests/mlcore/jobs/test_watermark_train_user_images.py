"""watermark-train on the user's own images: a zip through the real upload checks, crops that come
from those images, provenance and card that list them, and refusals for inputs that would be ignored."""

import io
import json
import zipfile

import numpy as np
import pytest
from PIL import Image

from mlcore.jobs import InMemoryContext, JobError, ValidationError, provenance, runner
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.watermark.training_images import CropSource, UserImage, random_crops
from tests.mlcore.watermark.tiny import write_bundle

TRAIN = {"adapters": "16", "rank": 2, "steps": 2, "batch_size": 2, "seed": 0}
#: (name, format, width, height): six usable images of different sizes and formats, and one too small.
IMAGES = [
    ("photos/a.png", "PNG", 40, 30),
    ("photos/b.jpg", "JPEG", 64, 48),
    ("photos/c.webp", "WEBP", 33, 70),
    ("d.png", "PNG", 16, 16),
    ("e.jpeg", "JPEG", 120, 90),
    ("f.webp", "WEBP", 50, 50),
    ("tiny.png", "PNG", 10, 12),
]


def _image_bytes(fmt: str, width: int, height: int, seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory):
    return write_bundle(tmp_path_factory.mktemp("bundle"))


@pytest.fixture(scope="module")
def images_zip(tmp_path_factory):
    path = tmp_path_factory.mktemp("upload") / "mine.zip"
    with zipfile.ZipFile(path, "w") as archive:
        for seed, (name, fmt, width, height) in enumerate(IMAGES):
            archive.writestr(name, _image_bytes(fmt, width, height, seed))
    return path


def _prepare(raw: dict, files: dict, bundle_dir, workdir):
    kind = get_kind("watermark-train")
    return runner.prepare(kind, {**raw, "generator": str(bundle_dir)}, files, resolver=LocalResolver(), workdir=workdir)


def test_it_trains_on_the_crops_of_a_zip_of_the_users_images_only(tmp_path, bundle_dir, images_zip):
    params, inputs = _prepare({**TRAIN, "image_source": "mine"}, {"images": [images_zip]}, bundle_dir, tmp_path)
    record = provenance.collect(seed=params["seed"], device="cpu", inputs=inputs)
    assert set(record["input_sha256"]) == {"generator", "images"}  # the user's images, no built-in crops
    ctx = InMemoryContext(workdir=tmp_path / "run")
    metrics = get_kind("watermark-train").run(params, inputs, ctx)

    assert metrics["user_images"] == 6
    assert metrics["user_train_crops"] == 256 and metrics["user_test_crops"] == 128
    assert metrics["builtin_train_crops"] == metrics["builtin_test_crops"] == 0
    log = "\n".join(ctx.lines)
    assert "Read 6 of your images for training (mine: only yours)" in log
    assert "tiny.png (10×12)" in log  # too small for a 16-pixel crop: named, not dropped silently
    assert "256 training crops of your 6 images" in log
    card = json.loads((ctx.registrations[0].path / "card.json").read_text())
    listed = card["training_images"]
    assert listed["source"] == "mine" and listed["crops"] == {
        "builtin_test_crops": 0,
        "builtin_train_crops": 0,
        "user_test_crops": 128,
        "user_train_crops": 256,
    }
    assert sorted(im["name"] for im in listed["images"]) == sorted(name for name, *_ in IMAGES[:-1])
    assert ctx.registrations[0].card["training_images"] == listed


def test_both_takes_half_of_the_crops_from_the_users_images(tmp_path, bundle_dir, images_zip):
    params, inputs = _prepare({**TRAIN, "image_source": "both"}, {"images": [images_zip]}, bundle_dir, tmp_path)
    metrics = get_kind("watermark-train").run(params, inputs, InMemoryContext(workdir=tmp_path / "run"))
    assert metrics["user_train_crops"] == metrics["builtin_train_crops"] == 128
    assert metrics["user_test_crops"] == metrics["builtin_test_crops"] == 64


def test_the_crops_are_cut_from_the_users_images_with_a_fixed_seed():
    colours = [(255, 0, 0), (0, 0, 255), (0, 255, 0)]
    solid = [np.full((20 + 7 * i, 40 - 5 * i, 3), c, np.uint8) for i, c in enumerate(colours)]
    crops = random_crops(solid, 30, 16, seed=3)
    assert crops.shape == (30, 16, 16, 3)
    found = {tuple(int(v) for v in crop.reshape(-1, 3)[0]) for crop in crops}
    assert found == set(colours)  # every crop is one of the user's images, and each image is used
    assert all((crop == crop.reshape(-1, 3)[0]).all() for crop in crops)
    assert np.array_equal(crops, random_crops(solid, 30, 16, seed=3))
    assert not np.array_equal(crops, random_crops(solid, 30, 16, seed=4))


def test_eight_or_more_images_hold_every_eighth_out_of_training():
    images = [
        UserImage(name=f"{i}.png", sha256=f"{i:02d}", pixels=np.full((16, 16, 3), i, np.uint8)) for i in range(16)
    ]
    source = CropSource(images=images, builtin=False)
    assert source.holds_out_images and [im.name for im in source.held_out] == ["7.png", "15.png"]
    held = source(20, 16, seed=0, split="test")
    assert set(np.unique(held)) == {7, 15}
    assert not {7, 15} & set(np.unique(source(50, 16, seed=0, split="train")).tolist())


def test_it_refuses_images_when_the_source_is_builtin(tmp_path, bundle_dir, images_zip):
    with pytest.raises(ValidationError, match="Image source is builtin, so these images would not be used"):
        _prepare(TRAIN, {"images": [images_zip]}, bundle_dir, tmp_path)
    with pytest.raises(JobError, match="Image source is builtin"):
        get_kind("watermark-train").run(
            get_kind("watermark-train").spec.clean(TRAIN),
            {"generator": bundle_dir, "image_set": tmp_path},
            InMemoryContext(workdir=tmp_path / "run"),
        )


@pytest.mark.parametrize("source", ["mine", "both"])
def test_it_refuses_mine_or_both_without_images(tmp_path, bundle_dir, source):
    with pytest.raises(ValidationError, match=f"Image source is {source}: upload images"):
        _prepare({**TRAIN, "image_source": source}, {}, bundle_dir, tmp_path)
    with pytest.raises(JobError, match=f"Image source is {source}: upload images"):
        spec = get_kind("watermark-train")
        spec.run(
            spec.spec.clean({**TRAIN, "image_source": source}),
            {"generator": bundle_dir},
            InMemoryContext(workdir=tmp_path / "run"),
        )


def test_it_refuses_an_upload_and_an_image_set_together(tmp_path, bundle_dir, images_zip):
    with pytest.raises(ValidationError, match="Upload images or pick an image set, not both"):
        _prepare(
            {**TRAIN, "image_source": "mine", "image_set": str(tmp_path)},
            {"images": [images_zip]},
            bundle_dir,
            tmp_path,
        )


def test_it_refuses_a_corrupt_image_by_name_and_images_all_too_small(tmp_path, bundle_dir):
    kind = get_kind("watermark-train")
    params = kind.spec.clean({**TRAIN, "image_source": "mine"})
    folder = tmp_path / "set"
    folder.mkdir()
    (folder / "ok.png").write_bytes(_image_bytes("PNG", 32, 32, 0))
    (folder / "cut.png").write_bytes(_image_bytes("PNG", 32, 32, 1)[:60])
    with pytest.raises(JobError, match=r"Images: cut\.png: truncated or corrupt image"):
        kind.run(params, {"generator": bundle_dir, "image_set": folder}, InMemoryContext(workdir=tmp_path / "a"))
    (folder / "cut.png").unlink()
    (folder / "ok.png").write_bytes(_image_bytes("PNG", 8, 8, 0))
    with pytest.raises(JobError, match=r"none of them is at least 16×16 pixels"):
        kind.run(params, {"generator": bundle_dir, "image_set": folder}, InMemoryContext(workdir=tmp_path / "b"))


def test_the_guide_says_what_a_user_can_bring():
    guide = get_kind("watermark-train").spec.guide
    for needed in ("What you can bring", "PNG, JPEG or WebP", "zip", "image set", "`mine`", "`both`"):
        assert needed in guide
