"""The ``verify`` queue's portal task: decode uploaded images with the extractor kept loaded in
this worker process, match them against the key registry, and leave the answer where the waiting
web request reads it (``webapp.portal.services.check_images``). Thin: the work is in
``webapp.portal.verifier`` and ``mlcore.watermark``. Loaded through ``CELERY_IMPORTS``."""

from __future__ import annotations

import logging
import threading
from typing import Any

from celery import signals

from webapp.celery import app
from webapp.portal.queue import VERIFY_IMAGES, VERIFY_QUEUE

log = logging.getLogger(__name__)


@app.task(name=VERIFY_IMAGES, ignore_result=True, acks_late=False)
def verify_images(request_id: str, images: list[str], only_teams: list[int] | None = None) -> str:
    """``images``: base64 of each uploaded file, already checked by the web process; ``only_teams``:
    search those teams' keys only (the viewer's daily budget for other teams' keys is spent)."""
    from webapp.portal.verifier import answer

    return answer(request_id, images, only_teams)


@signals.worker_process_init.connect
def warm_up_the_extractor(**_: Any) -> None:
    """Load torch and the extractor as each child of a verify worker starts, so the first portal
    check after a deploy does not wait the half minute an import of torch can take under load.

    In a thread: Celery gives a new child only ``worker_proc_alive_timeout`` (4 s) to report in,
    and a check that arrives meanwhile simply waits on the extractor cache's lock.
    """
    consumed = app.amqp.queues.consume_from  # None when the worker takes every queue
    if consumed is not None and VERIFY_QUEUE not in consumed:
        return
    threading.Thread(target=_warm_up, name="verify-warm-up", daemon=True).start()


def _warm_up() -> None:
    from webapp.portal.verifier import warm_up

    try:
        warm_up()
    except Exception:  # a broken extractor setting is reported by the first check, with its message
        log.exception("could not warm up the watermark extractor")
