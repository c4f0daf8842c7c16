"""``manage.py bench_platform --tier quick|full``: see :mod:`webapp.jobs.benchmark`."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bench.common import write_results
from webapp.jobs import benchmark


class Command(BaseCommand):
    help = "Measure dispatch latency, throughput and dashboard render time; write bench/results/platform.*"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tier", choices=sorted(benchmark.TIERS), default="quick")
        parser.add_argument("--results", type=Path, default=benchmark.ROOT / "bench" / "results")

    def handle(self, *args: Any, tier: str, results: Path, **options: Any) -> None:
        results.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="moelab-bench-") as logs:
            data = benchmark.run(tier, Path(logs))
        body = benchmark.markdown(data)
        write_results(results, "platform", body, data)
        self.stdout.write(body)
        self.stdout.write(json.dumps({"written": str(results / "platform.md")}))
