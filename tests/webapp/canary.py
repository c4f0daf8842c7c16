"""The canary: a watermark key registered in one team, whose every trace is looked for in what the
members of another team can see (``docs/security.md``).

Three parts, usable apart:

- :func:`bit_needles` and :func:`key_needles`: the ways a key could leak — its bits as a 0/1 string,
  hex, base64 of the packed bytes, a Python/JSON list of ints, floats or bools, raw bytes, the
  sha256 of the bit string; its opaque id, primary key, reference and name — and :func:`find`, the
  one matcher (``tests/webapp/test_canary_leak.py`` shows it finds each encoding);
- :func:`expand` and :func:`files_under`: every byte of a file, zips and tars unpacked;
- :data:`SMALLEST` and :func:`smallest_submission`: each job kind at its smallest settings, and
  :func:`job_outputs`: everything of a finished job that a viewer can read, through the models and
  through the web pages and the JSON API as that viewer.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import struct
import tarfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.db.models import Model
from django.forms.models import model_to_dict
from django.test import Client

from mlcore.jobs.params import Key
from mlcore.jobs.registry import Kind

#: A name no output could contain by chance.
CANARY_NAME = "canary-kestrel-5b1e9d"
#: The canary's primary key: long and odd enough that finding its digits means finding the key
#: (a small pk such as 3 would be in every output). Not a plausible Unix time in s or ms either.
CANARY_PK = 7_340_591_862_713
#: Larger files are read only up to this many bytes (no job output in the test comes near it).
MAX_BYTES = 256 * 2**20


# -- needles -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Needle:
    """One encoding of a secret. ``fold_case``: compared case-insensitively (hex, true/false);
    ``squeeze``: compared against the haystack with all whitespace removed (lists, however spaced)."""

    what: str
    data: bytes
    fold_case: bool = False
    squeeze: bool = False


def _packed(bits: str) -> bytes:
    """The bits packed most-significant first, as ``numpy.packbits`` and ``int(bits, 2)`` order them."""
    padded = bits + "0" * (-len(bits) % 8)
    return bytes(int(padded[i : i + 8], 2) for i in range(0, len(padded), 8))


def bit_needles(bits: str) -> list[Needle]:
    """Every encoding of a key's bits that the leak test looks for."""
    if not bits or set(bits) - {"0", "1"}:
        raise ValueError("bits must be a non-empty string of 0 and 1")
    packed = _packed(bits)
    values = [int(b) for b in bits]
    b64 = base64.b64encode(packed)
    urlsafe = base64.urlsafe_b64encode(packed)
    # Text encodings are compared with whitespace removed (``squeeze``), which also finds them
    # spaced out ("[1, 0, 1]", numpy's "[1 0 1]", "ab cd ef") or wrapped over lines.
    needles = [
        Needle("bits as a 0/1 string", bits.encode(), squeeze=True),
        Needle("bits as hex", packed.hex().encode(), fold_case=True, squeeze=True),
        Needle("bits as base64", b64.rstrip(b"="), squeeze=True),
        Needle("bits as URL-safe base64", urlsafe.rstrip(b"="), squeeze=True),
        Needle("bits as a list of ints", ",".join(str(v) for v in values).encode(), squeeze=True),
        Needle("bits as a list of floats", ",".join(f"{v:.1f}" for v in values).encode(), squeeze=True),
        Needle("bits as a printed float tensor", ",".join(f"{v}." for v in values).encode(), squeeze=True),
        Needle(
            "bits as a list of bools",
            ",".join(str(bool(v)) for v in values).encode(),
            fold_case=True,
            squeeze=True,
        ),
        Needle(
            "sha256 of the bit string",
            hashlib.sha256(bits.encode()).hexdigest().encode(),
            fold_case=True,
            squeeze=True,
        ),
        Needle("sha256 of the packed bits", hashlib.sha256(packed).hexdigest().encode(), fold_case=True, squeeze=True),
        # Binary, compared byte for byte: a tensor or array of the bits in a checkpoint, .npy or pickle.
        Needle("bits as raw packed bytes", packed),
        Needle("bits as a uint8 array", bytes(values)),
        Needle("bits as a float32 array", struct.pack(f"<{len(values)}f", *values)),
        Needle("bits as an int64 array", struct.pack(f"<{len(values)}q", *values)),
    ]
    # As one number: only when it is long enough not to turn up by chance.
    as_hex = format(int(bits, 2), "x")
    if len(as_hex) >= 10:
        needles.append(Needle("bits as an integer in hex", as_hex.encode(), fold_case=True, squeeze=True))
    if len(str(int(bits, 2))) >= 10:
        needles.append(Needle("bits as a decimal integer", str(int(bits, 2)).encode(), squeeze=True))
    return needles


def key_needles(key: Model, bits: str) -> list[Needle]:
    """The key's bits (:func:`bit_needles`), name, primary key, reference and every opaque id it has.

    The opaque ids are found generically (every text field but the name that holds a value of 8
    characters or more, e.g. ``public_id``), so a renamed or added id field is still looked for.
    """
    needles = bit_needles(bits)
    needles.append(Needle("the key's name", key.name.encode(), fold_case=True))
    # A short primary key (3) is in every output; the canary's is made long (CANARY_PK).
    if len(str(key.pk)) >= 10:
        needles.append(Needle("the key's primary key", str(key.pk).encode()))
    reference = str(getattr(key, "reference", ""))
    if len(reference.partition(":")[2]) >= 8:
        needles.append(Needle("the key's reference", reference.encode()))
    for field in key._meta.concrete_fields:
        value = getattr(key, field.attname)
        if field.name != "name" and isinstance(value, str) and len(value) >= 8:
            needles.append(Needle(f"the key's {field.name}", value.encode()))
    return needles


def _squeezed(data: bytes) -> bytes:
    return b"".join(data.split())


def find(haystack: bytes | str, needles: Iterable[Needle]) -> list[str]:
    """What of ``needles`` occurs in ``haystack`` (by :attr:`Needle.what`, in the needles' order)."""
    data = haystack.encode() if isinstance(haystack, str) else haystack
    forms: dict[tuple[bool, bool], bytes] = {}

    def form(fold: bool, squeeze: bool) -> bytes:
        if (fold, squeeze) not in forms:
            text = _squeezed(data) if squeeze else data
            forms[(fold, squeeze)] = text.lower() if fold else text
        return forms[(fold, squeeze)]

    found = []
    for needle in needles:
        pattern = needle.data.lower() if needle.fold_case else needle.data
        if pattern in form(needle.fold_case, needle.squeeze):
            found.append(needle.what)
    return found


# -- haystacks ---------------------------------------------------------------------------------


def expand(where: str, data: bytes, *, depth: int = 0) -> Iterator[tuple[str, bytes]]:
    """``data`` itself and, for a zip or a tar, every member (recursively, a few levels deep)."""
    yield where, data
    if depth >= 3:
        return
    buffer = io.BytesIO(data)
    if zipfile.is_zipfile(buffer):
        try:
            with zipfile.ZipFile(buffer) as archive:
                for info in archive.infolist():
                    if not info.is_dir():
                        yield from expand(f"{where}!{info.filename}", archive.read(info)[:MAX_BYTES], depth=depth + 1)
        except (zipfile.BadZipFile, OSError, NotImplementedError):
            pass  # not really a zip (is_zipfile looks at the end of the data only)
        return
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive.getmembers():
                extracted = archive.extractfile(member) if member.isfile() else None
                if extracted is not None:
                    yield from expand(f"{where}!{member.name}", extracted.read(MAX_BYTES), depth=depth + 1)
    except (tarfile.TarError, OSError, EOFError):
        pass


def files_under(root: Path, *, newer_than: float | None = None) -> Iterator[tuple[str, bytes]]:
    """Every regular file under ``root`` (archives expanded), optionally only those modified after
    ``newer_than`` (a Unix time): a shared temporary folder holds much that is not ours."""
    for folder, _, names in os.walk(root, onerror=lambda _: None):
        for name in names:
            path = Path(folder) / name
            try:
                if path.is_symlink() or not path.is_file():
                    continue
                if newer_than is not None and path.stat().st_mtime < newer_than:
                    continue
                with path.open("rb") as f:
                    data = f.read(MAX_BYTES)
            except OSError:
                continue  # vanished meanwhile, or not ours to read
            yield from expand(str(path), data)


def on_disk(roots: Iterable[Path], needles: list[Needle], *, newer_than: float) -> list[str]:
    """:func:`leaks` over every file under ``roots`` written since ``newer_than`` (a Unix time)."""
    found: list[str] = []
    for root in dict.fromkeys(Path(r) for r in roots):
        if root.is_dir():
            found += leaks(files_under(root, newer_than=newer_than), needles)
    return found


def leaks(haystacks: Iterable[tuple[str, bytes | str]], needles: list[Needle]) -> list[str]:
    """One line per haystack that holds a needle: where, and which encodings."""
    return [f"{where}: {', '.join(found)}" for where, data in haystacks if (found := find(data, needles))]


# -- jobs at their smallest ---------------------------------------------------------------------

#: Per kind, what to change in its ``spec.sample`` to run it in seconds on a CPU (``None`` drops a
#: sample value, so the parameter's default applies). A kind missing here runs its sample unchanged,
#: so a new kind is covered at once (if more slowly) until someone adds its line.
SMALLEST: dict[str, dict[str, Any]] = {
    "compress-moe": {"samples": 2, "seq_len": 16, "eval_windows": 8, "cloze_items": 0, "methods": ["frequency"]},
    "moe-profile": {"hidden": 8, "intermediate": 8, "experts": 2, "top_k": 1, "tokens": 16, "repeats": 1},
    "routing-analysis": {"samples": 2, "seq_len": 8, "resamples": 0, "windows": [4], "multiples": [1]},
    "moe-planner": {"resamples": 0},
    "distill": {
        "steps": 1,
        "train_windows": 1,
        "eval_windows": 1,
        "eval_every": 0,
        "seq_len": 8,
        "batch_size": 1,
        "student_hidden": 8,
        "student_layers": 1,
        "student_intermediate": 8,
        "student_heads": 1,
    },
    "data-mixture": {"steps": 1, "confirm_steps": 0, "interval": 1, "context": 2, "width": 8, "batch_per_source": 1},
    "lora-moe-finetune": {
        "steps": 1,
        "batch_size": 4,
        "train_examples": 16,
        "eval_examples": 16,
        "experts": 2,
        "rank": 1,
        "sparsity_k": 1,
    },
    "router-align": {"pretrain_steps": 10, "train_examples": 32, "test_examples": 32, "epochs": 1, "oracle_steps": 1},
    "graph-ood": {"graphs": 60, "epochs": 1, "hidden": 8, "batch_size": 4, "methods": ["erm"], "layers": 1},
    # The attack path: random images (uploaded, see UPLOADS) against every registered
    # key, not the sample's demo image set and demo keyring.
    "watermark-verify": {"image_set": None, "keyring": None},
    # 8 adapters is the fewest that give the extractor's 48 bits; 1 step of 2 images.
    "watermark-train": {"steps": 1, "batch_size": 2, "rank": 1},
    "watermark-generate": {"count": 1, "steps": 1},
    # The user's own images (uploaded, see UPLOADS): one read whole, one on the tiled working grid.
    "watermark-embed": {"image_set": None},
    # 1,000 clean images is the kind's own floor (the 0.1 % FPR threshold needs them).
    "watermark-robustness": {
        "images": 8,
        "clean_images": 1000,
        "keys": 1,
        "attacks": ["jpeg-50"],
        "averaging": 0,
        "query_budget": 0,
        "baseline": False,
    },
    # One tile over the whole sample room is faster than many small ones.
    "pointcloud-segment": {"preview_points": 1000},
    "pointcloud-train": {
        "steps": 1,
        "scenes": 1,
        "eval_every": 0,
        "eval_scenes": 1,
        "batch_size": 1,
        "points": 256,
        "experts": 2,
        "top_k": 1,
        "datasets": ["A"],
    },
    "video-generate": {"clips": 1, "steps": 1, "frames": 1, "resolution": 8},
    "video-train": {
        "steps": 1,
        "batch_size": 1,
        "sample_every": 0,
        "dim": 16,
        "depth": 1,
        "heads": 1,
        "frames": 1,
        "resolution": 8,
        "experts": 2,
        "groups": 1,
    },
    # The test-only kind stays in: it is cheap and writes through every ctx channel (a log, metrics,
    # a chart, artifacts), so a leak in the platform's own plumbing would show there first.
    "test-exercise": {"steps": 2},
}

#: Random images for the verify job: with two keys registered, each image's best match is the
#: canary about half the time, so the old output format names it in some row with probability
#: 1 − 2⁻²⁴; a regression cannot hide behind luck.
VERIFY_IMAGES = 24


def random_png(seed: int, size: int = 64) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def images_zip(count: int, *, extra: Mapping[str, bytes] | None = None) -> bytes:
    """A zip of ``count`` random PNGs (and ``extra`` members, e.g. a corrupt image)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for i in range(count):
            archive.writestr(f"random-{i:03d}.png", random_png(i))
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return buffer.getvalue()


#: Per kind, the files to upload with it (fresh objects each time: an upload is read once).
UPLOADS: dict[str, Callable[[], dict[str, list[SimpleUploadedFile]]]] = {
    "watermark-embed": lambda: {
        "images": [
            SimpleUploadedFile("small.png", random_png(1, 32), content_type="image/png"),
            SimpleUploadedFile("large.png", random_png(2, 96), content_type="image/png"),
        ]
    },
    "watermark-verify": lambda: {
        "images": [SimpleUploadedFile("random.zip", images_zip(VERIFY_IMAGES), content_type="application/zip")]
    },
}


def smallest_submission(kind: Kind, *, own_key: str) -> tuple[dict[str, Any], dict[str, list[SimpleUploadedFile]]]:
    """The raw parameters and uploads that run ``kind`` at its smallest; every ``key`` parameter
    names ``own_key`` (a key of the submitting team: ``watermark-generate`` marks with it)."""
    params: dict[str, Any] = {**dict(kind.spec.sample), **SMALLEST.get(kind.name, {})}
    params = {name: value for name, value in params.items() if value is not None}
    for param in kind.spec.params:
        if isinstance(param, Key):
            params[param.name] = own_key
    files = UPLOADS[kind.name]() if kind.name in UPLOADS else {}
    return params, files


def set_next_pk(model: type[Model], value: int) -> None:
    """Make the next row of ``model`` get primary key ``value`` (PostgreSQL and SQLite)."""
    table, column = model._meta.db_table, model._meta.pk.column
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT setval(pg_get_serial_sequence(%s, %s), %s, false)", [table, column, value])
        elif connection.vendor == "sqlite":
            cursor.execute("DELETE FROM sqlite_sequence WHERE name = %s", [table])
            cursor.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (%s, %s)", [table, value - 1])
        else:
            raise NotImplementedError(f"set_next_pk: no recipe for {connection.vendor}")


# -- what a viewer can read of a job -------------------------------------------------------------


def _json(value: Any) -> bytes:
    return json.dumps(value, default=str, ensure_ascii=False).encode()


def _body(response: Any, what: str) -> bytes:
    """The response's bytes; anything but a 200 would mean the scan read an error page instead."""
    assert response.status_code == 200, f"{what} answered {response.status_code}"
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return bytes(response.content)


def job_outputs(job: Any, *, web: Client, api: Client, api_headers: Mapping[str, str]) -> Iterator[tuple[str, bytes]]:
    """Everything of a finished ``job`` that its team can read: the stored row (metrics, charts,
    log tail, stage, summary line, error, provenance: every field), the full log, every artifact
    (zips unpacked), the library items it registered, and what ``web`` (a signed-in browser) and
    ``api`` (with ``api_headers``) get from its page, fragments, charts, artifacts and API routes.

    ``job.traceback`` is staff-only, but is scanned too: a key in it would be one admin view away.
    """
    from mlcore.jobs.registry import get_kind
    from webapp.jobs.storage import read_log
    from webapp.library.models import LibraryItem

    job.refresh_from_db()
    label = f"{job.kind} ({job.pk})"
    row = model_to_dict(job)
    row.update(id=job.pk, kind=job.kind, status=job.status)
    yield f"{label}: the job row", _json(row)
    yield f"{label}: the summary line", get_kind(job.kind).spec.summary_line(job.metrics.get("scalars", {})).encode()
    yield f"{label}: the full log", read_log(job).encode()
    for artifact in job.artifacts.all():
        with artifact.file.open("rb") as f:
            yield from expand(f"{label}: artifact {artifact.name}", f.read(MAX_BYTES))
    for item in LibraryItem.objects.filter(produced_by=job):
        yield f"{label}: library item {item.pk}", _json(model_to_dict(item, exclude=["file"]))
        if item.file:
            with item.file.open("rb") as f:
                yield from expand(f"{label}: library item {item.pk} file", f.read(MAX_BYTES))

    pages = [f"/jobs/{job.pk}/", f"/jobs/{job.pk}/live/", f"/jobs/{job.pk}/results/", f"/jobs/{job.pk}/log.txt"]
    # Chart PNGs are left out: they render the very spec fetched here, and pixels hold no text.
    for name in job.charts or {}:
        pages += [f"/jobs/{job.pk}/charts/{name}.vl.json", f"/jobs/{job.pk}/charts/{name}.json"]
    pages += [f"/jobs/{job.pk}/artifacts/{artifact.name}" for artifact in job.artifacts.all()]
    for page in pages:
        yield from expand(f"{label}: GET {page}", _body(web.get(page), f"GET {page}"))
    api_pages = [f"/api/v1/jobs/{job.pk}", f"/api/v1/jobs/{job.pk}/artifacts"]
    api_pages += [f"/api/v1/jobs/{job.pk}/artifacts/{artifact.name}" for artifact in job.artifacts.all()]
    for page in api_pages:
        yield from expand(f"{label}: API GET {page}", _body(api.get(page, **api_headers), f"API GET {page}"))


def team_pages(
    team_slug: str, *, web: Client, api: Client, api_headers: Mapping[str, str]
) -> Iterator[tuple[str, bytes]]:
    """The team-wide pages that list its jobs, keys and library items, on the web and in the API."""
    # The comparison page is left out: it takes jobs of one kind only, and shows the metrics and
    # series that job_outputs reads from each job row.
    for page in (f"/t/{team_slug}/", f"/t/{team_slug}/jobs/", f"/t/{team_slug}/library/", f"/t/{team_slug}/keys/"):
        yield f"GET {page}", _body(web.get(page), f"GET {page}")
    for page in (f"/api/v1/jobs?team={team_slug}", "/api/v1/teams"):
        yield f"API GET {page}", _body(api.get(page, **api_headers), f"API GET {page}")
