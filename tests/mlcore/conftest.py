"""Every chart spec a job kind records in these tests (``ctx.chart``) is also written to
``test-artifacts/chart-specs/``, one file per test and chart name (the last version of a live
chart), so the browser test ``tests/e2e/test_charts_draw.py`` draws exactly what the kinds' sample
runs produce."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mlcore.jobs.context import JobContext

CHART_SPECS = Path(__file__).resolve().parents[2] / "test-artifacts" / "chart-specs"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:120]


@pytest.fixture(autouse=True)
def keep_chart_specs(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    original = JobContext.chart
    test = _safe(request.node.nodeid.split("::", 1)[-1])
    module = _safe(Path(str(request.node.path)).stem)

    def chart(self: JobContext, name: str, spec: dict[str, Any]) -> None:
        original(self, name, spec)
        CHART_SPECS.mkdir(parents=True, exist_ok=True)
        (CHART_SPECS / f"{module}--{test}--{_safe(name)}.json").write_text(json.dumps(spec))

    monkeypatch.setattr(JobContext, "chart", chart)
    yield
