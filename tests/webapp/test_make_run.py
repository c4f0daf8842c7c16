"""``make run`` on the embedded defaults: ``scripts/run.sh`` with no DATABASE_URL, CELERY_BROKER_URL
or REDIS_URL migrates a fresh SQLite database, prints working demo credentials, and serves the site
with a job worker (gpu and cpu, beat embedded) and a separate verify worker. A person logs in with
the printed credentials, submits a job through the form, an anonymous visitor's portal check is
answered while the job runs, the job runs to the end, and Ctrl-C stops every process."""

from __future__ import annotations

import http.cookiejar
import io
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Running:
    url: str
    var: Path
    log: Path
    process: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(pattern, self.output())
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"no {pattern!r} in the output of run.sh:\n{self.output()[-4000:]}")


@pytest.fixture
def make_run(tmp_path: Path) -> Iterator[Running]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "CELERY_", "REDIS_URL"))}
    env.pop("MOELAB_MEDIA_ROOT", None)
    env.pop("MOELAB_S3_BUCKET", None)
    env.update(
        MOELAB_VAR_DIR=str(tmp_path / "var"),
        MOELAB_PORT=str(port),
        MOELAB_EXTRA_KINDS="tests.jobkinds.exercise",
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
    )
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "scripts/run.sh"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            yield Running(url=f"http://127.0.0.1:{port}", var=tmp_path / "var", log=log, process=process)
        finally:
            # run.sh traps TERM and stops its worker and web server before it exits.
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=10)


class Browser:
    """Just enough of a browser: cookies, redirects, and Django's CSRF token from the cookie."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))

    def get(self, path: str) -> tuple[str, str]:
        with self.opener.open(self.base + path, timeout=30) as response:
            return response.geturl(), response.read().decode()

    def post(self, path: str, data: dict[str, str]) -> tuple[str, str]:
        csrf = next(c.value for c in self.cookies if c.name == "csrftoken")
        body = urllib.parse.urlencode({**data, "csrfmiddlewaretoken": csrf}).encode()
        with self.opener.open(self.base + path, data=body, timeout=30) as response:
            return response.geturl(), response.read().decode()

    def post_file(self, path: str, field: str, filename: str, content: bytes) -> tuple[int, str]:
        """A multipart form with one file, as the portal's form sends it; the status and the page."""
        csrf = next(c.value for c in self.cookies if c.name == "csrftoken")
        boundary = "----moelab-test-boundary"
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="csrfmiddlewaretoken"\r\n\r\n{csrf}\r\n'
                f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{filename}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n"
            ).encode()
            + content
            + f"\r\n--{boundary}--\r\n".encode()
        )
        request = urllib.request.Request(
            self.base + path,
            data=body,
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}", "Referer": self.base + path},
        )
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def wait_until_serving(running: Running, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{running.url}/healthz", timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    raise AssertionError(f"run.sh never served {running.url}:\n{running.output()[-4000:]}")


def test_make_run_serves_the_site_on_embedded_defaults_and_runs_a_submitted_job(make_run: Running) -> None:
    username, password = make_run.wait_for_output(r"log in as (\S+) / (\S+) ", timeout=180).groups()
    wait_until_serving(make_run)

    # The embedded defaults: SQLite in WAL mode under var/, and the server-less file-system broker.
    with sqlite3.connect(make_run.var / "moelab.sqlite3") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    make_run.wait_for_output(r"transport:\s+filesystem://", timeout=120)

    browser = Browser(make_run.url)
    browser.get("/login/")
    landed, _ = browser.post("/login/", {"username": username, "password": password})
    assert landed == f"{make_run.url}/t/demo/"

    # Two workers, each a process of its own: jobs (gpu, cpu) and the portal's checks (verify).
    # Both report on the dashboard, which lists every queue.
    def worker_queues() -> set[str]:
        html = browser.get("/t/demo/workers/")[1]
        return set(re.findall(r'<span class="badge">(\w+)</span>', html))

    deadline = time.monotonic() + 180
    while worker_queues() != {"gpu", "cpu", "verify"}:
        assert time.monotonic() < deadline, f"no worker on every queue:\n{make_run.output()[-4000:]}"
        time.sleep(1)
    workers = workers_of(make_run)
    assert {name: queues for name, (queues, _) in workers.items()} == {"worker": ["cpu", "gpu"], "verify": ["verify"]}
    assert workers["worker"][1] != workers["verify"][1]
    assert psutil.Process(workers["worker"][1]).nice() > psutil.Process(workers["verify"][1]).nice()

    # A job that runs for half a minute (three steps of ten seconds).
    browser.get("/t/demo/submit/test-exercise/")
    job_url, _ = browser.post("/t/demo/submit/test-exercise/", {"steps": "3", "step_seconds": "10", "seed": "7"})
    assert re.fullmatch(rf"{make_run.url}/jobs/[0-9a-f-]{{36}}/", job_url), job_url
    job_path = job_url.removeprefix(make_run.url)
    deadline = time.monotonic() + 120
    while 'data-status="running"' not in (live := browser.get(f"{job_path}live/")[1]):
        assert 'data-status="succeeded"' not in live and 'data-status="failed"' not in live, live
        assert time.monotonic() < deadline, f"the job never started:\n{make_run.output()[-4000:]}"
        time.sleep(0.5)

    # While it runs, an anonymous visitor's portal check is answered (not "the verifier is busy").
    visitor = Browser(make_run.url)
    visitor.get("/verify/")
    status, page = visitor.post_file("/verify/", "image", "photo.png", png(64))
    assert status == 200, page[-2000:]
    assert re.search(r'data-verdict="[a-z ]+"', page), page[-2000:]
    assert 'data-status="running"' in browser.get(f"{job_path}live/")[1]

    deadline = time.monotonic() + 120
    while 'data-status="succeeded"' not in (live := browser.get(f"{job_path}live/")[1]):
        assert 'data-status="failed"' not in live, live
        assert time.monotonic() < deadline, f"the job never finished:\n{make_run.output()[-4000:]}"
        time.sleep(1)
    assert "step 2: loss 0.3333" in live

    # Beat is embedded in the job worker: it keeps its schedule under var/.
    assert list(make_run.var.glob("celerybeat-schedule*"))

    # Ctrl-C (SIGINT to the terminal's process group) stops both workers with a warm shutdown (each
    # removes its status row) and the web server, and nothing of the session is left running.
    session = os.getsid(make_run.process.pid)
    os.killpg(make_run.process.pid, signal.SIGINT)
    make_run.process.wait(timeout=90)
    assert "MoE Lab stopped." in make_run.output()
    assert workers_of(make_run) == {}
    # Exited processes whose parent was gone are reaped by init; where init does not reap (some
    # containers), they linger as zombies: dead all the same.
    left = [
        p
        for p in psutil.process_iter(["pid", "status", "cmdline"])
        if _session_of(p.info["pid"]) == session and p.info["status"] != psutil.STATUS_ZOMBIE
    ]
    assert left == [], [p.info["cmdline"] for p in left]


def workers_of(running: Running) -> dict[str, tuple[list[str], int]]:
    """``{"worker": (queues, pid), ...}`` from the worker status rows, by node name."""
    with sqlite3.connect(running.var / "moelab.sqlite3") as db:
        rows = db.execute("SELECT hostname, queues, pid FROM jobs_workerstatus").fetchall()
    return {hostname.split("@")[0]: (sorted(json.loads(queues)), pid) for hostname, queues, pid in rows}


def _session_of(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def png(side: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (120, 80, 200)).save(buffer, "PNG")
    return buffer.getvalue()
