"""Where a job's files live: Django's default storage (a folder under ``var/media``, or an
S3-compatible bucket), so workers on other hosts need no shared disk.

Layout: ``inputs/<job>/<param>/<name>``, ``artifacts/<job>/<attempt>/<name>``, ``logs/<job>.txt``.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from webapp.jobs.models import Job, JobArtifact, JobInput, log_path


def sha256_of_stream(stream: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while chunk := stream.read(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def zip_directory(source: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(source.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(source).as_posix())
    return target


def store_artifact(*, job: Job, name: str, path: Path, media_type: str, attempt: int) -> JobArtifact:
    """Copy a recorded artifact into storage (directories zipped); the same name again replaces it."""
    with tempfile.TemporaryDirectory(prefix="moelab-artifact-") as scratch:
        source = zip_directory(path, Path(scratch) / f"{name}.zip") if path.is_dir() else path
        size = source.stat().st_size
        artifact = JobArtifact.objects.filter(job=job, name=name, attempt=attempt).first()
        if artifact is not None and artifact.file:
            artifact.file.delete(save=False)
        artifact = artifact or JobArtifact(job=job, name=name, attempt=attempt)
        artifact.media_type = media_type
        artifact.size = size
        with source.open("rb") as f:
            artifact.file.save(name + (".zip" if path.is_dir() else ""), File(f), save=False)
        artifact.save()
    return artifact


def write_log(job_id: object, text: str) -> None:
    """Replace the stored full log (object stores cannot append, so the worker rewrites it)."""
    name = log_path(str(job_id))
    if default_storage.exists(name):
        default_storage.delete(name)
    default_storage.save(name, ContentFile(text.encode()))


def read_log(job: Job) -> str:
    name = log_path(str(job.id))
    if not default_storage.exists(name):
        return job.log_tail
    with default_storage.open(name, "rb") as f:
        return f.read().decode(errors="replace")


@contextmanager
def local_inputs(job: Job) -> Iterator[dict[str, list[Path]]]:
    """Download the job's uploads into a temporary folder, by parameter name, keeping file names."""
    scratch = Path(tempfile.mkdtemp(prefix="moelab-inputs-"))
    try:
        files: dict[str, list[Path]] = {}
        for index, item in enumerate(JobInput.objects.filter(job=job)):
            target = scratch / item.param / str(index) / Path(item.original_name).name
            target.parent.mkdir(parents=True, exist_ok=True)
            with item.file.open("rb") as src, target.open("wb") as out:
                shutil.copyfileobj(src, out)
            files.setdefault(item.param, []).append(target)
        yield files
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def delete_job_files(job: Job) -> None:
    for item in [*job.inputs.all(), *job.artifacts.all()]:
        if item.file:
            item.file.delete(save=False)
    name = log_path(str(job.id))
    if default_storage.exists(name):
        default_storage.delete(name)
