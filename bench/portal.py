"""Portal latency, end to end, as ``python -m bench.portal CHECKS`` (prints JSON).

Run by ``bench.watermark_latency`` in a subprocess whose environment picks the database
and broker (SQLite + the file-system broker by default, or PostgreSQL/Redis). It migrates, makes
a team with ``KEYS`` keys, one of which marked the test image, starts a real verify worker
(``bench.platform.Workers``), warms it (the first check imports torch and loads the
extractor), then times ``CHECKS`` anonymous POSTs to ``/verify/`` through Django's test client:
upload checks, rate limit, queue, decode, match, answer, render.

``python -m bench.portal busy CHECKS KEYS`` measures the embedded default as a person
runs it: it starts ``scripts/run.sh`` itself (SQLite, the file-system broker, the job worker at a
lower priority and the separate verify worker), submits a ``moe-profile`` job big enough to keep
both cores busy for the whole measurement, and times ``CHECKS`` anonymous checks of a 4-megapixel
JPEG and of a small PNG through the real HTTP endpoint while the job runs: p50, p95, max, and the
fraction answered (the rest were told "the verifier is busy").
"""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: A job of a real kind that keeps both cores of the benchmark machine busy for many minutes
#: (about a second per round on two cores); cancelled once the checks are done.
BUSY_JOB = {"hidden": 512, "intermediate": 1024, "experts": 16, "top_k": 2, "tokens": 4096, "repeats": 100}


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

    from bench.platform import Workers, percentile
    from webapp.accounts.models import Team
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


class Visitor:
    """An anonymous browser of the portal: the CSRF cookie from the form, then multipart POSTs."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))
        with self.opener.open(f"{base}/verify/", timeout=60) as response:
            response.read()
        self.csrf = next(c.value for c in self.cookies if c.name == "csrftoken")

    def check(self, data: bytes, name: str) -> tuple[int, float]:
        """POST one image to /verify/; the HTTP status and the seconds until the page was read."""
        boundary = "----moelab-bench"
        body = b"".join(
            [
                f'--{boundary}\r\nContent-Disposition: form-data; name="csrfmiddlewaretoken"\r\n\r\n'.encode(),
                f"{self.csrf}\r\n".encode(),
                f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="{name}"\r\n'.encode(),
                b"Content-Type: application/octet-stream\r\n\r\n",
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            ]
        )
        request = urllib.request.Request(
            f"{self.base}/verify/",
            data=body,
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}", "Referer": f"{self.base}/verify/"},
        )
        started = time.perf_counter()
        try:
            with self.opener.open(request, timeout=120) as response:
                response.read()
                status = response.status
        except urllib.error.HTTPError as exc:
            exc.read()
            status = exc.code
        return status, time.perf_counter() - started


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate: Any, timeout: float, what: str, process: subprocess.Popen[bytes], log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"run.sh exited while waiting for {what}:\n{log.read_text(errors='replace')[-3000:]}")
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise RuntimeError(f"timed out waiting for {what}:\n{log.read_text(errors='replace')[-3000:]}")


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError):
        return False


def _cpu_seconds(pid: int) -> float:
    """CPU time of a process and all its descendants (the job runs in a pool child)."""
    import psutil

    total = 0.0
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def busy(checks: int, keys: int) -> dict[str, Any]:
    """The portal on ``make run`` while a long job keeps both cores busy (see the module's docstring)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    django.setup()
    from django.contrib.auth.models import User

    from bench.platform import percentile
    from bench.watermark_latency import PHOTO_SIDE, photo_jpeg
    from webapp.accounts.models import Membership, Role, Team
    from webapp.jobs.models import Job, WorkerStatus
    from webapp.jobs.services import job_cancel, job_submit
    from webapp.portal import services

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = Path(os.environ["MOELAB_VAR_DIR"]).parent / "run.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MOELAB_PORT": str(port), "PYTHONUNBUFFERED": "1"}
    out: dict[str, Any] = {"checks": checks, "keys": keys, "job": {"kind": "moe-profile", "params": BUSY_JOB}}
    with log.open("wb") as output:
        process = subprocess.Popen(
            ["bash", "scripts/run.sh"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    job: Job | None = None
    user: User | None = None
    try:
        _wait(lambda: _serving(url), 600, "the web server", process, log)

        def workers() -> dict[str, WorkerStatus] | None:
            found = {w.hostname.split("@")[0]: w for w in WorkerStatus.objects.all()}
            return found if found.keys() >= {"worker", "verify"} else None

        statuses = _wait(workers, 600, "both workers", process, log)
        job_worker = statuses["worker"].pid
        out["workers"] = {name: {"queues": w.queues, "pid": w.pid} for name, w in statuses.items()}
        user, _ = User.objects.get_or_create(username="bench-busy")
        team, _ = Team.objects.get_or_create(slug="bench-busy", defaults={"name": "Bench Busy"})
        Membership.objects.get_or_create(team=team, user=user, defaults={"role": Role.OWNER})
        for i in range(keys - team.watermark_keys.count()):
            services.key_create(team=team, user=None, name=f"bench {i}")

        job = job_submit(team=team, user=user, kind="moe-profile", raw_params=BUSY_JOB)
        # Past the warm-up round, the job is in its timed rounds: both cores busy.
        _wait(
            lambda: (
                Job.objects.filter(pk=job.pk, progress__gte=0.1).exists()
                or Job.objects.filter(pk=job.pk, status__in=Job.TERMINAL).exists()
            ),
            900,
            "the job to start its timed rounds",
            process,
            log,
        )
        job.refresh_from_db()
        if job.status != Job.Status.RUNNING:
            raise RuntimeError(f"the busy job ended before the checks: {job.status} {job.error}")

        visitor = Visitor(url)
        small = _image(32, "PNG", 0)
        started = time.perf_counter()
        while visitor.check(small, "warm.png")[0] != 200:  # the verify children load the extractor as they start
            if time.perf_counter() - started > 600:
                raise RuntimeError(f"the verify worker never answered:\n{log.read_text(errors='replace')[-3000:]}")
        out["first_check_s"] = time.perf_counter() - started

        images = {"4 MP JPEG": photo_jpeg(PHOTO_SIDE, 1), "32px PNG": small}
        out["image_bytes"] = {label: len(data) for label, data in images.items()}
        cpu_before, wall_before = _cpu_seconds(job_worker), time.perf_counter()
        for label, data in images.items():
            times, answered = [], 0
            for i in range(checks):
                status, seconds = visitor.check(data, f"{i}.{'jpg' if 'JPEG' in label else 'png'}")
                times.append(seconds)
                answered += status == 200
            out[label] = {
                "n": checks,
                "answered": answered / checks,
                "p50_ms": 1000 * statistics.median(times),
                "p95_ms": 1000 * percentile(times, 0.95),
                "max_ms": 1000 * max(times),
            }
        out["job"]["cores_used"] = (_cpu_seconds(job_worker) - cpu_before) / (time.perf_counter() - wall_before)
        job.refresh_from_db()
        out["job"]["status_after"] = job.status
    finally:
        if job is not None and user is not None:
            job.refresh_from_db()
            if job.status in (Job.Status.QUEUED, Job.Status.RUNNING):
                job_cancel(job=job, user=user)
        _stop(process)
    return out


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Ctrl-C, as a person stops ``make run``; SIGKILL if it has not stopped within a minute."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=60)
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    process.wait(timeout=10)


if __name__ == "__main__":
    if sys.argv[1] == "busy":
        result = busy(int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 100)
    else:
        result = main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 100)
    print("RESULT " + json.dumps(result))
