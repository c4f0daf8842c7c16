"""docker-compose.yml, checked without a Docker engine: its shape (services, queues, GPU
reservation, health checks, volumes), and each service's command run here, outside Docker,
against the local PostgreSQL and Redis (the two Redis services run their own commands)."""

from __future__ import annotations

import os
import re
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def command_of(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return shlex.split(command) if isinstance(command, str) else list(command)


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_it_has_every_service_with_a_health_check(compose) -> None:
    services = compose["services"]
    assert {"postgres", "redis", "web", "worker-gpu", "worker-cpu", "worker-verify", "beat"} <= set(services)
    for name, service in services.items():
        assert service.get("healthcheck", {}).get("test"), f"{name} has no health check"


def test_the_workers_split_the_queues_and_the_gpu_worker_reserves_one_gpu(compose) -> None:
    services = compose["services"]
    gpu, cpu, verify = services["worker-gpu"], services["worker-cpu"], services["worker-verify"]
    gpu_argv, cpu_argv, verify_argv = command_of(gpu), command_of(cpu), command_of(verify)
    assert option(gpu_argv, "-Q") == "gpu" and option(gpu_argv, "-c") == "1" and option(gpu_argv, "-P") == "prefork"
    # Portal checks have a worker of their own and overflow to the CPU worker (DESIGN: worker-cpu takes cpu, verify).
    assert option(cpu_argv, "-Q") == "cpu,verify" and option(verify_argv, "-Q") == "verify"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert "beat" in command_of(compose["services"]["beat"])
    assert "-B" not in gpu_argv + cpu_argv + verify_argv  # exactly one beat, in its own service


_REALLOCATE_64_MIB = """
import resource
n = 64 * 2**20
block = bytearray(n)
del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
block = bytearray(n)
block[::4096] = bytes(n // 4096)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_the_gpu_workers_fresh_child_per_job_reuses_freed_memory_instead_of_faulting_it_in_again(compose) -> None:
    gpu = compose["services"]["worker-gpu"]
    # Keeping freed memory is only safe because each job runs in a process that exits when it ends.
    assert gpu["environment"]["MOELAB_FRESH_PROCESS_PER_JOB"] == "true"
    malloc_env = {name: str(value) for name, value in gpu["environment"].items() if name.startswith("MALLOC_")}
    assert malloc_env, "worker-gpu sets no glibc malloc tuning"

    def page_faults(extra: dict[str, str]) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | extra
        run = subprocess.run([sys.executable, "-c", _REALLOCATE_64_MIB], env=env, capture_output=True, text=True)
        return int(run.stdout)

    # By default a freed 64 MiB block goes back to the kernel and every page faults in again.
    assert page_faults({}) > 10_000
    assert page_faults(malloc_env) < 1_000


def test_the_web_runs_gunicorn_and_the_broker_never_evicts(compose) -> None:
    assert "gunicorn webapp.wsgi" in compose["services"]["web"]["command"]
    assert "noeviction" in command_of(compose["services"]["redis"])


def test_stateful_services_keep_their_data_in_named_volumes(compose) -> None:
    declared = set(compose["volumes"])
    for name in ("postgres", "redis", "web", "worker-gpu", "worker-cpu", "worker-verify", "beat"):
        mounts = [m.split(":")[0] for m in compose["services"][name].get("volumes", [])]
        assert mounts and set(mounts) <= declared, f"{name} mounts {mounts}"


# -- smoke: each service's command, outside Docker -------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def smoke_env(tmp_path_factory) -> Iterator[dict[str, str]]:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        pytest.skip("needs the local PostgreSQL and Redis (run through scripts/test.sh)")
    server, name = os.environ["DATABASE_URL"].rsplit("/", 1)
    admin = f"{server}/postgres"
    # Named after the suite's database, so suites run side by side (other TEST_DATABASE_URLs) never collide.
    smoke_db = f"{name}_compose_smoke"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {smoke_db}")
        conn.execute(f"CREATE DATABASE {smoke_db}")
    var = tmp_path_factory.mktemp("compose-var")
    yield {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "HOSTNAME": socket.gethostname(),
        "MOELAB_ENV": "production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "DATABASE_URL": f"{server}/{smoke_db}",
        "MOELAB_VAR_DIR": str(var),
        "MOELAB_MEDIA_ROOT": str(var / "media"),
    }
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {smoke_db} WITH (FORCE)")


class Started:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._out = log.open("wb")
        self.process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_for_output(self, pattern: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.log.read_text(errors="replace")):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.3)
        raise AssertionError(f"no {pattern!r} in the output:\n{self.log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self._out.close()


def healthcheck_argv(service: dict[str, Any], env: dict[str, str]) -> list[str]:
    test = service["healthcheck"]["test"]
    if test[0] == "CMD-SHELL":
        # Compose turns $$ into $; the shell expands the rest.
        return ["sh", "-c", test[1].replace("$$", "$")]
    return list(test[1:])


def get(url: str) -> HTTPResponse:
    # Production settings redirect plain HTTP to HTTPS; the proxy in front says the request was secure.
    return urllib.request.urlopen(urllib.request.Request(url, headers={"X-Forwarded-Proto": "https"}), timeout=10)


@pytest.mark.slow
def test_the_web_command_migrates_serves_pages_and_static_files_and_passes_its_health_check(
    compose, smoke_env, tmp_path
) -> None:
    # The image collects the static files at build time (Dockerfile); here, into this run's var/.
    collect = [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"]
    subprocess.run(collect, cwd=ROOT, env=smoke_env, check=True, timeout=300)
    port = free_port()
    argv = command_of(compose["services"]["web"])
    argv[-1] = argv[-1].replace("0.0.0.0:8000", f"127.0.0.1:{port}").replace("--workers 3", "--workers 1")
    web = Started(argv, smoke_env, tmp_path / "web.log")
    try:
        web.wait_for_output(r"Listening at")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
            assert response.status == 200 and response.read() == b"ok"
        with get(f"http://127.0.0.1:{port}/login/") as response:
            page = response.read().decode()
        # WhiteNoise serves the bundle under its hashed name, cacheable for good.
        (script,) = set(re.findall(r'src="(/static/build/main\.[0-9a-f]+\.js)"', page))
        with get(f"http://127.0.0.1:{port}{script}") as response:
            assert response.status == 200 and response.read()
            assert "immutable" in response.headers["Cache-Control"]
    finally:
        web.stop()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["worker-gpu", "worker-cpu", "worker-verify"])
def test_each_worker_command_starts_and_answers_its_health_check(compose, smoke_env, tmp_path, name) -> None:
    service = compose["services"][name]
    # The service's own settings (e.g. CUDA_VISIBLE_DEVICES), with the servers swapped for the local ones.
    env = {**smoke_env, **{k: str(v) for k, v in service.get("environment", {}).items() if "$" not in str(v)}}
    local = ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL", "MOELAB_MEDIA_ROOT", "MOELAB_VAR_DIR")
    env.update({k: smoke_env[k] for k in local})
    worker = Started(command_of(service), env, tmp_path / f"{name}.log")
    try:
        worker.wait_for_output(r" ready\.")
        check = subprocess.run(
            healthcheck_argv(service, env), cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert "pong" in check.stdout
    finally:
        worker.stop()


@pytest.mark.slow
def test_the_beat_command_starts_and_writes_its_schedule(compose, smoke_env, tmp_path) -> None:
    argv = command_of(compose["services"]["beat"])
    schedule = tmp_path / "celerybeat-schedule"
    argv[argv.index("-s") + 1] = str(schedule)
    beat = Started(argv, smoke_env, tmp_path / "beat.log")
    try:
        beat.wait_for_output(r"beat: Starting")
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("celerybeat-schedule*")) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert list(tmp_path.glob("celerybeat-schedule*"))
    finally:
        beat.stop()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "policy"), [("redis", "noeviction"), ("cache", "allkeys-lru")])
def test_each_redis_command_starts_with_its_eviction_policy_and_passes_its_health_check(
    compose, tmp_path, name, policy
) -> None:
    service = compose["services"][name]
    port = str(free_port())
    # The image runs the command in its data folder on the default port; here, a free port and a temporary folder.
    redis = Started(
        [*command_of(service), "--port", port, "--dir", str(tmp_path)], dict(os.environ), tmp_path / "redis.log"
    )
    try:
        redis.wait_for_output(r"Ready to accept connections")
        cli, *args = healthcheck_argv(service, {})
        check = subprocess.run([cli, "-p", port, *args], capture_output=True, text=True, timeout=30)
        assert check.returncode == 0 and "PONG" in check.stdout, check.stdout + check.stderr
        config = subprocess.run(
            ["redis-cli", "-p", port, "config", "get", "maxmemory-policy"], capture_output=True, text=True, timeout=30
        )
        assert config.stdout.split() == ["maxmemory-policy", policy]
    finally:
        redis.stop()


def test_the_postgres_health_check_answers_for_a_running_server(compose, smoke_env) -> None:
    argv = healthcheck_argv(compose["services"]["postgres"], smoke_env)
    # Compose runs it inside the container; here, against the local server the tests use.
    check = subprocess.run([*argv, "-h", "127.0.0.1"], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
