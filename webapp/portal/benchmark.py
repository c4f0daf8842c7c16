"""Portal latency, end to end, as ``python -m webapp.portal.benchmark CHECKS`` (prints JSON).

Run by ``mlcore.bench.watermark_latency`` in a subprocess whose environment picks the database
and broker (SQLite + the file-system broker by default, or PostgreSQL/Redis). It migrates, makes
a team with ``KEYS`` keys, one of which marked the test image, starts a real verify worker
(``webapp.jobs.benchmark.Workers``), warms it (the first check imports torch and loads the
extractor), then times ``CHECKS`` anonymous POSTs to ``/verify/`` through Django's test client:
upload checks, rate limit, queue, decode, match, answer, render.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _image(size: int, fmt: str, seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


def main(checks: int, keys: int) -> dict[str, Any]:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    django.setup()
    from django.conf import settings
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from webapp.accounts.models import Team
    from webapp.jobs.benchmark import Workers, percentile
    from webapp.jobs.models import WorkerStatus
    from webapp.portal import services

    call_command("migrate", verbosity=0)
    settings.ALLOWED_HOSTS = ["testserver"]
    WorkerStatus.objects.all().delete()
    team, _ = Team.objects.get_or_create(slug="bench-portal", defaults={"name": "Bench Lab"})
    for i in range(keys):
        services.key_create(team=team, user=None, name=f"bench {i}")
    images = {"32px PNG": _image(32, "PNG", 0), "512px JPEG": _image(512, "JPEG", 1)}
    workers = Workers(Path(tempfile.mkdtemp(prefix="portal-bench-")))
    out: dict[str, Any] = {
        "database": connection.vendor,
        "broker": settings.CELERY_BROKER_URL.split(":", 1)[0],
        "keys": keys,
        "checks": checks,
    }
    try:
        workers.start("portal-bench")
        client = Client()
        started = time.perf_counter()
        first = client.post("/verify/", {"image": SimpleUploadedFile("w.png", images["32px PNG"])})
        out["first_check_s"] = time.perf_counter() - started
        if first.status_code != 200:
            raise RuntimeError(f"warm-up check answered {first.status_code}: {first.content.decode()[-500:]}")
        for label, data in images.items():
            times = []
            for _ in range(checks):
                started = time.perf_counter()
                response = client.post("/verify/", {"image": SimpleUploadedFile("x", data)})
                times.append(time.perf_counter() - started)
                assert response.status_code == 200, response.status_code
            out[label] = {
                "p50_ms": 1000 * statistics.median(times),
                "p95_ms": 1000 * percentile(times, 0.95),
                "max_ms": 1000 * max(times),
            }
    finally:
        workers.stop()
        Team.objects.filter(pk=team.pk).delete()
    return out


if __name__ == "__main__":
    result = main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 100)
    print("RESULT " + json.dumps(result))
