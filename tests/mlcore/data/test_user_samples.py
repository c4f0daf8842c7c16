"""The built-in samples of users' own text and photos: saved in the formats users bring, accepted by
their item kind's check, and read back as the jobs read them."""

import csv
import io
import json

import pytest
from PIL import Image

from mlcore.catalog import materialize
from mlcore.data.registry import DATASETS
from mlcore.data.textset import load_text_dataset
from mlcore.data.user_samples import (
    EXIF_ORIENTATION,
    ROTATE_CLOCKWISE,
    build_sample_notes,
    build_sample_photos,
    help_topics,
    module_docstrings,
)
from mlcore.items.checks import card_for
from mlcore.watermark.verification import open_image

ITEMS = {item.name: item for item in DATASETS}


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sample-notes")
    build_sample_notes(folder)
    return folder


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sample-photos")
    build_sample_photos(folder)
    return folder


def test_sample_notes_is_a_text_item_that_passes_the_text_check(notes):
    assert ITEMS["sample-notes"].kind == "text"
    card = card_for("text", "dataset", notes)
    assert card["sources"] == ["help-topics.jsonl", "module-docs.csv"] and card["records"] > 0


def test_sample_notes_jsonl_has_a_byte_order_mark_and_windows_line_ends(notes):
    raw = (notes / "help-topics.jsonl").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf{") and raw.endswith(b"\r\n")
    assert raw.count(b"\r\n") == raw.count(b"\n") == len(help_topics())
    first = json.loads(raw[3:].split(b"\r\n", 1)[0])
    assert set(first) == {"id", "topic", "text"}


def test_sample_notes_csv_quotes_texts_that_hold_commas_and_line_breaks(notes):
    raw = (notes / "module-docs.csv").read_bytes().decode()
    assert raw.startswith("module,text,characters\r\n")
    rows = list(csv.reader(io.StringIO(raw, newline="")))[1:]
    assert [(module, text) for module, text, _ in rows] == module_docstrings()
    assert sum("," in text for _, text, _ in rows) > 50 and any("\n" in text for _, text, _ in rows)


def test_sample_notes_read_as_every_help_topic_and_every_docstring_row(notes):
    data = load_text_dataset(notes, name="sample-notes")
    assert data.files == {"help-topics.jsonl": len(help_topics()), "module-docs.csv": len(module_docstrings())}
    texts = [text for _, text in data.documents]
    assert texts == [text for _, text in help_topics()] + [text for _, text in module_docstrings()]
    # Enough for routing-analysis's sample: its 32 windows of 128 tokens (about 3 characters each) come
    # from the test split alone.
    assert sum(len(block) for block in data.split("test")) > 32 * 128 * 4


def test_the_registry_builds_sample_notes_with_its_builder(tmp_path):
    folder = materialize(ITEMS["sample-notes"], tmp_path)
    data = load_text_dataset(folder)  # the cache's .complete marker is not read as text
    assert set(data.files) == {"help-topics.jsonl", "module-docs.csv"}


def test_sample_photos_is_an_images_item_that_passes_the_images_check(photos):
    assert ITEMS["sample-photos"].kind == "images"
    card = card_for("images", "dataset", photos)
    assert card["records"] == 8


def test_sample_photos_come_in_the_formats_modes_and_sizes_users_bring(photos):
    found = {}
    for path in sorted(photos.iterdir()):
        with Image.open(path) as image:
            found[path.name] = (image.format, image.mode, image.size)
    assert {fmt for fmt, _, _ in found.values()} == {"JPEG", "PNG", "WEBP"}
    assert {"RGB", "RGBA", "L"} <= {mode for _, mode, _ in found.values()}
    assert len({size for _, _, size in found.values()}) >= 7


def test_the_phone_portrait_is_stored_sideways_and_shown_upright(photos):
    with Image.open(photos / "IMG_0042.jpg") as image:
        assert image.getexif()[EXIF_ORIENTATION] == ROTATE_CLOCKWISE
        assert image.size == (300, 451)
    assert open_image(photos / "IMG_0042.jpg").size == (451, 300)  # as the jobs read it: upright
