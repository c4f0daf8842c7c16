"""Pages under the Content-Security-Policy in Chromium: every kind of chart the job kinds draw is
drawn (an SVG of nonzero size) without one violation, and so are the pages around them.

The charts: the real charts of a kind run in-process (``moe-planner``), every builder in
``mlcore/charts.py`` (layered line with a band, heatmap, scatter, lines, step lines, bars, grouped
bars with a reference tick, error bars, threshold rules, small multiples), the test
kind's live curve, and the shapes a kind may write by hand: faceted, concatenated, and specs with
expressions (a calculate transform, a filter, tooltip formats), which Vega would compile with
``new Function`` if it were not using its interpreter.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Page

from mlcore import charts
from mlcore.jobs.context import InMemoryContext
from mlcore.jobs.registry import get_kind
from tests.e2e.test_job_in_the_browser import log_in
from webapp.jobs.models import Job

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

VL = "https://vega.github.io/schema/vega-lite/v6.json"
ROWS = [
    {"step": s, "loss": 1 / (s + 1), "method": m, "low": 0.5 / (s + 1), "high": 1.5 / (s + 1)}
    for s in range(8)
    for m in ("mone", "reap")
]

# Recorded in the page before any of its scripts run: a violation report, and console errors.
WATCH = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ${where}`);
});
"""


def hand_written_specs() -> dict[str, dict[str, Any]]:
    values = [{"x": i, "y": (i * 7) % 5, "group": "ab"[i % 2], "kind": "cd"[i // 4 % 2]} for i in range(8)]
    return {
        "faceted": {
            "$schema": VL,
            "title": "Faceted",
            "data": {"values": values},
            "facet": {"column": {"field": "group", "type": "nominal"}},
            "spec": {
                "width": 160,
                "mark": "point",
                "encoding": {"x": {"field": "x", "type": "quantitative"}, "y": {"field": "y", "type": "quantitative"}},
            },
        },
        "concat": {
            "$schema": VL,
            "title": "Concatenated",
            "data": {"values": values},
            "hconcat": [
                {
                    "width": 160,
                    "mark": "bar",
                    "encoding": {
                        "x": {"field": "group", "type": "nominal"},
                        "y": {"aggregate": "sum", "field": "y", "type": "quantitative"},
                    },
                },
                {
                    "width": 160,
                    "mark": "line",
                    "encoding": {
                        "x": {"field": "x", "type": "quantitative"},
                        "y": {"field": "y", "type": "quantitative"},
                    },
                },
            ],
        },
        "expressions": {
            "$schema": VL,
            "title": "Expressions",
            "data": {"values": values},
            "transform": [
                {"calculate": "datum.y * 2 + (datum.group === 'a' ? 1 : 0)", "as": "score"},
                {"filter": "datum.x >= 1 && isValid(datum.score)"},
            ],
            "params": [{"name": "pick", "select": {"type": "point", "fields": ["group"]}, "bind": "legend"}],
            "mark": {"type": "point", "tooltip": True},
            "encoding": {
                "x": {
                    "field": "x",
                    "type": "quantitative",
                    "axis": {"format": ".1f", "labelExpr": "datum.label + ' s'"},
                },
                "y": {"field": "score", "type": "quantitative"},
                "color": {"field": "group", "type": "nominal"},
                "opacity": {"condition": {"param": "pick", "value": 1}, "value": 0.2},
                "tooltip": [
                    {"field": "score", "type": "quantitative", "format": ".2f"},
                    {"field": "x", "format": ".1%"},
                ],
            },
        },
    }


def every_chart() -> dict[str, dict[str, Any]]:
    specs: dict[str, dict[str, Any]] = {}
    planner = get_kind("moe-planner")
    ctx = InMemoryContext()
    planner.run(planner.spec.clean({}), {}, ctx)
    specs.update({f"moe-planner-{name}": spec for name, spec in ctx.charts.items()})
    specs["line-with-band"] = charts.line_chart(
        "Loss", ROWS, x="step", y="loss", color="method", x_title="Step", y_title="Loss", band=("low", "high")
    )
    specs["heatmap"] = charts.heatmap(
        "Heat", ROWS, x="step", y="method", value="loss", x_title="Step", y_title="Method", value_title="Loss"
    )
    specs["scatter"] = charts.scatter(
        "Scatter", ROWS, x="step", y="loss", label="method", x_title="Step", y_title="Loss"
    )
    specs["step-lines"] = charts.step_lines("Curve", ROWS, "loss", "Loss", color="method")
    specs["bars"] = charts.bar_chart("Bars", ROWS[:4], x="method", y="loss", x_title="Method", y_title="Loss")
    by_step = {"x": "step", "y": "loss", "x_title": "Step", "y_title": "Loss"}
    specs["lines"] = charts.lines("Lines", ROWS, **by_step, color="method", points=True, y_zero=False)
    specs["grouped-bars-with-reference"] = charts.grouped_bar_chart(
        "Grouped", ROWS, **by_step, group="method", group_title="Method", reference="high"
    )
    specs["error-bars"] = charts.error_bar_chart(
        "Error bars", ROWS, **by_step, low="low", high="high", group="method", bar_width=14
    )
    stacked = charts.bar_chart("Stacked", ROWS, **by_step, color="method", normalize=True)
    specs["bars-with-rules"] = charts.with_rules(stacked, [{"at": 3, "name": "threshold"}], at="at", label="name")
    cells = charts.bar_chart("Cells", ROWS, x="method", y="loss", x_title=None, y_title="Loss", color="method")
    specs["small-multiples"] = charts.small_multiples(cells, column="step", width={"step": 20}, height=120)
    specs.update(hand_written_specs())
    return specs


def violations(page: Page) -> list[str]:
    return page.evaluate("window.__cspViolations")


def test_every_chart_draws_under_the_policy_without_a_violation(live_server, page: Page, team, owner, make_job) -> None:
    job = make_job(Job.Status.SUCCEEDED, steps=4)  # the test kind's own live curve, drawn by record_run
    specs = every_chart()
    job.charts = {**job.charts, **specs}
    job.save(update_fields=["charts"])
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.add_init_script(WATCH)
    log_in(page, live_server.url, owner)

    response = page.goto(f"{live_server.url}/jobs/{job.pk}/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-chart]')].every(e => ['done', 'failed'].includes(e.dataset.drawn))",
        timeout=60_000,
    )
    drawn = page.evaluate(
        """() => [...document.querySelectorAll('[data-chart]')].map(e => {
            const svg = e.querySelector('svg, canvas');
            const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
            return {state: e.dataset.drawn, width: box.width, height: box.height, text: e.textContent.slice(0, 200)};
        })"""
    )
    assert len(drawn) == len(job.charts) >= 12
    for chart in drawn:
        assert chart["state"] == "done" and chart["width"] > 0 and chart["height"] > 0, chart
    # Hovering a point shows the formatted tooltip (the tooltip handler runs, unstyled by no <style>).
    assert violations(page) == [] and not [e for e in console_errors if "Content Security Policy" in e]

    # Switching the theme redraws every chart, still without a violation.
    page.get_by_role("button", name="Theme").first.click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-chart]')].every(e => e.dataset.drawn === 'done')", timeout=60_000
    )
    assert violations(page) == [], violations(page)


def test_the_pages_around_the_charts_run_under_the_policy(live_server, page: Page, team, owner, make_job) -> None:
    job = make_job(Job.Status.RUNNING)
    Job.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())
    page.add_init_script(WATCH)
    # Before logging in: the public pages.
    for path in ("/", "/verify/", "/docs/", "/login/"):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        assert violations(page) == [], (path, violations(page))
    log_in(page, live_server.url, owner)
    for path in (
        f"/t/{team.slug}/",
        f"/jobs/{job.pk}/",
        f"/t/{team.slug}/library/add/",
        f"/t/{team.slug}/submit/test-exercise/",
    ):
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)  # htmx's first polls and the enhancers run
        assert violations(page) == [], (path, violations(page))
    # The progress bar's width comes from data-progress through the DOM, not a style attribute.
    page.goto(f"{live_server.url}/jobs/{job.pk}/")
    width = page.evaluate(
        "getComputedStyle(document.querySelector('.progress-fill')).getPropertyValue('--value').trim()"
    )
    assert width == "40%"
    # The filters submit on change (data-autosubmit, no onchange attribute).
    page.goto(f"{live_server.url}/t/{team.slug}/")
    page.wait_for_load_state("load")
    page.locator("select[name=status]").select_option("running")
    page.wait_for_url("**status=running**")
    assert violations(page) == []
