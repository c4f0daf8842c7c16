"""Progress inside a long stage: a span maps a loop's own fraction into its stretch of the bar,
says where the loop is, throttles its reports and never lets the bar go back."""

from __future__ import annotations

import pytest

from mlcore.jobs import InMemoryContext, JobCancelled
from mlcore.jobs.context import ProgressSpan


class Clock:
    """A clock the test moves by hand, so throttling by time is tested without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_bar_never_goes_back_but_the_stage_text_still_changes() -> None:
    ctx = InMemoryContext()
    ctx.progress(0.6, "training")
    ctx.progress(0.3, "evaluating")
    assert (ctx.fraction, ctx.stage) == (0.6, "evaluating")
    ctx.progress(0.9, "")
    assert (ctx.fraction, ctx.stage) == (0.9, "evaluating")


def test_a_span_maps_its_loop_into_its_stretch_of_the_bar_and_says_where_it_is() -> None:
    ctx = InMemoryContext()
    span = ctx.span(0.2, 0.6, "calibrating", every_fraction=0.0)
    for batch in range(1, 5):
        span.count(batch, 4, "batch")
    assert ctx.progress_history == [
        (pytest.approx(0.3), "calibrating: batch 1 of 4"),
        (pytest.approx(0.4), "calibrating: batch 2 of 4"),
        (pytest.approx(0.5), "calibrating: batch 3 of 4"),
        (pytest.approx(0.6), "calibrating: batch 4 of 4"),
    ]


def test_a_loop_of_ten_thousand_fast_batches_reports_about_twenty_times() -> None:
    ctx = InMemoryContext()
    clock = Clock()
    span = ProgressSpan(ctx, 0.0, 1.0, "evaluating", clock=clock)
    for batch in range(1, 10_001):
        clock.now += 0.0001  # a whole second for the loop
        span.count(batch, 10_000, "window")
    fractions = [fraction for fraction, _ in ctx.progress_history]
    assert 20 <= len(fractions) <= 22
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert ctx.stage == "evaluating: window 10000 of 10000"


def test_a_slow_loop_reports_about_once_a_second_even_between_its_percent_steps() -> None:
    ctx = InMemoryContext()
    clock = Clock()
    span = ProgressSpan(ctx, 0.0, 1.0, clock=clock)
    for window in range(1, 1001):
        clock.now += 0.25  # 250 s for 1,000 windows: 5% of the loop every 12.5 s
        span.count(window, 1000, "window")
    assert 240 <= len(ctx.progress_history) <= 260
    assert [stage for _, stage in ctx.progress_history[:2]] == ["window 1 of 1000", "window 5 of 1000"]


def test_a_span_stops_the_loop_when_the_job_is_cancelled() -> None:
    ctx = InMemoryContext()
    span = ctx.span(0.0, 1.0, "calibrating")
    span(0.1, "batch 1 of 10")
    ctx.cancel()
    with pytest.raises(JobCancelled):
        span(0.10001, "batch 1 of 10")  # throttled away, and still cancelled


def test_parts_of_a_span_fill_it_in_order_with_their_own_labels() -> None:
    ctx = InMemoryContext()
    variant = ctx.span(0.5, 0.7, "mone at ratio 0.25", every_fraction=0.0)
    variant.part(0.0, 0.3, "choosing experts")(1.0, "layer 2 of 2")
    variant.part(0.3, 1.0, "evaluating mone at ratio 0.25")(0.5, "shakespeare perplexity, window 8 of 16")
    variant.part(0.3, 1.0)(1.0, "saved")
    assert ctx.progress_history == [
        (pytest.approx(0.56), "choosing experts: layer 2 of 2"),
        (pytest.approx(0.63), "evaluating mone at ratio 0.25: shakespeare perplexity, window 8 of 16"),
        (pytest.approx(0.7), "mone at ratio 0.25: saved"),
    ]


def test_a_span_outside_the_bar_is_refused() -> None:
    with pytest.raises(ValueError, match="0 <= start <= end <= 1"):
        InMemoryContext().span(0.8, 0.2)
