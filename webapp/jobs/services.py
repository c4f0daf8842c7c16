"""Writes for jobs: submit, cancel, re-run, delete. Keyword-only, typed and validating.

Input that cannot be accepted raises :class:`SubmitError` with ``(field, message)`` pairs, which
forms show next to their fields and the API returns as JSON; permission failures raise
``PermissionDenied``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.core.files import File
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone

from mlcore import sniff
from mlcore.jobs import runner
from mlcore.jobs.params import REFERENCE_TYPES
from mlcore.jobs.registry import Kind, UnknownKind, get_kind
from mlcore.jobs.spec import JobError, ValidationError
from webapp.accounts.models import Membership, Team
from webapp.jobs import queue, storage
from webapp.jobs.models import Job, JobInput
from webapp.jobs.references import record_submitted
from webapp.jobs.resolver import check_reference
from webapp.scratch import scratch_folder

FieldErrors = list[tuple[str, str]]


#: Settings naming folders of this deployment; paths under them never reach a user (with the
#: temporary folder, the checkout and the Python installation that :func:`runner.server_roots` knows).
_ROOT_SETTINGS = ("BASE_DIR", "VAR_DIR", "MEDIA_ROOT", "STATIC_ROOT", "LIBRARY_UPLOAD_DIR", "LIBRARY_CACHE_DIR")


def safe_message(message: str) -> str:
    """``message`` as users may see it: any server path cut to its last part (see :func:`runner.scrub_paths`).

    The safety net where errors are stored or answered for users; messages should not name server
    paths in the first place."""
    roots = [value for name in _ROOT_SETTINGS if (value := getattr(settings, name, None))]
    return runner.scrub_paths(message, extra_roots=roots)


class SubmitError(Exception):
    """A job that cannot be accepted; ``errors`` pairs each field (or ``"__all__"``) with a message."""

    def __init__(self, errors: FieldErrors) -> None:
        # The form and the API show these as written: the web checked uploads in a temporary folder.
        self.errors = [(name, safe_message(message)) for name, message in errors]
        super().__init__("; ".join(f"{name}: {message}" for name, message in self.errors))


class JobStateError(Exception):
    """An action that does not fit the job's state (e.g. cancelling a finished job)."""


def _membership(team: Team, user: AbstractBaseUser) -> Membership:
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise PermissionDenied("You are not in this team.")
    return membership


def _require_write(team: Team, user: AbstractBaseUser) -> Membership:
    membership = _membership(team, user)
    if not membership.can_write:
        raise PermissionDenied("Viewers cannot submit or change jobs.")
    return membership


def _kind(name: str) -> Kind:
    try:
        return get_kind(name)
    except UnknownKind as exc:
        raise SubmitError([("kind", str(exc))]) from None


def _field_of(kind: Kind, message: str) -> str:
    """The file parameter a runner message is about (its messages start with the field's title)."""
    for param in kind.spec.file_params:
        if message.startswith(param.title + ":") or message.startswith(param.title + " ("):
            return param.name
    return "__all__"


def _clean_params(kind: Kind, raw_params: Mapping[str, Any], *, team: Team) -> dict[str, Any]:
    try:
        params = kind.spec.clean(raw_params)
        runner.check_estimate(kind, params, memory_limit=settings.WORKER_MEMORY_LIMIT or None)
    except ValidationError as exc:
        raise SubmitError(list(exc.errors)) from None
    except JobError as exc:
        raise SubmitError([("__all__", str(exc))]) from None
    errors: FieldErrors = []
    for param in kind.spec.value_params:
        if isinstance(param, REFERENCE_TYPES) and params.get(param.name) is not None:
            try:
                check_reference(param, params[param.name], team=team)
            except JobError as exc:
                errors.append((param.name, str(exc)))
    if errors:
        raise SubmitError(errors)
    return params


def _spool(files: Mapping[str, Sequence[UploadedFile]], scratch: Path) -> dict[str, list[Path]]:
    """Write uploads to local files, so they are checked exactly as the worker will check them."""
    paths: dict[str, list[Path]] = {}
    for name, uploads in files.items():
        for index, upload in enumerate(uploads):
            target = scratch / "upload" / name / str(index) / Path(upload.name or "upload").name
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as out:
                for chunk in upload.chunks():
                    out.write(chunk)
            paths.setdefault(name, []).append(target)
    return paths


def _check_files(kind: Kind, files: Mapping[str, Sequence[UploadedFile]], scratch: Path) -> dict[str, list[Path]]:
    files = {name: list(uploads) for name, uploads in files.items() if uploads}
    unknown = set(files) - {p.name for p in kind.spec.file_params}
    if unknown:
        raise SubmitError([(name, "This job takes no such file.") for name in sorted(unknown)])
    for param in kind.spec.file_params:
        # Refuse oversized uploads before writing them anywhere.
        for upload in files.get(param.name, []):
            if upload.size is not None and upload.size > param.max_bytes:
                raise SubmitError(
                    [
                        (
                            param.name,
                            f"{upload.name} is {upload.size} bytes; the limit is {param.max_bytes}. Upload a smaller "
                            "file, or ask an admin to register a large input in the team library.",
                        )
                    ]
                )
    paths = _spool(files, scratch)
    try:
        runner.check_files(kind, paths, scratch / "unpacked")
    except JobError as exc:
        raise SubmitError([(_field_of(kind, str(exc)), str(exc))]) from None
    return paths


def _apply_uploads(kind: Kind, params: dict[str, Any], uploaded: Collection[str]) -> dict[str, Any]:
    """The parameters as the job will use them with these uploads (see ``JobSpec.apply_uploads``)."""
    try:
        return kind.spec.apply_uploads(params, uploaded)
    except ValidationError as exc:
        raise SubmitError(list(exc.errors)) from None


def _save_input(job: Job, param: str, path: Path, original_name: str) -> JobInput:
    with path.open("rb") as f:
        digest = storage.sha256_of_stream(f)
        f.seek(0)
        item = JobInput(
            job=job,
            param=param,
            original_name=original_name[:255],
            size=path.stat().st_size,
            sha256=digest,
            format=sniff.sniff(path) or "unknown",
        )
        item.file.save(Path(original_name).name or "upload", File(f), save=False)
    item.save()
    return item


def _create(
    *,
    team: Team,
    user: AbstractBaseUser,
    kind: Kind,
    params: dict[str, Any],
    rerun_of: Job | None = None,
    address: str = "",
) -> Job:
    return Job.objects.create(
        team=team,
        submitted_by=user,
        submitted_from=address[:64],
        kind=kind.name,
        kind_version=kind.spec.version,
        queue=kind.spec.queue,
        params=params,
        rerun_of=rerun_of,
    )


def job_submit(
    *,
    team: Team,
    user: AbstractBaseUser,
    kind: str,
    raw_params: Mapping[str, Any],
    files: Mapping[str, Sequence[UploadedFile]] | None = None,
    address: str = "",
) -> Job:
    """Validate with the kind's spec, save the row and its inputs, and enqueue after commit.

    ``address``: the submitter's client address (budgets per address charge it; see ``Job.submitted_from``)."""
    _require_write(team, user)
    job_kind = _kind(kind)
    params = _clean_params(job_kind, raw_params, team=team)
    with scratch_folder("submit") as scratch:
        paths = _check_files(job_kind, files or {}, scratch)
        params = _apply_uploads(job_kind, params, paths)
        with transaction.atomic():
            job = _create(team=team, user=user, kind=job_kind, params=params, address=address)
            record_submitted(job, job_kind, params)
            for name, uploads in (files or {}).items():
                for upload, path in zip(uploads, paths.get(name, [])):
                    _save_input(job, name, path, upload.name or path.name)
            queue.enqueue_on_commit(job)
    return job


def job_cancel(*, job: Job, user: AbstractBaseUser) -> Job:
    """Cancel a queued job at once (and revoke its message); ask a running one to stop."""
    _require_write(job.team, user)
    now = timezone.now()
    # Conditional updates: the worker may claim the job between our read and our write.
    if Job.objects.filter(pk=job.pk, status=Job.Status.QUEUED).update(
        status=Job.Status.CANCELLED, cancel_requested=True, finished_at=now, error="Cancelled before it started."
    ):
        queue.revoke(job)
    elif not Job.objects.filter(pk=job.pk, status=Job.Status.RUNNING).update(cancel_requested=True):
        job.refresh_from_db()
        raise JobStateError(f"This job has already {job.status}.")
    job.refresh_from_db()
    return job


def job_changed_params(job: Job) -> list[str]:
    """Parameters whose meaning changed since the job's kind version (for Re-run), else ``[]``."""
    try:
        spec = get_kind(job.kind).spec
    except UnknownKind:
        return list(job.params)
    if spec.version == job.kind_version:
        return []
    return spec.changed_params(job.params)


def job_rerun(
    *, job: Job, user: AbstractBaseUser, raw_params: Mapping[str, Any] | None = None, address: str = ""
) -> Job:
    """A new job cloned from ``job`` (same inputs; the same or edited parameters)."""
    _require_write(job.team, user)
    kind = _kind(job.kind)
    params = _clean_params(kind, job.params if raw_params is None else raw_params, team=job.team)
    params = _apply_uploads(kind, params, {item.param for item in job.inputs.all()})
    with transaction.atomic():
        clone = _create(team=job.team, user=user, kind=kind, params=params, rerun_of=job, address=address)
        record_submitted(clone, kind, params)
        for item in job.inputs.all():
            # A copy, not a shared reference: deleting the old job must not take the new one's inputs.
            copy = JobInput(
                job=clone,
                param=item.param,
                original_name=item.original_name,
                size=item.size,
                sha256=item.sha256,
                format=item.format,
            )
            with item.file.open("rb") as f:
                copy.file.save(Path(item.original_name).name, File(f), save=False)
            copy.save()
        queue.enqueue_on_commit(clone)
    return clone


def job_delete(*, job: Job, user: AbstractBaseUser) -> None:
    """Delete a finished job with its files; team owners only."""
    if not _membership(job.team, user).is_owner:
        raise PermissionDenied("Only the team's owners can delete jobs.")
    if not job.is_terminal:
        raise JobStateError("Cancel the job and wait for it to stop before deleting it.")
    storage.delete_job_files(job)
    job.delete()
