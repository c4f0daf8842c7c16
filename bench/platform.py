"""The platform benchmark (``make bench-platform``): dispatch latency, throughput and dashboard
render time, measured against real PostgreSQL, Redis and Celery workers started here.

It needs Django set up before it is imported: ``python -m bench platform --tier quick|full`` does
that (``bench/__main__.py``), and ``scripts/bench.sh`` runs it on a database of its own after
migrating it.

Dispatch latency is submit → RUNNING as the worker records it (``started_at``), for sequential
submissions to an idle worker: a reused child, and a GPU worker started exactly as
docker-compose.yml's ``worker-gpu`` (its command and its own environment, on the CPU) against the
previous GPU configuration (billiard's fresh child per job, ``--max-tasks-per-child 1``), in the
same run. Throughput is no-op jobs (the test kind, one step) drained per
minute by 1 and 2 workers. Dashboard render time is the team dashboard through Django's test
client with 100 and with 10,000 jobs of the team in the database.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from webapp.accounts.models import Membership, Role, Team
from webapp.jobs.models import Job, WorkerStatus
from webapp.jobs.services import job_submit

ROOT = Path(__file__).resolve().parents[1]
TIERS = {
    "quick": {"dispatch": 50, "fresh_child_dispatch": 10, "throughput": 60, "renders": 10},
    "full": {"dispatch": 200, "fresh_child_dispatch": 50, "throughput": 300, "renders": 30},
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


class Workers:
    """Celery workers as subprocesses, on all three queues like ``make run`` starts one unless told."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *options: str, queues: str = "gpu,cpu,verify") -> None:
        argv = [str(Path(sys.executable).parent / "celery"), "-A", "webapp", "worker", "-Q", queues]
        argv += ["-c", "1", "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "-l", "warning", *options]
        self._start(name, argv, {})

    def start_command(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        """A worker started with ``argv`` as it stands (docker-compose's command), under ``name``."""
        argv = [str(Path(sys.executable).parent / "celery"), *argv[1:]]
        argv[argv.index("-n") + 1] = f"{name}@%h"
        self._start(name, argv, env)

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        out = (self.log_dir / f"{name}.log").open("wb")
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**os.environ, "MOELAB_DEVICE": "cpu", **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        # A GPU worker imports torch and every kind before it reports: minutes on a loaded machine.
        deadline = time.monotonic() + 300
        while not WorkerStatus.objects.filter(hostname__startswith=f"{name}@").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start; see {self.log_dir / f'{name}.log'}")
            time.sleep(0.2)

    def stop(self) -> None:
        processes, self.processes = self.processes, []
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def wait_terminal(job_ids: list[uuid.UUID], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while Job.objects.filter(pk__in=job_ids).exclude(status__in=Job.TERMINAL).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("jobs did not finish in time; are the workers running?")
        time.sleep(0.02)


def gpu_worker() -> tuple[list[str], dict[str, str]]:
    """docker-compose.yml's ``worker-gpu``: its command, and the environment it sets beyond what
    every service shares (servers, secrets: those stay this benchmark's)."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service, shared = compose["services"]["worker-gpu"], compose["x-app"]["environment"]
    env = {name: str(value) for name, value in service["environment"].items() if name not in shared}
    return list(service["command"]), env


#: The GPU workers' configuration before workers/forked.py: billiard replaced the child after
#: every job, and each new child imported torch and the job machinery again.
BILLIARD_FRESH_CHILD = {
    "argv": ["--max-tasks-per-child", "1"],
    "env": {"MOELAB_FRESH_PROCESS_PER_JOB": "false", "MOELAB_WORKER_PRELOAD": ""},
}


def submit_to(queue: str, team: Team, user: User) -> Job:
    """A one-step test job on ``queue`` (the test kind's own queue is cpu), enqueued as submit does."""
    from mlcore.jobs.registry import get_kind
    from webapp.jobs.queue import enqueue_on_commit

    params = get_kind("test-exercise").spec.clean({"steps": 1})
    with transaction.atomic():
        job = Job.objects.create(team=team, submitted_by=user, kind="test-exercise", queue=queue, params=params)
        enqueue_on_commit(job)
    return job


def dispatch_latency(team: Team, user: User, n: int, *, queue: str | None = None) -> dict[str, Any]:
    latencies = []
    for _ in range(n):
        submitted = timezone.now()
        if queue is None:
            job = job_submit(team=team, user=user, kind="test-exercise", raw_params={"steps": 1})
        else:
            job = submit_to(queue, team, user)
        wait_terminal([job.pk], timeout=60)
        job.refresh_from_db()
        if job.status != Job.Status.SUCCEEDED:
            raise RuntimeError(f"bench job failed: {job.error}")
        latencies.append((job.started_at - submitted).total_seconds())
    return {
        "n": n,
        "median_s": statistics.median(latencies),
        "p95_s": percentile(latencies, 0.95),
        "max_s": max(latencies),
    }


def throughput(team: Team, user: User, n: int) -> dict[str, Any]:
    start = time.perf_counter()
    ids = [job_submit(team=team, user=user, kind="test-exercise", raw_params={"steps": 1}).pk for _ in range(n)]
    wait_terminal(ids)
    seconds = time.perf_counter() - start
    failed = Job.objects.filter(pk__in=ids).exclude(status=Job.Status.SUCCEEDED).count()
    return {"n": n, "seconds": seconds, "jobs_per_minute": 60 * n / seconds, "failed": failed}


def fill(team: Team, user: User, n: int, *, series_points: int = 200) -> None:
    """``n`` finished jobs of the team, with realistic metrics (a loss curve of ``series_points``
    points) and log tails, inserted in bulk."""
    now = timezone.now()
    statuses = [Job.Status.SUCCEEDED, Job.Status.FAILED, Job.Status.CANCELLED, Job.Status.SUCCEEDED]
    metrics = {"scalars": {"final_loss": 0.1}, "series": {"loss": [[i, 1 / (i + 1)] for i in range(series_points)]}}
    batch: list[Job] = []
    for i in range(n):
        created = now - timedelta(minutes=i + 1)
        batch.append(
            Job(
                team=team,
                submitted_by=user,
                kind="test-exercise",
                queue="cpu",
                params={"steps": 200, "seed": i},
                status=statuses[i % len(statuses)],
                progress=1.0,
                stage="done",
                started_at=created,
                finished_at=created + timedelta(seconds=30),
                metrics=metrics,
                log_tail="step 199: loss 0.0050\n" * 50,
            )
        )
        if len(batch) == 2000:
            Job.objects.bulk_create(batch)
            batch = []
    Job.objects.bulk_create(batch)
    # created_at is auto_now_add: spread it out so the newest-first page is a real index scan.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job SET created_at = finished_at - interval '30 seconds' WHERE team_id = %s", [team.pk]
        )
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Leave the table as autovacuum leaves a settled one: fresh statistics and the
            # visibility map set (index-only scans need it). VACUUM cannot run inside a
            # transaction, as in the tests, where ANALYZE alone has to do.
            cursor.execute("ANALYZE jobs_job" if connection.in_atomic_block else "VACUUM ANALYZE jobs_job")


def dashboard_render(team: Team, user: User, renders: int) -> dict[str, Any]:
    client = Client()
    client.force_login(user)
    url = reverse("dashboard:index", args=[team.slug])
    response = client.get(url)  # warm-up (templates, caches)
    if response.status_code != 200:
        raise RuntimeError(f"GET {url} answered {response.status_code}")
    times = []
    for _ in range(renders):
        start = time.perf_counter()
        client.get(url)
        times.append(time.perf_counter() - start)
    with CaptureQueriesContext(connection) as queries:
        client.get(url)
    return {
        "jobs": Job.objects.filter(team=team).count(),
        "median_s": statistics.median(times),
        "queries": len(queries),
    }


def make_team(slug: str, user: User) -> Team:
    Team.objects.filter(slug=slug).delete()
    team = Team.objects.create(name=slug, slug=slug)
    Membership.objects.create(team=team, user=user, role=Role.OWNER)
    return team


def measure(tier: str, log_dir: Path) -> dict[str, Any]:
    sizes = TIERS[tier]
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        raise RuntimeError("the platform benchmark needs CELERY_BROKER_URL=redis://... (scripts/bench.sh sets it)")
    user, _ = User.objects.get_or_create(username="bench")
    WorkerStatus.objects.all().delete()
    workers = Workers(log_dir)
    results: dict[str, Any] = {"tier": tier, "database": connection.vendor, "broker": "redis"}
    try:
        # GPU workers first, before and after, each started alone as docker-compose starts one.
        argv, env = gpu_worker()
        team = make_team("bench-fresh", user)
        workers.start_command("billiard", argv + BILLIARD_FRESH_CHILD["argv"], env | BILLIARD_FRESH_CHILD["env"])
        results["dispatch_fresh_child_billiard"] = dispatch_latency(
            team, user, sizes["fresh_child_dispatch"], queue="gpu"
        )
        workers.stop()
        workers.start_command("gpu", argv, env)
        results["gpu_worker"] = {"command": " ".join(argv), "environment": env}
        results["dispatch_fresh_child"] = dispatch_latency(team, user, sizes["fresh_child_dispatch"], queue="gpu")
        workers.stop()
        workers.start("bench1")
        team = make_team("bench-dispatch", user)
        job_submit(team=team, user=user, kind="test-exercise", raw_params={"steps": 1})  # warm the worker
        time.sleep(2)
        results["dispatch"] = dispatch_latency(team, user, sizes["dispatch"])
        results["throughput_1_worker"] = throughput(make_team("bench-tp1", user), user, sizes["throughput"])
        workers.start("bench2")
        results["throughput_2_workers"] = throughput(make_team("bench-tp2", user), user, sizes["throughput"])
    finally:
        workers.stop()
    small, large = make_team("bench-100", user), make_team("bench-10000", user)
    fill(small, user, 100)
    fill(large, user, 10_000)
    results["dashboard_100"] = dashboard_render(small, user, sizes["renders"])
    results["dashboard_10000"] = dashboard_render(large, user, sizes["renders"])
    results["dashboard_ratio"] = results["dashboard_10000"]["median_s"] / results["dashboard_100"]["median_s"]
    for slug in ("bench-fresh", "bench-dispatch", "bench-tp1", "bench-tp2", "bench-100", "bench-10000"):
        Team.objects.filter(slug=slug).delete()
    return results


def markdown(results: dict[str, Any]) -> str:
    f, before = results["dispatch_fresh_child"], results.get("dispatch_fresh_child_billiard")
    d, t1, t2 = results["dispatch"], results["throughput_1_worker"], results["throughput_2_workers"]
    small, large = results["dashboard_100"], results["dashboard_10000"]
    ok = lambda good: "met" if good else "**missed**"  # noqa: E731

    def render_row(r: dict[str, Any]) -> str:
        return f"| dashboard render, {r['jobs']} jobs | {r['median_s'] * 1000:.1f} ms ({r['queries']} queries) |"

    return "\n".join(
        [
            f"# Platform benchmark ({results['tier']} tier; {results['database']} + {results['broker']})",
            "",
            "| measure | value | goal |",
            "|---|---|---|",
            f"| dispatch latency submit → RUNNING, median ({d['n']} sequential) | {d['median_s'] * 1000:.0f} ms | |",
            f"| dispatch latency, p95 | {d['p95_s'] * 1000:.0f} ms | p95 < 1 s: {ok(d['p95_s'] < 1)} |",
            f"| dispatch latency, GPU worker (a fresh process per job), median / p95 ({f['n']}) "
            f"| {f['median_s'] * 1000:.0f} / {f['p95_s'] * 1000:.0f} ms | p95 < 1 s: {ok(f['p95_s'] < 1)} |",
            *(
                [
                    f"| the same with billiard's fresh child per job (the previous GPU worker), median / p95 "
                    f"({before['n']}) | {before['median_s'] * 1000:.0f} / {before['p95_s'] * 1000:.0f} ms | |"
                ]
                if before
                else []
            ),
            f"| throughput, 1 worker ({t1['n']} no-op jobs) | {t1['jobs_per_minute']:.0f} jobs/min | |",
            f"| throughput, 2 workers ({t2['n']} no-op jobs) | {t2['jobs_per_minute']:.0f} jobs/min | |",
            render_row(small) + " |",
            render_row(large)
            + f" ≤ 1.5x: {ok(results['dashboard_ratio'] <= 1.5)} ({results['dashboard_ratio']:.2f}x) |",
            "",
            "Workers: prefork with one child each, early ack, prefetch 1, on all three queues, children",
            "reused; except the GPU rows, whose worker is started with docker-compose.yml's worker-gpu command",
            "and environment (on the CPU, jobs sent to its gpu queue). It keeps its pool child and forks a",
            "fresh process for each job from it, with torch and the kinds imported before the fork",
            "(workers/forked.py, workers/preload.py). The previous configuration, measured in the same run,",
            "had billiard replace the child after every job: its parent hands the next job to the child",
            "that is about to exit and finds it again only on its 5 s maintenance timer.",
            "No-op job = the test kind with one step; its time includes the claim, provenance",
            "(a `git` call), the ctx's final flush and the log upload.",
            "Dashboard: the jobs carry 200-point loss curves and log tails; the table is vacuumed after",
            "the bulk insert, as autovacuum leaves a settled one, so the per-status counters (COUNT(*)) come",
            "from the (team, status) index alone and the newest-first page from the (team, created) index.",
        ]
    )


def run(tier: str, results: Path) -> None:
    """Measure ``tier`` (worker logs in a scratch folder) and write ``results/platform.md`` and ``.json``."""
    from bench.common import write_results

    with tempfile.TemporaryDirectory(prefix="moelab-bench-") as logs:
        data = measure(tier, Path(logs))
    body = markdown(data)
    write_results(results, "platform", body, data)
    print(body)
