"""A job's scalars as a reader wants them: the kind's declared metrics with units, which direction is
better, a one-line description, the target the kind states, n and a 95 % interval where the job has
them, grouped by method or variant, and the comparison table the result page opens with (the
baseline first, then each variant with its difference from the baseline).

Reads only: built from the spec (``JobSpec.metrics``, ``JobSpec.comparison``) and the stored row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mlcore.charts import VEGA_LITE
from mlcore.jobs.spec import UNITS, Comparison, JobSpec, Metric

Z95 = 1.959964


def wilson(share: float, n: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion ``share`` of ``n`` items (stays inside [0, 1],
    unlike the normal approximation at small n)."""
    denominator = 1 + Z95**2 / n
    centre = (share + Z95**2 / (2 * n)) / denominator
    half = Z95 * math.sqrt(share * (1 - share) / n + Z95**2 / (4 * n * n)) / denominator
    # At 0 or n of n the bound is the end itself (rounding would leave 0.9999…).
    return (0.0 if share <= 0 else max(0.0, centre - half)), (1.0 if share >= 1 else min(1.0, centre + half))


def number(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant figures, thousands separated, never in e-notation."""
    if not math.isfinite(value):
        return "—"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= digits - 1:
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - magnitude)
    return f"{value:,.{min(decimals, 6)}f}"


def with_unit(text: str, unit: str) -> str:
    if not unit:
        return text
    return f"{text}{unit}" if unit in ("%", "×") else f"{text} {unit}"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class Reading:
    """One metric's value for one variant (or the job as a whole), ready to print."""

    metric: Metric
    variant: str
    name: str
    value: float
    text: str
    n: int | None = None
    interval: str = ""
    misses_target: bool = False
    beside: str = ""
    delta: str = ""
    delta_better: bool | None = None

    @property
    def unit(self) -> str:
        return self.metric.unit


@dataclass
class Row:
    variant: str
    baseline: bool
    cells: list[Reading | None]


@dataclass
class Table:
    """Rows of variants, one column per metric; ``baseline`` first when the kind names one."""

    metrics: list[Metric]
    rows: list[Row]
    baseline: str = ""
    chart: dict[str, Any] | None = None
    chart_name: str = ""


@dataclass
class Readout:
    headline: list[Reading] = field(default_factory=list)
    comparison: Table | None = None
    no_comparison: str = ""
    by_variant: Table | None = None
    other: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def declared(self) -> bool:
        return bool(self.headline or self.comparison or self.by_variant)


def reading(
    spec: JobSpec,
    metric: Metric,
    variant: str,
    name: str,
    value: float,
    params: dict[str, Any],
    scalars: dict[str, Any],
) -> Reading:
    shown = metric.shown(value)
    unit = UNITS[metric.unit][0]
    item = Reading(metric, variant, name, value, with_unit(number(shown, metric.digits), unit))
    item.n = metric.count(params, scalars)
    low = _finite(scalars.get(metric.scalar(metric.low, variant))) if metric.low else None
    high = _finite(scalars.get(metric.scalar(metric.high, variant))) if metric.high else None
    if low is None and high is None and metric.proportion and item.n and 0 <= value <= 1:
        low, high = wilson(value, item.n)
    if low is not None and high is not None:
        item.interval = f"{number(metric.shown(low), metric.digits)}–{number(metric.shown(high), metric.digits)}"
    item.misses_target = metric.misses_target(shown)
    if metric.beside:
        other = _finite(scalars.get(metric.scalar(metric.beside, variant)))
        if other is not None:
            declared = spec.metric_for(metric.scalar(metric.beside, variant))
            if declared is not None:
                beside = declared[0]
                item.beside = f"{beside.label.lower()} {with_unit(number(beside.shown(other)), beside.unit)}"
    return item


def _delta(item: Reading, base: Reading) -> None:
    metric = item.metric
    difference = metric.shown(item.value) - metric.shown(base.value)
    unit = "pp" if metric.unit == "%" else UNITS[metric.unit][0]
    text = with_unit(("+" if difference > 0 else "") + number(difference, metric.digits), unit)
    # A relative change reads well for sizes and times; for a share the points difference says it.
    if metric.unit != "%" and base.value:
        text += f" ({difference / metric.shown(base.value):+.0%})"
    item.delta = text.replace("-", "−")
    if difference == 0 or metric.better is None:
        item.delta_better = None
    else:
        item.delta_better = (difference > 0) == (metric.better == "higher")


def _variant_order(variants: list[str], baseline: str) -> list[str]:
    ordered = list(dict.fromkeys(variants))
    if baseline in ordered:
        ordered.remove(baseline)
        ordered.insert(0, baseline)
    return ordered


def _table(
    metrics: list[Metric],
    found: dict[tuple[str, str], Reading],
    variants: list[str],
    baseline: str,
) -> Table | None:
    columns = [m for m in metrics if any((m.key, v) in found for v in variants)]
    if not columns or not variants:
        return None
    rows = []
    for variant in _variant_order(variants, baseline):
        cells: list[Reading | None] = []
        for metric in columns:
            item = found.get((metric.key, variant))
            base = found.get((metric.key, baseline))
            if item is not None and base is not None and variant != baseline:
                _delta(item, base)
            cells.append(item)
        rows.append(Row(variant, variant == baseline, cells))
    return Table(columns, rows, baseline if baseline in variants else "")


def comparison_chart(table: Table, title: str) -> dict[str, Any] | None:
    """Bars of the table's first metric per variant, the baseline in grey (a chart of the comparison
    for kinds that draw none of their own)."""
    metric = table.metrics[0]
    rows = []
    for row in table.rows:
        cell = row.cells[0]
        if cell is None:
            continue
        role = "baseline" if row.baseline else "method"
        rows.append({"variant": row.variant, "value": metric.shown(cell.value), "role": role})
    if len(rows) < 2:
        return None
    unit = f" ({metric.unit})" if metric.unit else ""
    arrow = {"higher": ", higher is better", "lower": ", lower is better"}.get(metric.better or "", "")
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "mark": "bar",
        "encoding": {
            "y": {"field": "variant", "type": "nominal", "sort": None, "title": None},
            "x": {"field": "value", "type": "quantitative", "title": f"{metric.label}{unit}{arrow}"},
            "color": {
                "field": "role",
                "type": "nominal",
                "title": None,
                "scale": {"domain": ["baseline", "method"], "range": ["#8a8f98", "#3b6fd8"]},
            },
            "tooltip": [{"field": "variant"}, {"field": "value", "format": ".4~g"}],
        },
    }


def build(spec: JobSpec | None, scalars: dict[str, Any], params: dict[str, Any], charts: dict[str, Any]) -> Readout:
    """The readout of a job of ``spec`` from its recorded ``scalars``; every scalar no metric
    declares lands in ``other`` (shown under the tables, never dropped)."""
    out = Readout()
    if spec is None or not spec.metrics:
        out.other = sorted(scalars.items())
        return out
    found: dict[tuple[str, str], Reading] = {}
    variants: list[str] = []
    claimed: set[str] = set()
    for name, raw in scalars.items():
        match = spec.metric_for(name)
        value = _finite(raw)
        if match is None or value is None:
            continue
        metric, variant = match
        claimed.add(name)
        found[(metric.key, variant)] = reading(spec, metric, variant, name, value, params, scalars)
        if variant:
            variants.append(variant)
    # Flat metrics in the spec's order: the headline.
    out.headline = [found[(m.key, "")] for m in spec.metrics if (m.key, "") in found]
    comparison: Comparison | None = spec.comparison
    per_variant = [m for m in spec.metrics if "{variant}" in m.key]
    if comparison is not None and comparison.exists:
        chosen = [m for m in per_variant if m.key in comparison.metrics]
        chosen.sort(key=lambda m: comparison.metrics.index(m.key))
        out.comparison = _table(chosen, found, variants, comparison.baseline)
        if out.comparison is not None:
            if comparison.chart and comparison.chart in charts:
                out.comparison.chart_name = comparison.chart
            else:
                out.comparison.chart = comparison_chart(out.comparison, f"{spec.title}: {chosen[0].label} per variant")
        rest = [m for m in per_variant if m.key not in comparison.metrics]
        out.by_variant = _table(rest, found, variants, comparison.baseline)
    else:
        if comparison is not None:
            out.no_comparison = comparison.reason
        out.by_variant = _table(per_variant, found, variants, "")
    out.other = sorted((k, v) for k, v in scalars.items() if k not in claimed)
    return out


def key_result(spec: JobSpec | None, scalars: dict[str, Any], params: dict[str, Any]) -> str:
    """One short figure for the jobs table: the best variant's first compared metric with its
    difference from the baseline, else the kind's first declared metric; "" if none was recorded."""
    if spec is None or not scalars:
        return ""
    found = build(spec, scalars, params, {})
    table = found.comparison
    if table is not None:
        metric = table.metrics[0]
        candidates = [(row.variant, row.cells[0]) for row in table.rows if not row.baseline and row.cells[0]]
        if candidates:
            sign = -1 if metric.better == "lower" else 1
            variant, best = max(candidates, key=lambda pair: sign * pair[1].value)
            delta = f" ({best.delta})" if best.delta else ""
            return f"{variant}: {metric.label.lower()} {best.text}{delta}"
    if found.headline:
        first = found.headline[0]
        return f"{first.metric.label}: {first.text}"
    return ""
