"""A job's metrics as the kind declares them: units, better direction, n and interval, target flags,
grouped by variant, and the comparison table with the baseline first and its differences."""

from __future__ import annotations

import pytest

from mlcore.jobs.registry import all_kinds, get_kind
from mlcore.jobs.spec import Comparison, Metric
from webapp.jobs import readout

COMPRESS = {
    "original/ppl_mean": 20.0,
    "original/acc": 0.55,
    "original/bytes_effective": 4_000_000,
    "mone@0.25/ppl_mean": 21.0,
    "mone@0.25/acc": 0.5333,
    "mone@0.25/bytes_effective": 3_000_000,
    "frequency@0.25/ppl_mean": 23.0,
    "frequency@0.25/acc": 0.5,
    "frequency@0.25/bytes_effective": 3_000_000,
    "original/unlisted": 1.0,
}


def test_every_shipped_kind_declares_its_metrics_and_its_comparison_or_why_it_has_none() -> None:
    for kind in all_kinds():
        if kind.name.startswith("test-"):
            continue
        assert kind.spec.metrics, f"{kind.name} declares no metrics"
        assert kind.spec.comparison is not None, f"{kind.name} says nothing about a comparison"
        for metric in kind.spec.metrics:
            assert metric.description, f"{kind.name}: {metric.key} has no description"


def test_the_comparison_opens_with_the_baseline_and_gives_each_variant_its_difference() -> None:
    spec = get_kind("compress-moe").spec
    found = readout.build(spec, COMPRESS, {"cloze_items": 20}, {})
    table = found.comparison
    assert table is not None
    assert [row.variant for row in table.rows] == ["original", "mone@0.25", "frequency@0.25"]
    assert table.rows[0].baseline
    assert [m.label for m in table.metrics] == ["Perplexity", "Cloze accuracy", "Memory"]
    ppl, acc, memory = table.rows[1].cells
    assert ppl.text == "21.0" and ppl.delta == "+1.00 (+5%)" and ppl.delta_better is False
    assert acc.text == "53.3%" and acc.delta == "−1.67 pp" and acc.delta_better is False
    # One cloze item of 60 (20 per source, three sources): the interval says the gap is noise.
    assert acc.n == 60 and acc.interval.startswith("40.")
    assert memory.text == "3.00 MB" and memory.delta == "−1.00 MB (−25%)" and memory.delta_better is True
    assert ("original/unlisted", 1.0) in found.other


def test_a_metric_that_misses_the_kinds_target_is_flagged_and_one_that_meets_it_is_not() -> None:
    spec = get_kind("watermark-generate").spec
    low = readout.build(spec, {"psnr": 24.2}, {}, {}).headline[0]
    high = readout.build(spec, {"psnr": 33.0}, {}, {}).headline[0]
    assert low.text == "24.2 dB" and low.misses_target
    assert not high.misses_target


def test_the_flop_fraction_shows_the_wall_clock_beside_it() -> None:
    spec = get_kind("video-generate").spec
    found = readout.build(spec, {"flop_fraction": 0.26, "seconds_per_step": 0.31}, {"clips": 2}, {})
    flops = next(m for m in found.headline if m.name == "flop_fraction")
    assert flops.text == "26.0%" and flops.beside == "wall-clock per step 0.310 s"


def test_a_kind_without_a_comparison_says_why() -> None:
    spec = get_kind("watermark-verify").spec
    found = readout.build(spec, {"images": 8, "detected_fraction": 0.5}, {}, {})
    assert found.comparison is None and "no method or baseline" in found.no_comparison


def test_a_comparison_with_a_stored_chart_uses_it_and_one_without_gets_bars_of_its_first_metric() -> None:
    spec = get_kind("compress-moe").spec
    stored = readout.build(spec, COMPRESS, {}, {"ppl-vs-ratio": {"mark": "line"}})
    assert stored.comparison.chart_name == "ppl-vs-ratio" and stored.comparison.chart is None
    built = readout.build(spec, COMPRESS, {}, {})
    rows = built.comparison.chart["data"]["values"]
    assert [r["role"] for r in rows] == ["baseline", "method", "method"]


def test_the_key_result_names_the_best_variant_with_its_difference() -> None:
    spec = get_kind("compress-moe").spec
    assert readout.key_result(spec, COMPRESS, {}) == "mone@0.25: perplexity 21.0 (+1.00 (+5%))"


def test_the_wilson_interval_stays_inside_zero_and_one() -> None:
    assert readout.wilson(0.0, 10)[0] == 0.0
    assert readout.wilson(1.0, 10)[1] == 1.0
    low, high = readout.wilson(0.5, 20)
    assert low == pytest.approx(0.299, abs=1e-3) and high == pytest.approx(0.701, abs=1e-3)


def test_a_spec_refuses_a_comparison_of_undeclared_metrics_and_a_silent_absence() -> None:
    with pytest.raises(ValueError, match="says why"):
        Comparison()
    with pytest.raises(ValueError, match="unit"):
        Metric(key="x", label="X", unit="furlongs")


@pytest.mark.django_db
def test_a_finished_compress_page_opens_with_the_comparison_baseline_first(owner, team, csrf_client) -> None:
    from webapp.jobs.models import Job

    job = Job.objects.create(
        team=team,
        submitted_by=owner,
        kind="compress-moe",
        queue="gpu",
        params={"cloze_items": 20},
        status=Job.Status.SUCCEEDED,
        metrics={"scalars": COMPRESS, "series": {}},
        charts={"ppl-vs-ratio": {"mark": "line", "data": {"values": []}}},
    )
    html = csrf_client(owner).get(f"/jobs/{job.id}/").content.decode()
    comparison = html.index("data-comparison")
    assert comparison < html.index("<h2>Progress</h2>")
    rows = [html.index(f'data-variant="{v}"', comparison) for v in ("original", "mone@0.25", "frequency@0.25")]
    assert rows == sorted(rows)
    assert "(MB)" in html and "−1.00 MB (−25%)" in html and "95% CI" in html
    # The comparison's chart is drawn beside the table, not a second time among the charts.
    assert html.count('data-chart-name="ppl-vs-ratio"') == 1
