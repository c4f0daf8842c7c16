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
from mlcore.jobs.spec import JobSpec
from webapp.jobs.models import Job
from webapp.jobs.readout import Readout
from webapp.jobs.selectors import artifacts_of


def safe_filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "chart"


def chart_list(job: Job, *, leave_out: str = "") -> list[dict[str, Any]]:
    """The job's charts in name order; ``leave_out`` names one already shown at the top of the page
    (the comparison's), so no chart appears twice."""
    return [
        {"name": name, "spec": spec, "element_id": f"chart-{index}"}
        for index, (name, spec) in enumerate(sorted((job.charts or {}).items()))
        if name != leave_out
    ]


def comparison_chart(job: Job, found: Readout) -> dict[str, Any] | None:
    """The chart beside the comparison table: the one the kind names, else bars built from the table."""
    table = found.comparison
    if table is None:
        return None
    if table.chart_name and isinstance((job.charts or {}).get(table.chart_name), dict):
        return {
            "name": table.chart_name,
            "spec": job.charts[table.chart_name],
            "element_id": "chart-comparison",
            "stored": True,
        }
    if table.chart is not None:
        return {"name": "comparison", "spec": table.chart, "element_id": "chart-comparison", "stored": False}
    return None


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


#: Declared metrics drawn as bars per job on the compare page (the first ones the kind declares).
COMPARED_METRICS = 6


def metric_bars(jobs: Sequence[Job], spec: JobSpec | None) -> list[dict[str, Any]]:
    """One bar chart per declared metric the jobs recorded (a bar per job, or per job and variant),
    so kinds that record scalars only (no series) still get overlaid charts on the compare page."""
    if spec is None:
        return []
    found = []
    for metric in spec.metrics:
        rows = []
        for job in jobs:
            for name, value in ((job.metrics or {}).get("scalars") or {}).items():
                variant = metric.match(name)
                if variant is None or isinstance(value, bool) or not isinstance(value, int | float):
                    continue
                rows.append({"job": _label(job), "variant": variant or "—", "value": metric.shown(float(value))})
        if len({row["job"] for row in rows}) < 2:
            continue
        unit = f" ({metric.unit})" if metric.unit else ""
        encoding: dict[str, Any] = {
            "y": {"field": "value", "type": "quantitative", "title": f"{metric.label}{unit}"},
            "color": {"field": "job", "type": "nominal", "title": "Job"},
            "tooltip": [{"field": "job"}, {"field": "variant"}, {"field": "value", "format": ".4~g"}],
        }
        if any(row["variant"] != "—" for row in rows):
            encoding["x"] = {"field": "variant", "type": "nominal", "title": None, "sort": None}
            encoding["xOffset"] = {"field": "job"}
        else:
            encoding["x"] = {"field": "job", "type": "nominal", "title": "Job"}
        found.append(
            {
                "$schema": VEGA_LITE,
                "title": metric.label,
                "description": metric.description,
                "data": {"values": rows},
                "mark": "bar",
                "encoding": encoding,
            }
        )
        if len(found) == COMPARED_METRICS:
            break
    return found


MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "video/mp4", "application/x-ply")


def media_rows(jobs: Sequence[Job]) -> list[dict[str, Any]]:
    """Artifacts to look at side by side: per artifact name, each job's image, video or point cloud,
    from the job's latest attempt (what its own page shows; an earlier attempt's file stays in storage)."""
    per_job = [{a.name: a for a in artifacts_of(job) if a.media_type in MEDIA_TYPES} for job in jobs]
    names = sorted({name for found in per_job for name in found})
    return [
        {"name": name, "cells": [(job, found.get(name)) for job, found in zip(jobs, per_job, strict=True)]}
        for name in names
    ]


def comparison(jobs: Sequence[Job], spec: JobSpec | None = None) -> dict[str, Any]:
    """Parameters and scalar metrics side by side (``differs`` marks rows to highlight), each
    series overlaid on one chart, each declared metric as bars per job, and the media side by side."""
    params = [job.params or {} for job in jobs]
    scalars = [(job.metrics or {}).get("scalars", {}) for job in jobs]
    series = sorted({name for job in jobs for name in (job.metrics or {}).get("series", {})})
    return {
        "metric_charts": [
            {"name": chart["title"], "spec": chart, "element_id": f"metric-{index}"}
            for index, chart in enumerate(metric_bars(jobs, spec))
        ],
        "media_rows": media_rows(jobs),
        "param_rows": _rows(sorted({n for p in params for n in p}), params),
        "metric_rows": _rows(sorted({n for s in scalars for n in s}), scalars),
        "series_charts": [
            {"name": name, "spec": series_overlay(name, jobs), "element_id": f"series-{index}"}
            for index, name in enumerate(series)
        ],
        "labels": [_label(job) for job in jobs],
    }
