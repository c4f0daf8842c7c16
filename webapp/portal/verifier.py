"""The verify worker's side of a portal check (``workers/verify.py`` calls :func:`answer`).

The extractors are loaded once per worker process and kept (``cached_extractor``); each check reads
the registry afresh, so a key created a second ago is already searched. Every image is read by
each configured extractor, the match corrected for all of them (:mod:`mlcore.watermark.readers`).
"""

from __future__ import annotations

import base64
import binascii
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from django.utils import timezone

from webapp.portal import conf
from webapp.portal.models import VerifyRequest, WatermarkKey

if TYPE_CHECKING:
    from mlcore.watermark.extractor import Extractor

log = logging.getLogger(__name__)


def extractor_paths() -> list[Path]:
    """The folders named by ``MOELAB_WATERMARK_EXTRACTOR`` (comma-separated): zoo items (built on first
    use) or paths, in the order given."""
    from mlcore.catalog import materialize
    from mlcore.jobs.references import builtin_items

    items = builtin_items()
    folders = []
    for reference in conf.extractors():
        item = items.get(reference.removeprefix("zoo:"))
        path = Path(reference).expanduser()
        if item is not None:
            folders.append(materialize(item))
        elif path.is_dir():
            folders.append(path)
        else:
            raise RuntimeError(
                f"MOELAB_WATERMARK_EXTRACTOR names {reference!r}, which is neither a built-in model nor a folder; "
                "name zoo:molm-tiny, zoo:molm-photo-parity, zoo:molm-photo-tiles, zoo:molm-photo or watermark-markers "
                "folders, separated by "
                "commas."
            )
    return folders


def extractors(folders: list[Path] | None = None) -> list[Extractor]:
    """The extractors of ``folders`` (default: every configured one), loaded once per process; a
    ``ValueError`` when their key lengths differ."""
    from mlcore.watermark.readers import same_bits
    from mlcore.watermark.verification import cached_extractor

    loaded = [cached_extractor(folder) for folder in folders or extractor_paths()]
    same_bits(loaded)
    return loaded


def warm_up() -> None:
    """Load the extractors into this process's cache and read one blank photo with each
    (``workers.verify`` calls it as a child starts): a photo's first read pays one-time costs (the
    phase search's FFT plans, the allocator's first large buffers) that would otherwise land on the
    first real check: without it the busy ``make run`` case of bench/results/watermark-latency.md had
    4-MP checks at p95 2,591 ms (each child's first paid ~2.5 s), with it 425 ms."""
    from PIL import Image

    from mlcore.watermark.verification import decode

    loaded = extractors()
    blank = Image.new("RGB", (640, 480), (128, 128, 128))
    for extractor in loaded:
        decode(extractor, [blank])
    n = len(loaded)
    what = "the watermark extractor is" if n == 1 else f"the {n} watermark extractors are"
    log.info("verify: %s loaded and waiting for checks", what)


def answer(request_id: str, images: list[str], only_teams: list[int] | None = None) -> str:
    """Decode and match; store the full answer for the waiting web request, which shows each viewer
    only what ``webapp.portal.services.view_for`` allows. ``only_teams``: search those teams' keys only."""
    from mlcore.watermark.disclosure import rests_on_public_weights
    from mlcore.watermark.keys import InvalidKey
    from mlcore.watermark.readers import verify_all
    from mlcore.watermark.verification import BadImage, open_image
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
        folders = extractor_paths()
        matches, thresholds = verify_all(
            extractors(folders), decoded, keys, fpr=conf.fpr(), suspicious_fpr=conf.suspicious_fpr()
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
        # Any public reader: a verdict may rest on it (the files are hashed once per process).
        "public_weights": any(rests_on_public_weights(folder) for folder in folders),
        "images": [{**m.describe(), "team_id": teams.get(m.key.id) if m.key is not None else None} for m in matches],
    }
    pending.update(result=result, answered_at=timezone.now())
    return "answered"
