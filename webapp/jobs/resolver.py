"""The platform's reference resolver: ``zoo:NAME`` items are built into the worker's cache;
``library:ID`` names a ready item of the submitting team's library, fetched by sha256 into the
worker's bounded cache (``webapp.library.storage.local_copy``).

Watermark keys (``webapp.portal``): a ``key`` parameter names one of the submitting team's keys
(``key:ID`` or ``ID``, ID the key's opaque id) and reaches the job as a key file
``{"id", "name", "bits"}``; a dataset that accepts ``watermark-keyring`` may name
``keyring:platform``, every registered key with the team's own marked ``own``, which reaches the job
as a keyring file (``mlcore.watermark.keys``). Unsealed bits never touch a disk: on Linux each file
is an anonymous memory file (``memfd_create``) that the job reads as ``/proc/self/fd/N``; it is gone
when :meth:`PlatformResolver.close` closes it at the end of the job, and with the process if the
worker is killed (even by SIGKILL). Elsewhere a 0600 file in the job's scratch folder, removed by
``close`` (and with the folder).
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from mlcore.catalog import materialize
from mlcore.jobs.params import Dataset, Key, Model
from mlcore.jobs.references import KEYRING_PREFIX, builtin_for
from mlcore.jobs.spec import JobError
from webapp.accounts.models import Team

PLATFORM_KEYRING = "keyring:platform"


def _check_keyring(param: Model | Dataset | Key, reference: str) -> None:
    if not isinstance(param, Dataset) or "watermark-keyring" not in param.accepts:
        raise JobError(f"{param.title}: {reference!r} is a watermark keyring; this field does not take one.")
    if reference != PLATFORM_KEYRING:
        raise JobError(f"{param.title}: the only keyring is {PLATFORM_KEYRING!r} (every registered key).")


def check_reference(param: Model | Dataset | Key, reference: str, *, team: Team | int | None = None) -> None:
    """Refuse, at submission, a reference that no worker could resolve (without building anything)."""
    if isinstance(param, Key):
        from webapp.portal.selectors import key_for_job

        key_for_job(team, param, reference)
        return
    if reference.startswith(KEYRING_PREFIX):
        _check_keyring(param, reference)
        return
    if builtin_for(param, reference) is not None:
        return
    if reference.startswith("library:"):
        if team is None:
            raise JobError(f"{param.title}: library items need a team; submit through the platform.")
        from webapp.library.selectors import item_for_reference

        item_for_reference(team, param, reference)
        return
    raise JobError(f"{param.title}: {reference!r} is not a built-in item; pick one from the list.")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def in_memory_supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "memfd_create") and Path("/proc/self/fd").is_dir()


def secret_file(name: str, data: bytes, *, folder: Path | None = None) -> tuple[Path, Callable[[], None]]:
    """A file holding ``data`` that only this worker process can read, and the callable that removes it.

    On Linux an anonymous memory file: its ``/proc/self/fd/N`` path opens only in this process (and
    its forks) and vanishes with it. Elsewhere a 0600 file in ``folder`` (the job's scratch folder),
    or in a fresh 0700 temporary folder.
    """
    if in_memory_supported():
        fd = os.memfd_create(f"moelab-{name}", os.MFD_CLOEXEC)  # CLOEXEC: no subprocess inherits it
        try:
            _write_all(fd, data)
        except BaseException:
            os.close(fd)
            raise
        return Path(f"/proc/self/fd/{fd}"), lambda: os.close(fd)
    made = folder is None
    where = Path(tempfile.mkdtemp(prefix="moelab-key-")) if folder is None else folder
    path = where / f".{secrets.token_hex(8)}-{name}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)

    def remove() -> None:
        path.unlink(missing_ok=True)
        if made:
            shutil.rmtree(where, ignore_errors=True)

    return path, remove


class PlatformResolver:
    """Resolves a job's references on a worker. Use it as a context manager (or call :meth:`close`)
    for as long as the job runs: closing removes the unsealed key files it handed out."""

    def __init__(
        self, *, cache: Path | None = None, team: Team | int | None = None, workdir: Path | None = None
    ) -> None:
        self.cache = cache
        self.team = team
        self.workdir = workdir
        self._removers: list[Callable[[], None]] = []

    def __enter__(self) -> PlatformResolver:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Remove every key file handed out (idempotent)."""
        while self._removers:
            self._removers.pop()()

    def _secret(self, name: str, data: bytes) -> Path:
        path, remove = secret_file(name, data, folder=self.workdir)
        self._removers.append(remove)
        return path

    @property
    def team_id(self) -> int | None:
        return self.team.pk if isinstance(self.team, Team) else self.team

    def resolve(self, param: Model | Dataset | Key, reference: str) -> Path:
        check_reference(param, reference, team=self.team)
        if isinstance(param, Key):
            from webapp.portal.selectors import key_for_job
            from webapp.portal.services import key_file_bytes

            return self._secret("key.json", key_file_bytes(key_for_job(self.team, param, reference)))
        if reference.startswith(KEYRING_PREFIX):
            from webapp.portal.services import keyring_bytes

            return self._secret("keyring.json", keyring_bytes(self.team_id))
        if reference.startswith("library:"):
            from webapp.library.selectors import item_for_reference
            from webapp.library.storage import local_copy

            assert self.team is not None  # check_reference refused a library item without a team
            return local_copy(item_for_reference(self.team, param, reference))
        item = builtin_for(param, reference)
        assert item is not None  # check_reference refused everything else
        return materialize(item, self.cache)
