"""The platform's reference resolver: ``zoo:NAME`` items are built into the worker's cache;
``library:ID`` names a ready item of the submitting team's library, fetched by sha256 into the
worker's bounded cache (``webapp.library.storage.local_copy``).

Watermark keys (``webapp.portal``): a ``key`` parameter names one of the submitting team's keys
(``key:ID`` or ``ID``) and reaches the job as a key file ``{"id", "name", "bits"}``; a dataset that
accepts ``watermark-keyring`` may name ``keyring:platform``, every registered key, which reaches the
job as a keyring file (``mlcore.watermark.keys``). Both are written to a private temporary folder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

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


def _private_file(name: str) -> Path:
    # mkdtemp makes a 0700 folder: the key bits on a worker's disk are readable by this user only.
    return Path(tempfile.mkdtemp(prefix="moelab-key-")) / name


class PlatformResolver:
    def __init__(self, *, cache: Path | None = None, team: Team | int | None = None) -> None:
        self.cache = cache
        self.team = team

    def resolve(self, param: Model | Dataset | Key, reference: str) -> Path:
        check_reference(param, reference, team=self.team)
        if isinstance(param, Key):
            from webapp.portal.selectors import key_for_job
            from webapp.portal.services import write_key_file

            return write_key_file(key_for_job(self.team, param, reference), _private_file("key.json"))
        if reference.startswith(KEYRING_PREFIX):
            from webapp.portal.services import write_keyring_file

            return write_keyring_file(_private_file("keyring.json"))
        if reference.startswith("library:"):
            from webapp.library.selectors import item_for_reference
            from webapp.library.storage import local_copy

            assert self.team is not None  # check_reference refused a library item without a team
            return local_copy(item_for_reference(self.team, param, reference))
        item = builtin_for(param, reference)
        assert item is not None  # check_reference refused everything else
        return materialize(item, self.cache)
