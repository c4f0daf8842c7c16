"""The portal's answers to a job's references (see ``webapp.jobs.references``): a ``key`` parameter
names one of the submitting team's watermark keys, and a dataset that accepts the watermark keyring
may name ``keyring:platform``, every registered key (a platform reference its item kind declares,
``mlcore.items.datasets.WATERMARK_KEYRING``). Both reach the job as files only the worker process
reads (the resolver's secret writer); unsealed bits never touch a disk.

Registered by :class:`webapp.portal.apps.PortalConfig` when Django starts.
"""

from __future__ import annotations

from pathlib import Path

from mlcore.errors import JobError
from mlcore.items.datasets import WATERMARK_KEYRING
from mlcore.jobs.params import Dataset, Key
from mlcore.jobs.references import KEYRING_PREFIX
from webapp.accounts.models import Team
from webapp.jobs.references import Param, ReferenceSource, SecretWriter
from webapp.portal.selectors import key_for_job, keys_for_team
from webapp.portal.services import key_file_bytes, keyring_bytes

PLATFORM_KEYRING = WATERMARK_KEYRING.platform_references[0].reference


def _key_claims(param: Param, reference: str) -> bool:
    return isinstance(param, Key)


def _key_check(param: Param, reference: str, team: Team | int | None) -> None:
    assert isinstance(param, Key)  # _key_claims takes key parameters only
    key_for_job(team, param, reference)


def _key_fetch(param: Param, reference: str, team: Team | int | None, secret: SecretWriter) -> Path:
    assert isinstance(param, Key)
    return secret("key.json", key_file_bytes(key_for_job(team, param, reference)))


def _key_options(param: Param, team: Team) -> list[tuple[str, str]]:
    """The team's active watermark keys (revoked keys cannot mark new images)."""
    if not isinstance(param, Key):
        return []
    return [(key.reference, f"{key.name} ({key.num_bits} bits)") for key in keys_for_team(team).filter(revoked_at=None)]


KEYS = ReferenceSource(claims=_key_claims, check=_key_check, fetch=_key_fetch, options=_key_options)


def _keyring_claims(param: Param, reference: str) -> bool:
    return not isinstance(param, Key) and reference.startswith(KEYRING_PREFIX)


def _keyring_check(param: Param, reference: str, team: Team | int | None) -> None:
    if not isinstance(param, Dataset) or WATERMARK_KEYRING.name not in param.accepts:
        raise JobError(f"{param.title}: {reference!r} is a watermark keyring; this field does not take one.")
    if reference != PLATFORM_KEYRING:
        raise JobError(f"{param.title}: the only keyring is {PLATFORM_KEYRING!r} (every registered key).")


def _keyring_fetch(param: Param, reference: str, team: Team | int | None, secret: SecretWriter) -> Path:
    team_id = team.pk if isinstance(team, Team) else team
    return secret("keyring.json", keyring_bytes(team_id))


# No options: the submit form lists the platform references the item kinds declare (mlcore.items).
KEYRING = ReferenceSource(claims=_keyring_claims, check=_keyring_check, fetch=_keyring_fetch)
