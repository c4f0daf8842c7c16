"""Vega-Lite v5 chart specs shared by the job kinds (``ctx.chart``): every chart has a title, axis
titles and units. Plain dicts, no plotting library, so job specs can import it in the web process."""

from __future__ import annotations

from typing import Any

VEGA_LITE = "https://vega.github.io/schema/vega-lite/v5.json"


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
    color_enc = {"field": color, "type": "nominal", "title": color.replace("_", " ").capitalize()}
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
    title: str, rows: list[dict[str, Any]], *, x: str, y: str, value: str, x_title: str, y_title: str, value_title: str
) -> dict[str, Any]:
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "mark": "rect",
        "encoding": {
            "x": {"field": x, "type": "ordinal", "title": x_title},
            "y": {"field": y, "type": "ordinal", "title": y_title},
            "color": {"field": value, "type": "quantitative", "title": value_title, "scale": {"scheme": "viridis"}},
            "tooltip": [{"field": f} for f in (y, x, value)],
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


def step_lines(
    title: str, rows: list[dict[str, Any]], y: str, y_title: str, color: str | None = None
) -> dict[str, Any]:
    """A training curve: ``y`` over the ``step`` field, one line per ``color`` value if given."""
    encoding: dict[str, Any] = {
        "x": {"field": "step", "type": "quantitative", "title": "Step"},
        "y": {"field": y, "type": "quantitative", "title": y_title},
    }
    if color:
        encoding["color"] = {"field": color, "type": "nominal", "title": color.capitalize()}
    return {"$schema": VEGA_LITE, "title": title, "data": {"values": rows}, "mark": "line", "encoding": encoding}


def bar_chart(
    title: str,
    rows: list[dict[str, Any]],
    *,
    x: str,
    y: str,
    x_title: str,
    y_title: str,
    x_type: str = "nominal",
    keep_order: bool = True,
) -> dict[str, Any]:
    """Bars of ``y`` per ``x``; ``keep_order`` keeps the rows' order on the x axis instead of sorting."""
    x_enc: dict[str, Any] = {"field": x, "type": x_type, "title": x_title}
    if keep_order:
        x_enc["sort"] = None
    return {
        "$schema": VEGA_LITE,
        "title": title,
        "data": {"values": rows},
        "mark": "bar",
        "encoding": {"x": x_enc, "y": {"field": y, "type": "quantitative", "title": y_title}},
    }
