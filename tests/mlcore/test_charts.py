"""The shared chart builders (mlcore/charts.py): each spec is Vega-Lite that compiles offline
(vl-convert bundles Vega-Lite, so no network), carries its rows and names its encodings."""

from __future__ import annotations

import re
from typing import Any

import pytest
import vl_convert

from mlcore import charts

ROWS = [
    {"split": split, "method": method, "value": value, "lo": value - 0.1, "hi": value + 0.05, "step": step}
    for step, (split, method, value) in enumerate(
        [("train", "erm", 0.9), ("train", "gsat", 0.8), ("ood", "erm", 0.5), ("ood", "gsat", 0.7)]
    )
]


def compiled(spec: dict[str, Any]) -> dict[str, Any]:
    """The Vega the browser would run; Vega-Lite refuses a spec it cannot draw (unknown mark, bad type)."""
    assert spec["$schema"] == charts.VEGA_LITE and spec["title"]
    return vl_convert.vegalite_to_vega(spec)


def inline_values(vega: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [d["values"] for d in vega["data"] if "values" in d]


def test_lines_draw_one_line_per_colour_with_points_and_a_free_y_axis() -> None:
    spec = charts.lines(
        "Accuracy",
        ROWS,
        x="step",
        y="value",
        x_title="Epoch",
        y_title="Accuracy",
        color="method",
        color_title=None,
        points=True,
        y_zero=False,
    )
    assert spec["mark"] == {"type": "line", "point": True}
    assert spec["encoding"]["y"] == {
        "field": "value",
        "type": "quantitative",
        "title": "Accuracy",
        "scale": {"zero": False},
    }
    assert spec["encoding"]["color"] == {"field": "method", "type": "nominal", "title": None}
    assert ROWS in inline_values(compiled(spec))


def test_plain_lines_have_no_colour_and_start_the_y_axis_at_zero() -> None:
    spec = charts.lines("Loss", ROWS, x="step", y="value", x_title="Step", y_title="Loss")
    assert spec["mark"] == "line" and set(spec["encoding"]) == {"x", "y"} and "scale" not in spec["encoding"]["y"]
    compiled(spec)


def test_step_lines_title_their_legend_from_the_field_and_take_an_x_title() -> None:
    spec = charts.step_lines("Curve", ROWS, "value", "Value", color="grad_norm", x_title="Inner step")
    assert spec["encoding"]["x"] == {"field": "step", "type": "quantitative", "title": "Inner step"}
    assert spec["encoding"]["color"]["title"] == "Grad norm"


def test_a_heatmap_can_pin_its_colours_keep_its_order_and_format_its_tooltip() -> None:
    spec = charts.heatmap(
        "Usage",
        ROWS,
        x="split",
        y="method",
        value="value",
        x_title="Split",
        y_title="Method",
        value_title="Weight",
        scheme=None,
        value_domain=(0, 1),
        value_format=".2f",
        x_order=["train", "ood"],
        y_order="rows",
    )
    encoding = spec["encoding"]
    assert encoding["x"]["sort"] == ["train", "ood"] and encoding["y"]["sort"] is None
    assert encoding["color"] == {
        "field": "value",
        "type": "quantitative",
        "title": "Weight",
        "scale": {"domain": [0, 1]},
    }
    assert encoding["tooltip"] == [
        {"field": "method"},
        {"field": "split"},
        {"field": "value", "type": "quantitative", "format": ".2f"},
    ]
    assert ROWS in inline_values(compiled(spec))


def test_a_heatmap_of_categories_has_no_colour_ramp_and_sorts_its_axes_by_default() -> None:
    spec = charts.heatmap(
        "Fate",
        ROWS,
        x="split",
        y="step",
        value="method",
        x_title="Split",
        y_title="Step",
        value_title="Fate",
        scheme=None,
        value_type="nominal",
    )
    assert spec["encoding"]["color"] == {"field": "method", "type": "nominal", "title": "Fate"}
    assert "sort" not in spec["encoding"]["x"] and "sort" not in spec["encoding"]["y"]
    compiled(spec)


def test_an_order_that_is_neither_a_keyword_nor_a_list_is_refused() -> None:
    with pytest.raises(ValueError, match="order must be"):
        charts.heatmap(
            "H", ROWS, x="split", y="method", value="value", x_title="", y_title="", value_title="", x_order="desc"
        )


def test_a_bar_chart_stacks_by_colour_to_100_percent_with_a_fixed_palette() -> None:
    spec = charts.bar_chart(
        "Shares",
        ROWS,
        x="split",
        y="value",
        x_title="Split",
        y_title="Share",
        color="method",
        color_title="Method",
        color_domain=["gsat", "erm"],
        normalize=True,
    )
    encoding = spec["encoding"]
    assert encoding["y"]["stack"] == "normalize"
    assert encoding["color"] == {
        "field": "method",
        "type": "nominal",
        "title": "Method",
        "scale": {"domain": ["gsat", "erm"]},
    }
    assert ROWS in inline_values(compiled(spec))


def test_bars_coloured_by_their_own_category_draw_no_legend() -> None:
    spec = charts.bar_chart(
        "Bars", ROWS, x="method", y="value", x_title=None, y_title="V", color="method", legend=False
    )
    assert spec["encoding"]["color"] == {"field": "method", "type": "nominal", "legend": None}
    assert spec["encoding"]["x"]["title"] is None
    vega = compiled(spec)
    assert not vega.get("legends")


def test_bars_on_a_quantitative_axis_take_a_fixed_domain() -> None:
    spec = charts.bar_chart(
        "Bits",
        ROWS,
        x="step",
        y="value",
        x_title="S",
        y_title="N",
        x_type="quantitative",
        keep_order=False,
        x_domain=(0, 32),
    )
    assert spec["encoding"]["x"] == {
        "field": "step",
        "type": "quantitative",
        "title": "S",
        "scale": {"domain": [0, 32]},
    }
    compiled(spec)


def test_grouped_bars_stand_side_by_side_in_a_fixed_order() -> None:
    spec = charts.grouped_bar_chart(
        "AUC",
        ROWS,
        x="split",
        y="value",
        group="method",
        x_title="Split",
        y_title="AUC",
        group_title="Method",
        x_order=["train", "ood"],
        y_domain=(0, 1),
    )
    encoding = spec["encoding"]
    assert spec["mark"] == "bar" and encoding["xOffset"] == {"field": "method"}
    assert encoding["x"]["sort"] == ["train", "ood"] and encoding["y"]["scale"] == {"domain": [0, 1]}
    assert encoding["color"] == {"field": "method", "type": "nominal", "title": "Method"}
    assert ROWS in inline_values(compiled(spec))


def test_grouped_bars_with_a_reference_draw_one_tick_across_each_group() -> None:
    spec = charts.grouped_bar_chart(
        "Accuracy",
        ROWS,
        x="split",
        y="value",
        group="method",
        x_title="Split",
        y_title="Accuracy",
        group_title="Method",
        reference="hi",
    )
    bars, tick = spec["layer"]
    assert bars["mark"] == "bar" and "xOffset" in bars["encoding"]
    assert tick["mark"]["type"] == "tick" and "xOffset" not in tick["encoding"] and "color" not in tick["encoding"]
    assert tick["encoding"]["y"] == {"field": "hi", "type": "quantitative"}
    assert ROWS in inline_values(compiled(spec))


def test_error_bars_put_an_interval_rule_on_each_bar() -> None:
    spec = charts.error_bar_chart(
        "Bit accuracy",
        ROWS,
        x="split",
        y="value",
        low="lo",
        high="hi",
        x_title=None,
        y_title="Bit accuracy",
        group="method",
        group_title="Method",
        x_order="rows",
        y_domain=(0, 1),
        bar_width=14,
    )
    assert spec["width"] == {"step": 14}
    assert spec["encoding"]["x"]["sort"] is None and spec["encoding"]["xOffset"] == {"field": "method"}
    bars, rule = spec["layer"]
    assert bars["encoding"]["y"]["field"] == "value"
    assert rule["mark"]["type"] == "rule"
    assert rule["encoding"] == {"y": {"field": "lo", "type": "quantitative"}, "y2": {"field": "hi"}}
    assert ROWS in inline_values(compiled(spec))


def test_error_bars_without_groups_have_no_offset_or_colour() -> None:
    spec = charts.error_bar_chart("CI", ROWS[:2], x="method", y="value", low="lo", high="hi", x_title="M", y_title="V")
    assert set(spec["encoding"]) == {"x"} and "width" not in spec
    compiled(spec)


def test_threshold_rules_carry_their_own_rows_beside_the_chart_and_are_named_in_a_legend() -> None:
    bars = charts.bar_chart("Bits", ROWS, x="step", y="value", x_title="S", y_title="N", x_type="quantitative")
    rules = [{"bits": 2, "threshold": "detection"}, {"bits": 1, "threshold": "suspicious"}]
    spec = charts.with_rules(bars, rules, at="bits", label="threshold")
    assert spec["title"] == "Bits" and "data" not in spec
    view, rule = spec["layer"]
    assert view == {"data": {"values": ROWS}, "mark": "bar", "encoding": bars["encoding"]}
    assert rule["data"] == {"values": rules}
    assert rule["encoding"]["x"] == {"field": "bits", "type": "quantitative"}
    # One dash pattern per rule, named in a legend (a PNG has no tooltip).
    dash = rule["encoding"]["strokeDash"]
    assert dash["field"] == "threshold" and dash["title"] == "threshold"
    assert dash["scale"]["domain"] == ["detection", "suspicious"] and len(set(map(tuple, dash["scale"]["range"]))) == 2
    values = inline_values(compiled(spec))
    assert ROWS in values and rules in values
    assert [row[0] for row in legend_labels(svg(spec))[-2:]] == ["detection", "suspicious"]


def test_horizontal_threshold_rules_sit_on_the_y_axis() -> None:
    lines = charts.lines("Loss", ROWS, x="step", y="value", x_title="Step", y_title="Loss")
    spec = charts.with_rules(lines, [{"v": 0.5, "name": "target"}], at="v", label="name", axis="y", legend=None)
    assert set(spec["layer"][1]["encoding"]) == {"y", "strokeDash", "tooltip"}
    assert spec["layer"][1]["encoding"]["strokeDash"]["legend"] is None
    compiled(spec)


def svg(spec: dict[str, Any]) -> str:
    return vl_convert.vegalite_to_svg(spec)


def axis_labels(drawn: str) -> dict[str, list[str]]:
    """Each axis of a drawn chart (SVG) by its title: the tick labels it shows."""
    found = {}
    for part in drawn.split('class="mark-group role-axis"')[1:]:
        title = re.search(r"role-axis-title.*?<text[^>]*>([^<]*)</text>", part, re.S)
        labels = re.search(r"role-axis-label.*?</g>", part, re.S)
        if title and labels:
            found[title.group(1)] = re.findall(r"<text[^>]*>([^<]*)</text>", labels.group(0))
    return found


def legend_labels(drawn: str) -> list[list[str]]:
    return [re.findall(r"<text[^>]*>([^<]*)</text>", g) for g in re.findall(r"role-legend-label.*?</g>", drawn, re.S)]


@pytest.mark.parametrize(
    ("low", "high", "ticks"),
    [
        (0, 1, [0, 1]),
        (0, 0, [0, 1]),
        (0, 2, [0, 1, 2]),
        (0, 23, [0, 5, 10, 15, 20, 25]),
        (0, 48, [0, 5, 10, 15, 20, 25, 30, 35, 40, 45, 50]),
        (0, 1000, list(range(0, 1001, 100))),
        (3, 9, [3, 4, 5, 6, 7, 8, 9]),
    ],
)
def test_integer_ticks_step_by_whole_numbers_up_to_the_top(low: int, high: int, ticks: list[int]) -> None:
    assert charts.integer_ticks(low, high) == ticks


def test_a_count_histogram_draws_whole_numbers_over_exactly_its_range() -> None:
    rows = [{"s": 22, "verdict": "not detected", "n": 1}, {"s": 47, "verdict": "detected", "n": 1}]
    spec = charts.count_histogram(
        "Images", rows, x="s", count="n", x_title="bits", y_title="images", x_range=(0, 48),
        color="verdict", color_title="verdict", color_scale=charts.verdict_scale(),
    )  # fmt: skip
    assert spec["data"] == {"values": rows}  # the data table and the JSON download show the rows as given
    drawn = axis_labels(svg(spec))
    # Not -5 to 50 with ticks at half an image: 0 to 48 (and no further) and whole images.
    assert drawn["bits"] == ["0", "5", "10", "15", "20", "25", "30", "35", "40", "45"]
    assert drawn["images"] == ["0", "1"]
    scales = {s["name"]: s for s in compiled(spec)["scales"]}
    assert scales["x"]["domain"] == [-0.5, 48.5] and scales["x"].get("nice") is False
    # "not detected" is the neutral grey: no mark found is not an error.
    assert dict(zip(scales["color"]["domain"], scales["color"]["range"], strict=True))["not detected"] == "#9aa0a8"


def test_a_threshold_on_a_histogram_sits_between_the_bars_under_it_and_those_at_it() -> None:
    rows = [{"s": 40, "n": 2}, {"s": 41, "n": 3}]
    bars = charts.count_histogram("Images", rows, x="s", count="n", x_title="S", y_title="images", x_range=(0, 48))
    spec = charts.with_rules(bars, [{"s": 41, "what": "detected from S = 41"}], at="s", label="what", edge=True)
    assert spec["layer"][1]["transform"] == [{"calculate": "datum['s'] - 0.5", "as": "rule_at"}]
    drawn = svg(spec)
    assert axis_labels(drawn)["images"] == ["0", "1", "2", "3"]
    assert ["detected from S = 41"] in legend_labels(drawn)


def test_small_multiples_keep_the_chart_and_size_each_cell_explicitly() -> None:
    bars = charts.bar_chart(
        "Usage", ROWS, x="method", y="value", x_title=None, y_title="V", color="method", legend=False
    )
    spec = charts.small_multiples(
        bars, column="split", column_title="Split", row="step", width={"step": 20}, height=120
    )
    # The facet operator: the page lays out a spec with a top-level "facet" at its own size.
    assert spec["title"] == "Usage" and spec["data"] == {"values": ROWS}
    assert spec["facet"] == {
        "column": {"field": "split", "type": "nominal", "title": "Split"},
        "row": {"field": "step", "type": "nominal", "title": None},
    }
    # 20 px per method, as a fixed width: at least MIN_CELL, so two bars still make a readable cell.
    width = max(charts.MIN_CELL, 20 * len({row["method"] for row in ROWS}))
    assert spec["spec"] == {"width": width, "height": 120, "mark": "bar", "encoding": bars["encoding"]}
    assert "facet" not in bars and "width" not in bars  # the single view it was built from is left alone
    vega = compiled(spec)
    assert ROWS in inline_values(vega)
    sizes = {s["name"]: s.get("value", s.get("update")) for s in vega["signals"]}
    assert sizes["child_height"] == 120 and sizes["child_width"] == width


def test_small_multiples_need_a_field_to_split_by() -> None:
    bars = charts.bar_chart("Usage", ROWS, x="method", y="value", x_title="M", y_title="V")
    with pytest.raises(ValueError, match="column or a row"):
        charts.small_multiples(bars, width=100, height=100)


def test_expert_fates_keep_one_colour_in_every_map_whichever_fates_it_holds() -> None:
    only_kept = [{"layer": 0, "expert": 0, "state": "kept"}]
    mixed = [{"layer": 0, "expert": e, "state": s} for e, s in enumerate(("deleted", "novice", "kept"))]
    scales = [
        charts.heatmap(
            "m",
            rows,
            x="expert",
            y="layer",
            value="state",
            x_title="E",
            y_title="L",
            value_title="S",
            scheme=None,
            value_type="nominal",
            value_colors=charts.EXPERT_FATES,
        )["encoding"]["color"]["scale"]
        for rows in (only_kept, mixed)
    ]
    assert scales[0] == scales[1] == charts.fate_scale()
    assert dict(zip(scales[0]["domain"], scales[0]["range"], strict=True))["kept"] == charts.EXPERT_FATES["kept"]
