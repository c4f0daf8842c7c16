"""The ``verify`` queue's portal task: decode uploaded images with the extractor kept loaded in
this worker process, match them against the key registry, and leave the answer where the waiting
web request reads it (``webapp.portal.services.check_images``). Thin: the work is in
``webapp.portal.verifier`` and ``mlcore.watermark``. Loaded through ``CELERY_IMPORTS``."""

from __future__ import annotations

from webapp.celery import app
from webapp.portal.queue import VERIFY_IMAGES


@app.task(name=VERIFY_IMAGES, ignore_result=True, acks_late=False)
def verify_images(request_id: str, images: list[str]) -> str:
    """``images``: base64 of each uploaded file, already checked by the web process."""
    from webapp.portal.verifier import answer

    return answer(request_id, images)
