"""Vega-Lite chart specs shared by the job kinds, the reports and the web (``ctx.chart``): every chart
has a title, axis titles and units. Plain dicts, no plotting library, so job specs can import it in
the web process. One major version everywhere: the browser's vega-lite, vl-convert's PNGs, altair."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

VEGA_LITE = "https://vega.github.io/schema/vega-lite/v6.json"

# How a discrete axis orders its categories: Vega-Lite's ascending default, the rows' own order, or
# an explicit list (a kind's fixed split or motif order, whatever order its rows arrive in).
Order = Literal["ascending", "rows"] | Sequence[str]


#: One colour per fate of an expert under compression, the same in every chart that shows fates
#: (pruned maps of every method, reports, the web): "kept" is blue wherever it appears, whichever
#: fates a given map happens to hold. Distinguishable in light and dark mode and without hue
#: (lightness differs between neighbours).
EXPERT_FATES: dict[str, str] = {
    "kept": "#2f6fdb",
    "kept (merged)": "#6a3fc4",
    "novice": "#e69f00",
    "merged away": "#c3aef0",
    "deleted": "#9aa0a8",
}


def fate_scale() -> dict[str, Any]:
    """The Vega-Lite colour scale of :data:`EXPERT_FATES` (domain and range fixed)."""
    return {"domain": list(EXPERT_FATES), "range": list(EXPERT_FATES.values())}


#: One colour per watermark verdict, in every chart that shows verdicts. "not detected" is a
#: neutral grey, not a warning: finding no mark is an answer, not an error.
VERDICTS: dict[str, str] = {
    "detected": "#2f6fdb",
    "inconclusive": "#e69f00",
    "not detected": "#9aa0a8",
}


def verdict_scale() -> dict[str, Any]:
    """The Vega-Lite colour scale of :data:`VERDICTS` (domain and range fixed)."""
    return {"domain": list(VERDICTS), "range": list(VERDICTS.values())}


#: The dash pattern of each threshold rule in turn (:func:`with_rules`), told apart in the legend.
RULE_DASHES: tuple[list[int], ...] = ([6, 3], [2, 2], [8, 3, 2, 3], [1, 3])


def integer_ticks(low: int, high: int, *, most: int = 10) -> list[int]:
    """Whole-number ticks a 1, 2 or 5 × 10ⁿ step apart from ``low`` up to the first at or past ``high``,
    at most ``most`` steps. Vega's own ticks (even with ``tickMinStep``) put one at 0.5 on an axis
    from 0 to 1, which a count cannot be; so axes of counts list their ticks."""
    span = max(high - low, 1)
    step = next(m * 10**e for e in range(19) for m in (1, 2, 5) if span / (m * 10**e) <= most)
    first, last = math.floor(low / step) * step, math.ceil(high / step) * step
    return list(range(first, max(last, first + step) + 1, step))


def _sorted(encoding: dict[str, Any], order: Order) -> dict[str, Any]:
    if isinstance(order, str):
        if order == "rows":
            encoding["sort"] = None
        elif order != "ascending":
            raise ValueError(f"order must be 'ascending', 'rows' or a list of categories, not {order!r}")
    else:
        encoding["sort"] = list(order)
    return encoding


def _field_title(field: str) -> str:
    return field.replace("_", " ").capitalize()


def line_chart(
    title: str,
    rows: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    color: str,
    x_title: str,
    y_title: str,
    x_log: bool = False,
    band: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """Lines of ``y`` over ``x``, one per ``color`` value, with an optional CI band (low, high fields)."""
    x_enc: dict[str, Any] = {"field": x, "type": "quantitative", "title": x_title}
    if x_log:
        x_enc["scale"] = {"type": "log"}
    color_enc = {"field": color, "type": "nominal", "title": _field_title(color)}
    layers: list[dict[str, Any]] = [
        {
            "mark": {"type": "line", "point": True},
            "encoding": {
                "x": x_enc,
                "y": {"field": y, "type": "quantitative", "title": y_title},
                "color": color_enc,
                "tooltip": [{"field": f} for f in (color, x, y)],
            },
        }
    ]
    if band is not None:
        layers.insert(
            0,
            {
                "mark": {"type": "area", "opacity": 0.2},
                "encoding": {
                    "x": x_enc,
                    "y": {"field": band[0], "type": "quantitative", "title": y_title},
                    "y2": {"field": band[1]},
                    "color": color_enc,
                },
            },
        )
    return {"$schema": VEGA_LITE, "title": title, "data": {"values": rows}, "layer": layers}


def heatmap(
    title: str,
    rows: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    value: str,
    x_title: str,
    y_title: str,
    value_title: str,
    scheme: str | None = "viridis",
    value_type: Literal["quantitative", "nominal"] = "quantitative",
    value_domain: tuple[float, float] | None = None,
    value_format: str | None = None,
    x_order: Order = "ascending",
    y_order: Order = "ascending",
    value_colors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A grid of cells (``x`` by ``y``) coloured by ``value``. ``scheme=None`` keeps Vega-Lite's own
    palette (a nominal ``value`` such as an expert's fate needs categorical colours, not a ramp);
    ``value_domain`` pins the colour scale (a weight in [0, 1]) so jobs compare by colour;
    ``value_format`` is the tooltip's d3 number format for the value; ``value_colors`` fixes a
    colour per nominal value (an expert's fate: :data:`EXPERT_FATES`)."""
    scale: dict[str, Any] = {}
    if value_colors is not None:
        scale = {"domain": list(value_colors), "range": list(value_colors.values())}
    elif value_domain is not None:
        scale["domain"] = list(value_domain)
    if scheme is not None and value_colors is None:
        scale["scheme"] = scheme
    color: dict[str, Any] = {"field": value, "type": value_type, "title": value_title}
    if scale:
        color["scale"] = scale
    value_tip: dict[str, Any] = {"field": value}
    if value_format is not None:
        value_tip |= {"type": value_type, "format": value_format}
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "mark": "rect",
        "encoding": {
            "x": _sorted({"field": x, "type": "ordinal", "title": x_title}, x_order),
            "y": _sorted({"field": y, "type": "ordinal", "title": y_title}, y_order),
            "color": color,
            "tooltip": [{"field": y}, {"field": x}, value_tip],
        },
    }


def scatter(
    title: str, rows: list[dict[str, Any]], *, x: str, y: str, label: str, x_title: str, y_title: str
) -> dict[str, Any]:
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "mark": {"type": "point", "filled": True, "size": 80},
        "encoding": {
            "x": {"field": x, "type": "quantitative", "title": x_title, "scale": {"zero": False}},
            "y": {"field": y, "type": "quantitative", "title": y_title, "scale": {"zero": False}},
            "color": {"field": label, "type": "nominal", "title": label.capitalize()},
            "tooltip": [{"field": f} for f in (label, x, y)],
        },
    }


def lines(
    title: str,
    rows: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    x_title: str,
    y_title: str,
    color: str | None = None,
    color_title: str | None = None,
    points: bool = False,
    y_zero: bool = True,
) -> dict[str, Any]:
    """Plain lines of ``y`` over a quantitative ``x``, one per ``color`` value if given (legend
    titled ``color_title``; None leaves it untitled). ``points`` marks each row; ``y_zero=False``
    lets the y axis start near the data (an accuracy that moves between 0.9 and 0.95)."""
    y_enc: dict[str, Any] = {"field": y, "type": "quantitative", "title": y_title}
    if not y_zero:
        y_enc["scale"] = {"zero": False}
    encoding: dict[str, Any] = {"x": {"field": x, "type": "quantitative", "title": x_title}, "y": y_enc}
    if color:
        encoding["color"] = {"field": color, "type": "nominal", "title": color_title}
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "mark": {"type": "line", "point": True} if points else "line",
        "encoding": encoding,
    }


def step_lines(
    title: str,
    rows: list[dict[str, Any]],
    y: str,
    y_title: str,
    color: str | None = None,
    *,
    x_title: str = "Step",
) -> dict[str, Any]:
    """A training curve: ``y`` over the ``step`` field, one line per ``color`` value if given."""
    color_title = _field_title(color) if color else None
    return lines(title, rows, x="step", y=y, x_title=x_title, y_title=y_title, color=color, color_title=color_title)


def bar_chart(
    title: str,
    rows: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    x_title: str | None,
    y_title: str,
    x_type: str = "nominal",
    keep_order: bool = True,
    x_domain: tuple[float, float] | None = None,
    color: str | None = None,
    color_title: str | None = None,
    color_domain: Sequence[str] | None = None,
    legend: bool = True,
    normalize: bool = False,
) -> dict[str, Any]:
    """Bars of ``y`` per ``x``; ``keep_order`` keeps the rows' order on the x axis instead of sorting.

    With ``color`` the bars of one ``x`` stack by that field (``normalize`` stacks them to 100 %);
    colouring by ``x`` itself with ``legend=False`` tells categories apart without a redundant legend.
    ``color_domain`` fixes which colour each category gets whichever of them a job saw. A None
    title leaves that axis or legend untitled."""
    x_enc: dict[str, Any] = {"field": x, "type": x_type, "title": x_title}
    if keep_order:
        x_enc["sort"] = None
    if x_domain is not None:
        x_enc["scale"] = {"domain": list(x_domain)}
    y_enc: dict[str, Any] = {"field": y, "type": "quantitative", "title": y_title}
    if normalize:
        y_enc["stack"] = "normalize"
    encoding: dict[str, Any] = {"x": x_enc, "y": y_enc}
    if color is not None:
        color_enc: dict[str, Any] = {"field": color, "type": "nominal"}
        if legend:
            color_enc["title"] = color_title
        else:
            color_enc["legend"] = None
        if color_domain is not None:
            color_enc["scale"] = {"domain": list(color_domain)}
        encoding["color"] = color_enc
    return {"$schema": VEGA_LITE, "title": title, "data": {"values": rows}, "mark": "bar", "encoding": encoding}


def grouped_bar_chart(
    title: str,
    rows: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    group: str,
    x_title: str | None,
    y_title: str,
    group_title: str | None,
    x_order: Order = "ascending",
    y_domain: tuple[float, float] | None = None,
    reference: str | None = None,
) -> dict[str, Any]:
    """Bars of ``y`` per ``x``, one bar per ``group`` value side by side and coloured by it.

    ``reference`` names a field drawn as a dashed black tick across each ``x`` (a ceiling the bars
    can reach, such as the accuracy label noise allows); the chart is then a layer of the two."""
    x_enc = _sorted({"field": x, "type": "nominal", "title": x_title}, x_order)
    y_enc: dict[str, Any] = {"field": y, "type": "quantitative", "title": y_title}
    if y_domain is not None:
        y_enc["scale"] = {"domain": list(y_domain)}
    bars = {
        "x": x_enc,
        "xOffset": {"field": group},
        "y": y_enc,
        "color": {"field": group, "type": "nominal", "title": group_title},
    }
    head = {"$schema": VEGA_LITE, "title": title, "data": {"values": rows}}
    if reference is None:
        return head | {"mark": "bar", "encoding": bars}
    # The tick has no xOffset: it spans the whole group of bars of its x.
    tick_x = _sorted({"field": x, "type": "nominal"}, x_order)
    return head | {
        "layer": [
            {"mark": "bar", "encoding": bars},
            {
                "mark": {"type": "tick", "color": "black", "strokeDash": [4, 2], "thickness": 2},
                "encoding": {"x": tick_x, "y": {"field": reference, "type": "quantitative"}},
            },
        ]
    }


def error_bar_chart(
    title: str,
    rows: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    low: str,
    high: str,
    x_title: str | None,
    y_title: str,
    group: str | None = None,
    group_title: str | None = None,
    x_order: Order = "ascending",
    y_domain: tuple[float, float] | None = None,
    bar_width: int | None = None,
) -> dict[str, Any]:
    """Bars of ``y`` per ``x`` with a rule from ``low`` to ``high`` on each (a confidence interval);
    with ``group``, one bar and rule per group value side by side, coloured by it. ``bar_width``
    fixes each bar's width in pixels (the chart grows with the categories instead of squeezing)."""
    shared: dict[str, Any] = {"x": _sorted({"field": x, "type": "nominal", "title": x_title}, x_order)}
    if group is not None:
        shared["xOffset"] = {"field": group}
        shared["color"] = {"field": group, "type": "nominal", "title": group_title}
    y_enc: dict[str, Any] = {"field": y, "type": "quantitative", "title": y_title}
    if y_domain is not None:
        y_enc["scale"] = {"domain": list(y_domain)}
    spec: dict[str, Any] = {"$schema": VEGA_LITE, "title": title, "data": {"values": rows}}
    if bar_width is not None:
        spec["width"] = {"step": bar_width}
    # The encoding is shared, so each rule sits on its bar and takes its group's colour.
    return spec | {
        "encoding": shared,
        "layer": [
            {"mark": "bar", "encoding": {"y": y_enc}},
            {
                "mark": {"type": "rule", "color": "black"},
                "encoding": {"y": {"field": low, "type": "quantitative"}, "y2": {"field": high}},
            },
        ],
    }


#: Half a histogram bar's width, in units of x: a little under ½, so neighbouring values stay two bars.
HALF_BAR = 0.4


def _listed_ticks(ticks: list[int]) -> dict[str, Any]:
    # tickCount as many as listed: Vega thins listed ticks to its width-based count otherwise.
    return {"values": ticks, "tickCount": len(ticks), "format": "d"}


def count_histogram(
    title: str,
    rows: list[dict[str, Any]],
    *,
    x: str,
    count: str,
    x_title: str,
    y_title: str,
    x_range: tuple[int, int],
    color: str | None = None,
    color_title: str | None = None,
    color_scale: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Counts (``count``) of an integer-valued ``x`` (bits matched, experts chosen): one bar per
    integer, centred on it, on an axis over exactly ``x_range`` with whole-number ticks, and
    whole-number ticks for the counts. A bar chart on a continuous axis would pad the domain past
    both ends and tick the counts in halves; an ordinal axis would label every integer.

    With ``color`` the bars of one x stack by that field, ``color_scale`` fixing each category's
    colour whichever of them the rows hold. The rows stay as given (the page's data table and the
    JSON download show them); the bar edges are computed in the spec."""
    low, high = x_range
    x_ticks = [tick for tick in integer_ticks(low, high) if low <= tick <= high]
    x_enc: dict[str, Any] = {
        "field": "bar_start",
        "type": "quantitative",
        "title": x_title,
        "scale": {"domain": [low - 0.5, high + 0.5], "nice": False, "zero": False},
        "axis": _listed_ticks(x_ticks),
    }
    # The tallest stack sets the count axis: ticks up to the first at or above it, and the domain with them.
    stacks: dict[Any, float] = {}
    for row in rows:
        stacks[row[x]] = stacks.get(row[x], 0) + row[count]
    y_ticks = integer_ticks(0, math.ceil(max(stacks.values(), default=1)), most=8)
    y_enc: dict[str, Any] = {
        "field": count,
        "type": "quantitative",
        "title": y_title,
        "scale": {"domain": [0, y_ticks[-1]], "nice": False},
        "axis": _listed_ticks(y_ticks),
    }
    encoding: dict[str, Any] = {
        "x": x_enc,
        "x2": {"field": "bar_end"},
        "y": y_enc,
        "tooltip": [{"field": x, "type": "quantitative", "title": x_title}, {"field": count, "title": y_title}],
    }
    if color is not None:
        color_enc: dict[str, Any] = {"field": color, "type": "nominal", "title": color_title}
        if color_scale is not None:
            color_enc["scale"] = color_scale
        encoding["color"] = color_enc
        encoding["tooltip"].insert(1, {"field": color, "title": color_title})
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "transform": [
            {"calculate": f"datum[{x!r}] - {HALF_BAR}", "as": "bar_start"},
            {"calculate": f"datum[{x!r}] + {HALF_BAR}", "as": "bar_end"},
        ],
        # Vertical: with x and x2 both given, Vega-Lite would otherwise lay the bars on their side.
        "mark": {"type": "bar", "orient": "vertical"},
        "encoding": encoding,
    }


def with_rules(
    chart: dict[str, Any],
    rules: list[dict[str, Any]],
    *,
    at: str,
    label: str,
    axis: Literal["x", "y"] = "x",
    legend: str | None = "threshold",
    edge: bool = False,
) -> dict[str, Any]:
    """``chart`` (a single view from this module) with a dashed rule at each of ``rules``' ``at``
    values across the plot (thresholds: "detected from here"), each named by its ``label`` in a
    legend titled ``legend`` (one dash pattern per rule) and in a tooltip, so a reader of the
    chart, or of its PNG, knows which line is which. The rules carry their own rows, so a threshold
    no row reaches is still drawn.

    ``edge`` draws each rule half a unit below its value, on the left edge of that value's bar in a
    :func:`count_histogram`: the line then parts the bars under the threshold from those at or over
    it instead of cutting the threshold's own bar in two."""
    view = {k: v for k, v in chart.items() if k not in ("$schema", "title")}
    labels = list(dict.fromkeys(str(rule[label]) for rule in rules))
    dashes = [RULE_DASHES[i % len(RULE_DASHES)] for i in range(len(labels))]
    position = "rule_at" if edge else at
    encoding: dict[str, Any] = {
        axis: {"field": position, "type": "quantitative"},
        "strokeDash": {"field": label, "type": "nominal", "scale": {"domain": labels, "range": dashes}},
        "tooltip": [{"field": label, "title": legend or label}, {"field": at, "type": "quantitative"}],
    }
    if legend is None:
        encoding["strokeDash"]["legend"] = None
    else:
        encoding["strokeDash"]["title"] = legend
    layer: dict[str, Any] = {"data": {"values": rules}, "mark": {"type": "rule", "strokeWidth": 1.5}}
    if edge:
        layer["transform"] = [{"calculate": f"datum[{at!r}] - 0.5", "as": "rule_at"}]
    return {
        "$schema": chart.get("$schema", VEGA_LITE),
        "title": chart["title"],
        "layer": [view, {**layer, "encoding": encoding}],
    }


#: The narrowest a facet cell is drawn: a cell of two bars at 20 px each would be a sliver.
MIN_CELL = 120


def _cell_size(size: int | dict[str, int], cell: dict[str, Any], axis: str, rows: list[dict[str, Any]]) -> int:
    """A cell's size in pixels: ``{"step": n}`` becomes n pixels per category of the cell's discrete
    ``axis`` (counted in ``rows``), never below :data:`MIN_CELL`, so a facet always has a plot to read."""
    if isinstance(size, int):
        return size
    field = ((cell.get("encoding") or {}).get(axis) or {}).get("field")
    categories = len({row.get(field) for row in rows}) if field else 0
    return max(MIN_CELL, size["step"] * max(categories, 1))


def small_multiples(
    chart: dict[str, Any],
    *,
    width: int | dict[str, int],
    height: int | dict[str, int],
    column: str | None = None,
    row: str | None = None,
    column_title: str | None = None,
    row_title: str | None = None,
) -> dict[str, Any]:
    """``chart`` (a single view from this module) repeated in one cell per ``column`` and/or ``row``
    value, on shared scales. A faceted chart cannot fit the page's width (Vega-Lite's fit autosize
    does not apply to facets), so each cell has an explicit ``width`` and ``height``: pixels, or
    ``{"step": n}`` pixels per category of a discrete axis.

    The facet operator (top-level ``facet`` and ``spec``), not row/column encodings: it draws the
    same, and the page (frontend charts.js) recognises it and lays it out at its own size."""
    if column is None and row is None:
        raise ValueError("small_multiples needs a column or a row field")
    facet: dict[str, Any] = {}
    if column is not None:
        facet["column"] = {"field": column, "type": "nominal", "title": column_title}
    if row is not None:
        facet["row"] = {"field": row, "type": "nominal", "title": row_title}
    cell = {k: v for k, v in chart.items() if k not in ("$schema", "title", "data")}
    rows = chart["data"].get("values", [])
    width = _cell_size(width, cell, "x", rows)
    height = _cell_size(height, cell, "y", rows)
    return {
        "$schema": chart.get("$schema", VEGA_LITE),
        "title": chart["title"],
        "data": chart["data"],
        "facet": facet,
        "spec": {"width": width, "height": height, **cell},
    }
