"""The verify worker's side of a portal check (``workers/verify.py`` calls :func:`answer`).

The extractor is loaded once per worker process and kept (``cached_extractor``); each check reads
the registry afresh, so a key created a second ago is already searched.
"""

from __future__ import annotations

import base64
import binascii
import logging
from pathlib import Path

from django.utils import timezone

from webapp.portal import conf
from webapp.portal.models import VerifyRequest, WatermarkKey

log = logging.getLogger(__name__)


def extractor_path() -> Path:
    """The folder named by ``MOELAB_WATERMARK_EXTRACTOR``: a zoo item (built on first use) or a path."""
    from mlcore.catalog import materialize
    from mlcore.jobs.references import builtin_items

    reference = conf.extractor()
    item = builtin_items().get(reference.removeprefix("zoo:"))
    if item is not None:
        return materialize(item)
    path = Path(reference).expanduser()
    if path.is_dir():
        return path
    raise RuntimeError(
        f"MOELAB_WATERMARK_EXTRACTOR={reference!r} is neither a built-in model nor a folder; "
        "set it to zoo:molm-tiny or a watermark-markers folder."
    )


def warm_up() -> None:
    """Load the extractor into this process's cache (``workers.verify`` calls it as a child starts)."""
    from mlcore.watermark.verification import cached_extractor

    cached_extractor(extractor_path())
    log.info("verify: the watermark extractor is loaded and waiting for checks")


def answer(request_id: str, images: list[str], only_teams: list[int] | None = None) -> str:
    """Decode and match; store the full answer for the waiting web request, which shows each viewer
    only what ``webapp.portal.services.view_for`` allows. ``only_teams``: search those teams' keys only."""
    from mlcore.watermark.disclosure import rests_on_public_weights
    from mlcore.watermark.keys import InvalidKey
    from mlcore.watermark.verification import BadImage, cached_extractor, open_image, verify
    from webapp.portal.services import keyring_records

    pending = VerifyRequest.objects.filter(pk=request_id, answered_at__isnull=True)
    if not pending.exists():
        return "withdrawn"  # the web stopped waiting: skip the work
    try:
        decoded = [
            open_image(base64.b64decode(data, validate=True), name=f"image {i + 1}", max_pixels=conf.max_pixels())
            for i, data in enumerate(images)
        ]
        if only_teams is None:
            keys = keyring_records()
        else:
            keys = keyring_records(own_team_ids=set(only_teams), only_teams=True)
        folder = extractor_path()
        matches, thresholds = verify(
            cached_extractor(folder), decoded, keys, fpr=conf.fpr(), suspicious_fpr=conf.suspicious_fpr()
        )
    except (BadImage, InvalidKey, binascii.Error) as exc:
        pending.update(error=str(exc), answered_at=timezone.now())
        return "refused"
    except Exception:
        log.exception("portal check %s failed", request_id)
        pending.update(
            error="The verifier failed on this image; the operators have been told.", answered_at=timezone.now()
        )
        return "failed"
    teams = dict(WatermarkKey.objects.values_list("public_id", "team_id"))
    result = {
        "thresholds": thresholds.describe(),
        "public_weights": rests_on_public_weights(folder),  # its files are hashed once per process
        "images": [{**m.describe(), "team_id": teams.get(m.key.id) if m.key is not None else None} for m in matches],
    }
    pending.update(result=result, answered_at=timezone.now())
    return "answered"
