"""The platform's reference resolver: ``zoo:NAME`` items are built into the worker's cache; every
other reference goes to the source an app registered for it (:mod:`webapp.jobs.references`):
``library:ID`` to the library (a ready item of the submitting team's library, fetched by sha256
into the worker's bounded cache), watermark keys and ``keyring:platform`` to the portal.

A ``key`` parameter names one of the submitting team's keys (``key:ID`` or ``ID``, ID the key's
opaque id) and reaches the job as a key file ``{"id", "name", "bits"}``; a dataset that accepts
``watermark-keyring`` may name ``keyring:platform``, every registered key with the team's own marked
``own``, which reaches the job as a keyring file (``mlcore.watermark.keys``). Unsealed bits never
touch a disk: sources write them through :meth:`PlatformResolver._secret`, on Linux an anonymous
memory file (``memfd_create``) that the job reads as ``/proc/self/fd/N``; it is gone when
:meth:`PlatformResolver.close` closes it at the end of the job, and with the process if the worker is
killed (even by SIGKILL). Elsewhere a 0600 file in the job's scratch folder, removed by ``close``
(and with the folder).
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
from mlcore.jobs.references import builtin_for
from mlcore.jobs.spec import JobError
from webapp.accounts.models import Team
from webapp.jobs import references


def check_reference(param: Model | Dataset | Key, reference: str, *, team: Team | int | None = None) -> None:
    """Refuse, at submission, a reference that no worker could resolve (without building anything)."""
    source = references.source_for(param, reference)
    if source is not None:
        source.check(param, reference, team)
        return
    if not isinstance(param, Key) and builtin_for(param, reference) is not None:
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
        source = references.source_for(param, reference)
        if source is not None:
            return source.fetch(param, reference, self.team, self._secret)
        assert not isinstance(param, Key)  # the portal's source claims every key parameter
        item = builtin_for(param, reference)
        assert item is not None  # check_reference refused everything else
        return materialize(item, self.cache)
