"""Every chart spec the job kinds write draws in the browser: a plot area at least 100 px wide, at
least one mark per data row, and no empty frame left under it. Composite specs (facets, layers)
used to draw 0-pixel SVGs because the page asked Vega-Lite to fit them to the frame, which it
supports for single views only.

The specs are the ones the mlcore sample tests recorded (``tests/mlcore/conftest.py`` writes each to
``test-artifacts/chart-specs/``), plus one of every shape ``mlcore.charts`` builds, so the test
means something even on a checkout where the mlcore tests have not run yet.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page

from mlcore import charts
from mlcore.charts import EXPERT_FATES
from tests.e2e.test_accessibility import settle
from tests.e2e.test_job_in_the_browser import log_in
from tests.mlcore.conftest import CHART_SPECS
from webapp.accounts.models import Team
from webapp.jobs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PER_PAGE = 24
MIN_PLOT_WIDTH = 100
MAX_SPARE = 40  # px of frame below a drawn chart (the data-table toggle lives outside the frame)


def built_in_specs() -> dict[str, dict[str, Any]]:
    """One chart of each shape the kinds draw, composite ones included."""
    bars_rows = [
        {"layer": f"layer {layer}", "class": c, "expert": f"expert {e}", "fraction": 0.25}
        for layer in (0, 1)
        for c in ("floor", "wall", "chair")
        for e in range(4)
    ]
    bars = charts.bar_chart(
        "Expert usage per class",
        bars_rows,
        x="class",
        y="fraction",
        x_title="Class",
        y_title="Fraction",
        color="expert",
        color_title="Expert",
    )
    groups = [{"layer": f"layer {i}", "group": f"g{g}", "tokens": 10 + g} for i in range(3) for g in range(4)]
    group_bars = charts.bar_chart(
        "Tokens per group",
        groups,
        x="group",
        y="tokens",
        x_title="Group",
        y_title="Tokens",
        color="group",
        legend=False,
    )
    heat_rows = [
        {"method": m, "layer": layer, "expert": e, "w": 0.1 * e}
        for m in ("a", "b")
        for layer in range(3)
        for e in range(5)
    ]
    heat = charts.heatmap(
        "Usage", heat_rows, x="expert", y="layer", value="w", x_title="Expert", y_title="Layer", value_title="Weight"
    )
    fates = [{"layer": layer, "expert": e, "state": list(EXPERT_FATES)[e % 5]} for layer in range(4) for e in range(8)]
    curve = [{"step": s, "loss": 1 / (s + 1), "run": r} for s in range(10) for r in ("a", "b")]
    ci = [{"split": s, "method": m, "acc": 0.5, "low": 0.4, "high": 0.6} for s in ("iid", "shift") for m in ("x", "y")]
    return {
        "facet-rows": charts.small_multiples(bars, row="layer", width={"step": 20}, height=300),
        "facet-columns": charts.small_multiples(group_bars, column="layer", width={"step": 20}, height=300),
        "facet-heatmaps": charts.small_multiples(heat, column="method", width=120, height=120),
        "fates": charts.heatmap(
            "Pruned map",
            fates,
            x="expert",
            y="layer",
            value="state",
            x_title="Expert",
            y_title="Layer",
            value_title="State",
            scheme=None,
            value_type="nominal",
            value_colors=EXPERT_FATES,
        ),
        "lines": charts.step_lines("Loss", curve, "loss", "Loss", "run"),
        "band": charts.line_chart(
            "Loss band",
            [{**r, "lo": r["loss"] - 0.01, "hi": r["loss"] + 0.01} for r in curve],
            x="step",
            y="loss",
            color="run",
            x_title="Step",
            y_title="Loss",
            band=("lo", "hi"),
        ),
        "error-bars": charts.error_bar_chart(
            "Accuracy",
            ci,
            x="split",
            y="acc",
            low="low",
            high="high",
            x_title="Split",
            y_title="Accuracy",
            group="method",
        ),
        "rules": charts.with_rules(
            charts.lines("Bits", curve, x="step", y="loss", x_title="Step", y_title="Bits", color="run"),
            [{"at": 3, "what": "threshold"}],
            at="at",
            label="what",
        ),
    }


def recorded_specs() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(CHART_SPECS.glob("*.json")) if CHART_SPECS.is_dir() else []:
        try:
            found[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return found


def data_rows(spec: dict[str, Any]) -> int:
    """Rows of the chart's own inline data with no missing value (Vega-Lite drops those)."""
    values = (spec.get("data") or {}).get("values") or []
    return sum(1 for row in values if isinstance(row, dict) and all(v is not None for v in row.values()))


MEASURE = """(frame) => {
    const view = frame.vegaView;
    let marks = 0;
    const walk = (mark) => {
        for (const item of mark.items || []) {
            if (mark.marktype === "group") { for (const child of item.items || []) walk(child); }
        }
        if (mark.marktype !== "group" && mark.role === "mark") marks += (mark.items || []).length;
    };
    if (view) walk(view.scenegraph().root);
    // The plot area: the union of every view's (and facet cell's) background frame.
    const svg = frame.querySelector("svg");
    let left = Infinity, right = -Infinity;
    const frames = "g.role-frame > g > path.background, g.role-scope > g > path.background";
    for (const path of svg ? svg.querySelectorAll(frames) : []) {
        const box = path.getBoundingClientRect();
        if (box.width > 0) { left = Math.min(left, box.left); right = Math.max(right, box.right); }
    }
    const spare = svg ? frame.getBoundingClientRect().height - svg.getBoundingClientRect().height : 0;
    return {marks, width: right > left ? right - left : 0, svg: svg ? svg.getBoundingClientRect().width : 0, spare};
}"""


def test_every_chart_spec_the_kinds_write_draws_a_plot_with_a_mark_per_row(
    live_server, page: Page, owner: User, team: Team
) -> None:
    specs = {**built_in_specs(), **recorded_specs()}
    names = sorted(specs)
    jobs = []
    for start in range(0, len(names), PER_PAGE):
        # Chart names are keys of one job's charts: short, and unique by their position.
        chunk = {f"{i:03d}-{name[-80:]}": specs[name] for i, name in enumerate(names[start : start + PER_PAGE], start)}
        jobs.append(
            Job.objects.create(
                team=team,
                submitted_by=owner,
                kind="test-exercise",
                queue="cpu",
                params={},
                status=Job.Status.SUCCEEDED,
                progress=1.0,
                charts=chunk,
            )
        )
    log_in(page, live_server.url, owner)
    problems = []
    drawn = 0
    for job in jobs:
        page.goto(f"{live_server.url}/jobs/{job.id}/")
        settle(page)
        for figure in page.locator("[data-chart-name]").all():
            name = figure.get_attribute("data-chart-name")
            frame = figure.locator("[data-chart]")
            if frame.get_attribute("data-drawn") != "done":
                problems.append(f"{name}: not drawn ({frame.inner_text()[:200]})")
                continue
            measured = frame.evaluate(MEASURE)
            rows = data_rows(job.charts[name])
            if measured["width"] < MIN_PLOT_WIDTH:
                problems.append(f"{name}: plot area {measured['width']:.0f} px wide (svg {measured['svg']:.0f} px)")
            if measured["spare"] > MAX_SPARE:
                problems.append(f"{name}: {measured['spare']:.0f} px of empty frame under the chart")
            if measured["marks"] < rows:
                problems.append(f"{name}: {measured['marks']} marks for {rows} data rows")
            drawn += 1
    assert not problems, "\n".join(problems)
    assert drawn == len(names), f"drew {drawn} of {len(names)} charts"
