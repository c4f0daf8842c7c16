"""Built-in samples of the data users bring, behind the text and image kinds' "Try with a sample".

Each is saved the ways users' own files arrive, so a sample run goes through the user-data path
(:mod:`mlcore.data.textset`, :mod:`mlcore.watermark.training_images`) rather than a built-in
shortcut, as ``labelled-rooms`` (:mod:`mlcore.pointcloud.user_samples`) and ``moving-shapes``
(:mod:`mlcore.video.user_samples`) do for scans and clips. Only what Python and the installed
packages ship is used: nothing is downloaded.

``sample-notes`` (kind ``text``), English technical prose in two exports:

- ``help-topics.jsonl``: JSON Lines as a Windows tool writes them, a UTF-8 byte-order mark and CRLF
  line ends, one record per help topic of ``pydoc_data.topics`` with ``id``, ``topic`` and ``text``
  fields (the extra fields are ignored; without a ``name`` field documents are named by line);
- ``module-docs.csv``: a spreadsheet export (CRLF rows, quoted cells) with ``module``, ``text`` and
  ``characters`` columns, one row per standard-library module docstring; texts hold commas and
  line breaks inside their quotes.

About 580,000 characters in all: the test split (1 block in 20) still gives ``routing-analysis``'s
sample its 32 windows of 128 tokens.

``sample-photos`` (kind ``images``): eight scikit-image sample photos (public domain or CC0, by
scikit-image's notes) as they come off phones, cameras, scanners and the web, with sides of 300
to 1,000 pixels: JPEG (one stored sideways with an EXIF orientation tag, as a phone saves a
portrait, and one greyscale scan), PNG (RGBA as screenshot tools save it, and greyscale) and WebP
(lossy and lossless).
"""

from __future__ import annotations

import ast
import csv
import io
import json
import shutil
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

from mlcore.data.images import skimage_dir

if TYPE_CHECKING:
    from PIL import Image

#: EXIF tag 274 (Orientation); 6 means "rotate 90° clockwise to show", a phone's portrait shot.
EXIF_ORIENTATION = 0x0112
ROTATE_CLOCKWISE = 6


def help_topics() -> list[tuple[str, str]]:
    """(topic, text) of each help topic that ships with CPython, in a fixed order."""
    from pydoc_data.topics import topics

    return [(name, topics[name].strip()) for name in sorted(topics) if topics[name].strip()]


def module_docstrings() -> list[tuple[str, str]]:
    """(module, docstring) of the standard library's top-level modules that have one, by name."""
    folder = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        if docstring := (ast.get_docstring(tree) or "").strip():
            found.append((path.stem, docstring))
    return found


def write_jsonl_windows(path: Path, records: list[dict[str, object]]) -> Path:
    """JSON Lines with a byte-order mark and CRLF line ends, as Windows editors and exporters write them."""
    body = "".join(json.dumps(record, ensure_ascii=False) + "\r\n" for record in records)
    path.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    return path


def write_spreadsheet_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    """CSV as spreadsheets export it: CRLF rows, cells quoted where they hold commas, quotes or line breaks."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    path.write_bytes(buffer.getvalue().encode("utf-8"))
    return path


def build_sample_notes(target: Path) -> None:
    """The ``sample-notes`` text item: help topics as JSONL, module docstrings as CSV (about 580 kB)."""
    target.mkdir(parents=True, exist_ok=True)
    records = [{"id": i, "topic": name, "text": text} for i, (name, text) in enumerate(help_topics(), 1)]
    write_jsonl_windows(target / "help-topics.jsonl", records)
    rows = [[module, text, len(text)] for module, text in module_docstrings()]
    write_spreadsheet_csv(target / "module-docs.csv", ["module", "text", "characters"], rows)


def _skimage_photo(name: str) -> Image.Image:
    """A scikit-image sample photo as a Pillow image (read from the installed package, no download)."""
    from PIL import Image

    with Image.open(skimage_dir() / name) as image:
        image.load()
        return image.copy()


def build_sample_photos(target: Path) -> None:
    """The ``sample-photos`` images item: eight photos in the formats, sizes and modes users bring."""
    from PIL import Image

    target.mkdir(parents=True, exist_ok=True)
    folder = skimage_dir()
    # Camera JPEGs, byte for byte as they ship (a 640×427 and a 1000×872 photo).
    shutil.copyfile(folder / "rocket.jpg", target / "rocket.jpg")
    shutil.copyfile(folder / "hubble_deep_field.jpg", target / "hubble-deep-field.jpg")
    # A phone's portrait: pixels stored sideways, the EXIF tag says how to turn them to show upright.
    cat = _skimage_photo("chelsea.png").convert("RGB")
    exif = Image.Exif()
    exif[EXIF_ORIENTATION] = ROTATE_CLOCKWISE
    cat.transpose(Image.Transpose.ROTATE_90).save(target / "IMG_0042.jpg", quality=88, exif=exif)
    # A scanner's greyscale JPEG.
    _skimage_photo("coins.png").save(target / "coins-scan.jpg", quality=90)
    # PNG: colour with an (opaque) alpha channel, as screenshot tools save it, and greyscale.
    astronaut = _skimage_photo("astronaut.png").resize((384, 384), Image.Resampling.LANCZOS)
    astronaut.convert("RGBA").save(target / "astronaut.png")
    _skimage_photo("camera.png").save(target / "camera-greyscale.png")
    # WebP from the web: lossy at its size, and lossless scaled down.
    _skimage_photo("coffee.png").save(target / "coffee.webp", quality=80)
    retina = _skimage_photo("retina.jpg").resize((420, 420), Image.Resampling.LANCZOS)
    retina.save(target / "retina.webp", lossless=True)
