"""Charts on the web side: the Vega-Lite specs a job stored with ``ctx.chart``, their data and PNG
renderings (vl-convert, the same Vega-Lite major version as the browser's vega-embed), and the
comparison view's tables and overlaid series.

vl-convert is imported inside ``render_png`` only: the web process stays light until someone
downloads a PNG.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.http import Http404

from mlcore.charts import VEGA_LITE
from webapp.jobs.models import Job


def safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "chart"


def chart_list(job: Job) -> list[dict[str, Any]]:
    return [
        {"name": name, "spec": spec, "element_id": f"chart-{index}"}
        for index, (name, spec) in enumerate(sorted((job.charts or {}).items()))
    ]


def chart_spec(job: Job, name: str) -> dict[str, Any]:
    spec = (job.charts or {}).get(name)
    if not isinstance(spec, dict):
        raise Http404("No such chart.")
    return spec


def chart_data(spec: dict[str, Any]) -> list[Any] | dict[str, Any]:
    """The rows a chart draws: its inline ``data.values``, else its named ``datasets``."""
    data = spec.get("data")
    if isinstance(data, dict) and isinstance(data.get("values"), list):
        return data["values"]
    if isinstance(spec.get("datasets"), dict):
        return spec["datasets"]
    return []


def render_png(spec: dict[str, Any], *, scale: float = 2.0) -> bytes:
    import vl_convert

    return vl_convert.vegalite_to_png(vl_spec=spec, scale=scale)


def _differs(values: Sequence[Any]) -> bool:
    return len({repr(v) for v in values}) > 1


def _rows(names: list[str], per_job: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        values = [mapping.get(name) for mapping in per_job]
        rows.append({"name": name, "values": values, "differs": _differs(values)})
    return rows


def _label(job: Job) -> str:
    return f"{str(job.id)[:8]}"


def series_overlay(name: str, jobs: Sequence[Job]) -> dict[str, Any]:
    """One line per job for the series ``name`` (Vega-Lite, data inline)."""
    values = [
        {"job": _label(job), "step": point[0], "value": point[1]}
        for job in jobs
        for point in (job.metrics or {}).get("series", {}).get(name, [])
    ]
    return {
        "$schema": VEGA_LITE,
        "title": name,
        "data": {"values": values},
        "mark": {"type": "line", "point": len(values) <= 60},
        "encoding": {
            "x": {"field": "step", "type": "quantitative", "title": "Step"},
            "y": {"field": "value", "type": "quantitative", "title": name},
            "color": {"field": "job", "type": "nominal", "title": "Job"},
        },
    }


def comparison(jobs: Sequence[Job]) -> dict[str, Any]:
    """Parameters and scalar metrics side by side (``differs`` marks rows to highlight), and each
    series overlaid on one chart."""
    params = [job.params or {} for job in jobs]
    scalars = [(job.metrics or {}).get("scalars", {}) for job in jobs]
    series = sorted({name for job in jobs for name in (job.metrics or {}).get("series", {})})
    return {
        "param_rows": _rows(sorted({n for p in params for n in p}), params),
        "metric_rows": _rows(sorted({n for s in scalars for n in s}), scalars),
        "series_charts": [
            {"name": name, "spec": series_overlay(name, jobs), "element_id": f"series-{index}"}
            for index, name in enumerate(series)
        ],
        "labels": [_label(job) for job in jobs],
    }
