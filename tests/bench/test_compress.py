from bench.compress import _verdict, summarise


def _row(method, ratio, delta, acc, source="shakespeare", samples=16, model="moe-lm-tiny", seed=0):
    return {
        "method": method,
        "ratio": ratio,
        "delta_ppl_pct": delta,
        "delta_acc_pts": acc,
        "source": source,
        "samples": samples,
        "model": model,
        "seed": seed,
    }


def test_the_summary_reports_mean_std_and_spread_per_dimension():
    rows = [
        _row("mone", 0.5, 2.0, -1.0, source="shakespeare"),
        _row("mone", 0.5, 4.0, -3.0, source="stdlib-source"),
        _row("frequency", 0.5, 10.0, -5.0, samples=16),
        _row("frequency", 0.5, 20.0, -7.0, samples=64),
        {**_row("naee", 0.5, 0.0, 0.0), "skipped": "too many subsets"},
    ]
    summary = summarise(rows, (0.5,))["0.5"]
    assert summary["mone"]["delta_ppl_pct"] == (3.0, 1.0)
    assert summary["mone"]["delta_acc_pts"] == (-2.0, 1.0)
    assert summary["mone"]["spread_source"] == 2.0 and summary["mone"]["spread_samples"] == 0.0
    assert summary["frequency"]["spread_samples"] == 10.0
    assert "naee" not in summary


def test_the_verdict_says_when_mone_does_not_win():
    summary = summarise([_row("mone", 0.25, 5.0, 0.0), _row("reap", 0.25, 1.0, 0.0)], (0.25,))["0.25"]
    assert "does not hold" in _verdict(summary) and "needs more than one configuration" in _verdict(summary)
    rows = [_row("mone", 0.25, d, 0.0, seed=s) for s, d in enumerate((1.0, 1.2))]
    rows += [_row("reap", 0.25, d, 0.0, seed=s) for s, d in enumerate((2.0, 8.0))]
    verdict = _verdict(summarise(rows, (0.25,))["0.25"])
    assert verdict.startswith("MoNE ranks 1 of 2") and "1 of 2 by its spread" in verdict
    assert "does not hold" not in verdict


def test_the_benchmark_is_registered():
    from bench import BENCHMARKS

    assert BENCHMARKS["compress"] == "bench.compress"
