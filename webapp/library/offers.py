"""What a job's page offers to add to the team library, file by file.

An output the job already put in the library (``ctx.register``, or an earlier "Add to library")
shows as "in the library" with a link, never as something to add again. Any other output is
offered with the kinds its content can be, as :func:`mlcore.sniff.sniff` names the format (never
the file name or the media type the job declared): a video, a chart's JSON or an unknown binary
is offered as nothing. The likeliest kind is preselected only when the content says which: a PNG
is ``images``, a zipped folder whose config.json names a Mixtral is ``hf-moe-lm``, a zip of PLY
scans is ``pointclouds``. When it does not (a JSON report, a folder of MoE Lab's own weights that
several model kinds write alike), nothing is preselected and the person chooses. The worker's
check still decides; a guess only spares a click.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from django.db.models.fields.files import FieldFile

from mlcore import sniff
from mlcore.hf.families import EXPERT_COUNT_FIELDS
from mlcore.items.registry import all_item_kinds
from mlcore.pointcloud.io.formats import CLOUD_SUFFIXES
from mlcore.video.user_clips import VIDEO_SUFFIXES
from mlcore.watermark.verification import IMAGE_SUFFIXES
from webapp.jobs.models import JobArtifact
from webapp.library.models import LibraryItem
from webapp.scratch import scratch_folder

TEXT_SUFFIXES = (".txt", ".csv", ".tsv", ".jsonl", ".json")
#: A config.json larger than this is not read to guess a kind (a real one is a few KB).
MAX_CONFIG_BYTES = 1 << 20


@dataclass(frozen=True)
class Offer:
    """``item`` when the file is already in the library; else the kinds it may be added as, with
    ``default`` preselected ("" asks the person to choose). No kinds and no item: nothing to offer."""

    item: LibraryItem | None = None
    kinds: tuple[str, ...] = ()
    default: str = ""
    format: str = ""


def offer_for(artifact: JobArtifact, made: Sequence[LibraryItem], *, may_add: bool = True) -> Offer:
    """The offer for one of a job's files, given the library items that job made; with ``may_add``
    false (a viewer, a job that did not succeed) only whether the file is already in the library."""
    item = registered_as(artifact, made)
    if item is not None:
        return Offer(item=item)
    if not may_add:
        return Offer()
    fmt, guess = _sniffed(artifact)
    kinds = kinds_for_format(fmt)
    if not kinds:
        return Offer(format=fmt)
    if len(kinds) == 1:
        guess = kinds[0]
    elif fmt == "json" and artifact.name.rsplit("/", 1)[-1] == "graphs.json":
        guess = "graphs"  # the name the graph jobs read; any other JSON could be a text corpus or graphs
    return Offer(kinds=kinds, default=guess if guess in kinds else "", format=fmt)


def kinds_for_format(fmt: str) -> tuple[str, ...]:
    """The library kinds (those a team can hold) whose uploads may be ``fmt``, in the registry's order."""
    if not fmt:
        return ()
    return tuple(kind.name for kind in all_item_kinds() if kind.in_library and fmt in kind.formats)


# -- already in the library? ---------------------------------------------------------------------------


def registered_as(artifact: JobArtifact, made: Sequence[LibraryItem]) -> LibraryItem | None:
    """The item among ``made`` that holds this file's content, or ``None``.

    A file registered as it is (or added with "Add to library") is the item's blob byte for byte.
    A folder is zipped twice, once as the artifact and once as the item (with fixed timestamps, so
    equal content is one item): the bytes differ but the sizes do not, and the two zips list the
    same members with the same CRCs. Only items of the artifact's size are read, so a page reads
    no file unless it is almost surely the same one.
    """
    candidates = [i for i in made if i.file and i.sha256 and i.size == artifact.size]
    if not candidates:
        return None
    digest = _sha256(artifact.file)
    for item in candidates:
        if item.sha256 == digest:
            return item
    members = _zip_members(artifact.file)
    if members is None:
        return None
    for item in candidates:
        if item.format == "zip" and _zip_members(item.file) == members:
            return item
    return None


def _sha256(field: FieldFile) -> str:
    with field.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _zip_members(field: FieldFile) -> list[tuple[str, int, int]] | None:
    """(name, CRC-32, size) of each file in a zip, sorted; ``None`` when it is no zip."""
    try:
        with field.open("rb") as f, zipfile.ZipFile(f) as zf:
            return sorted((i.filename, i.CRC, i.file_size) for i in zf.infolist() if not i.is_dir())
    except (zipfile.BadZipFile, OSError, EOFError):
        return None


# -- what the content is -------------------------------------------------------------------------------


def artifact_format(artifact: JobArtifact) -> str:
    """The artifact's format as :mod:`mlcore.sniff` names it from the content, "" when unknown."""
    return _sniffed(artifact)[0]


def _sniffed(artifact: JobArtifact) -> tuple[str, str]:
    """(format, guessed kind or "") from the content. On local storage the file is read in place;
    from a bucket only its head is fetched, enough to name the format but not an archive's members
    (a page does not download a checkpoint to guess its kind), so an archive there is left to the
    person to name."""
    local = _local_path(artifact.file)
    if local is not None:
        fmt = sniff.sniff(local) or ""
        return fmt, _archive_guess(local) if fmt == "zip" else ""
    with scratch_folder("offer") as scratch:
        head = scratch / "head"
        with artifact.file.open("rb") as src:
            head.write_bytes(src.read(sniff.SNIFF_BYTES))
        return sniff.sniff(head) or "", ""


def _local_path(field: FieldFile) -> Path | None:
    try:
        return Path(field.path)
    except NotImplementedError:  # a bucket: no path on this host
        return None


def _archive_guess(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as zf:
            names = [i.filename for i in zf.infolist() if not i.is_dir() and not _hidden(i.filename)]
            config = _config(zf, names)
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error, RuntimeError, NotImplementedError):
        return ""  # encrypted, an unknown compression, a corrupt member: the person says what it is
    return guess_from_members(names, config)


def _hidden(name: str) -> bool:
    """Files an archiver adds that say nothing of the content (macOS's resource forks, dot files)."""
    parts = PurePosixPath(name).parts
    return not parts or parts[0] == "__MACOSX" or parts[-1].startswith(".")


def _config(zf: zipfile.ZipFile, names: list[str]) -> dict[str, Any] | None:
    """The checkpoint's config.json (at the root or one folder down, as checkpoints are archived)."""
    found = sorted((n for n in names if PurePosixPath(n).name == "config.json" and n.count("/") <= 1), key=len)
    if not found or zf.getinfo(found[0]).file_size > MAX_CONFIG_BYTES:
        return None
    try:
        config = json.loads(zf.read(found[0]))
    except ValueError:
        return None
    return config if isinstance(config, dict) else None


def guess_from_members(names: list[str], config: dict[str, Any] | None) -> str:
    """The library kind a folder with these files most likely is, or "" when it could be several.

    A Hugging Face config (``model_type``) is an LM, an MoE one when it counts routed experts; a
    diffusers config names its class. Otherwise the files' kinds decide: all images, all point
    clouds, all text (graphs.json among them: graphs), videos (clips), safetensors alone (traces).
    """
    if config is not None:
        if isinstance(config.get("model_type"), str):
            experts = [config.get(field) for field in EXPERT_COUNT_FIELDS]
            return "hf-moe-lm" if any(isinstance(n, int) and n > 1 for n in experts) else "hf-lm"
        if config.get("_class_name") == "AutoencoderKL":
            return "diffusers-vae"
        return ""  # MoE Lab's own checkpoints: several model kinds write a config.json
    suffixes = {PurePosixPath(name).suffix.lower() for name in names}
    if not suffixes:
        return ""
    if suffixes <= set(IMAGE_SUFFIXES):
        return "images"
    if suffixes <= set(CLOUD_SUFFIXES):
        return "pointclouds"
    if suffixes <= set(TEXT_SUFFIXES):
        return "graphs" if any(PurePosixPath(n).name == "graphs.json" for n in names) else "text"
    if suffixes & set(VIDEO_SUFFIXES) and suffixes <= {*VIDEO_SUFFIXES, *IMAGE_SUFFIXES}:
        return "video-clips"
    if suffixes == {".safetensors"}:
        return "routing-trace"
    return ""
