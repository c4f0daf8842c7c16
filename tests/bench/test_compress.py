from bench.compress import _verdict, claims, domain_rows, summarise
from bench.verdicts import INCONCLUSIVE


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


def test_the_mixed_metric_ranking_is_a_ranking_not_a_verdict():
    summary = summarise([_row("mone", 0.25, 5.0, 0.0), _row("reap", 0.25, 1.0, 0.0)], (0.25,))["0.25"]
    text = _verdict(summary)
    assert "ranks 2 of 2" in text and "needs more than one configuration" in text
    assert "does not hold" not in text and "own section" in text
    rows = [_row("mone", 0.25, d, 0.0, seed=s) for s, d in enumerate((1.0, 1.2))]
    rows += [_row("reap", 0.25, d, 0.0, seed=s) for s, d in enumerate((2.0, 8.0))]
    assert "ranks 1 of 2" in _verdict(summarise(rows, (0.25,))["0.25"])


BASES = {"moe-lm-tiny": {"perplexity": {"shakespeare": 10.0, "stdlib-docs": 20.0, "stdlib-source": 40.0}}}


def _ppl_row(method, seed, in_domain, other):
    row = _row(method, 0.5, 0.0, -1.0 if method == "mone" else -2.0, seed=seed)
    row["perplexity"] = {"shakespeare": in_domain, "stdlib-docs": other * 20.0, "stdlib-source": other * 40.0}
    row["seconds"] = 5.0
    return row


def test_in_domain_rows_use_the_calibration_source_and_cross_domain_the_others():
    (row,) = domain_rows([_ppl_row("mone", 0, 12.0, 2.0)], BASES)
    assert abs(row["in_domain_pct"] - 20.0) < 1e-9
    assert abs(row["cross_domain_pct"] - 100.0) < 1e-9


def test_mone_is_judged_in_domain_against_its_best_baseline_paired_by_configuration():
    rows = [_ppl_row("mone", s, 11.0 + 0.01 * s, 3.0) for s in range(5)]
    rows += [_ppl_row("ean", s, 13.0 + 0.02 * s, 1.5) for s in range(5)]
    rows += [_ppl_row("random", s, 20.0, 1.2) for s in range(5)]
    in_domain, accuracy = claims(domain_rows(rows, BASES), 0.5, "moe-lm-tiny")
    assert in_domain.baseline == "ean" and in_domain.pairs.n == 5
    assert in_domain.pairs.mean > 0  # MoNE degrades less in-domain, though it loses cross-domain
    # The zoo setting is not the card's (a three-domain model, 128 windows per source): no verdict either way.
    assert in_domain.verdict == INCONCLUSIVE and accuracy.verdict == INCONCLUSIVE


def test_the_benchmark_is_registered():
    from bench import BENCHMARKS

    assert BENCHMARKS["compress"] == "bench.compress"


def test_mixed_calibration_draws_equal_shares_of_every_source_seeded():
    import torch

    from bench.compress import draw_mixed, mixed_shares

    # Each pool's windows carry their source's id in every token, so the draw's shares can be read back.
    pools = {name: torch.full((80, 4), i) + 10 * torch.arange(80).unsqueeze(1) for i, name in enumerate("abc")}
    windows, shares = draw_mixed(pools, 64, seed=1)
    assert shares == {"a": 22, "b": 21, "c": 21} == mixed_shares(64, ("a", "b", "c"))
    drawn = torch.bincount(windows[:, 0] % 10, minlength=3).tolist()
    assert drawn == [22, 21, 21] and len({tuple(w.tolist()) for w in windows}) == 64
    again, _ = draw_mixed(pools, 64, seed=1)
    other, _ = draw_mixed(pools, 64, seed=2)
    assert torch.equal(windows, again) and not torch.equal(windows, other)
    assert mixed_shares(66, ("a", "b", "c")) == {"a": 22, "b": 22, "c": 22}


def test_mixed_calibration_refuses_a_source_too_small_for_its_share():
    import pytest
    import torch

    from bench.compress import draw_mixed

    pools = {"big": torch.zeros(100, 4, dtype=torch.long), "small": torch.zeros(10, 4, dtype=torch.long)}
    with pytest.raises(ValueError, match="small"):
        draw_mixed(pools, 64, seed=0)


def _skewed_calibration():
    """Two MoE layers of 8 experts: layer 0's experts all vary and are all used, layer 1's traffic and
    variance sit on two experts, so a model-wide threshold moves experts from layer 1 to layer 0."""
    import torch

    from mlcore.compress.calibrate import Calibration
    from mlcore.moe.stats import ExpertStatistics

    stats = ExpertStatistics(2, 8, 4)
    generator = torch.Generator().manual_seed(0)
    for layer, (busy, scale) in enumerate(((range(8), 1.0), ((0, 1), 0.05))):
        for expert in range(8):
            n = 50 if expert in busy else 2
            spread = scale if expert in busy else 0.01
            outputs = spread * torch.randn(n, 4, generator=generator, dtype=torch.float64)
            stats.update(layer, expert, outputs, torch.full((n,), 0.5, dtype=torch.float64))
        stats.count_tokens(layer, 200)
    return Calibration(layers=[0, 1], top_k=2, statistics=stats, gated_norm_sum=stats.norm_sum.clone())


def test_a_global_method_allocates_experts_across_layers_and_the_plain_name_per_layer():
    from bench.compress import method_scope, plan_of

    calibration = _skewed_calibration()
    assert method_scope("mone-global") == ("mone", "global") and method_scope("mone") == ("mone", "layer")
    per_layer = plan_of("mone", None, calibration, 4)
    model_wide = plan_of("mone-global", None, calibration, 4)
    assert [len(k) for k in per_layer.keep.values()] == [4, 4]
    counts = [len(k) for k in model_wide.keep.values()]
    assert sum(counts) == 8 and counts[0] > counts[1] >= 2
    # Both are MoNE: the pruned experts become novices, none is deleted.
    assert set(model_wide.novices[1]) == set(range(8)) - set(model_wide.keep[1])
    for name in ("frequency-global", "ean-global", "reap-global", "mone-delete-global"):
        assert [len(k) for k in plan_of(name, None, calibration, 4).keep.values()] != [4, 4], name


def _mixed_row(method, seed, ppl, acc=-1.0, ratio=0.5, model="moe-lm-tiny", source="mixed", samples=64):
    row = _row(method, ratio, 0.0, acc, source=source, samples=samples, model=model, seed=seed)
    row["perplexity"] = {"shakespeare": 10.0 * ppl, "stdlib-docs": 20.0 * ppl, "stdlib-source": 40.0 * ppl}
    row["delta_ppl_pct"] = 100 * (ppl - 1)
    row["seconds"] = 5.0
    return row


def test_mixed_verdicts_pair_calibration_seeds_and_follow_the_interval():
    from bench.compress import mixed_claims

    rows = [_mixed_row("mone", s, 1.10 + 0.001 * s) for s in range(3)]
    rows += [_mixed_row("rs", s, 1.30 + 0.002 * s) for s in range(3)]
    rows += [_mixed_row("mone-global", s, 1.50 + 0.001 * s) for s in range(3)]
    rows += [_mixed_row("reap-global", s, 1.20 + 0.001 * s) for s in range(3)]
    found = {(v.method, v.baseline, v.claim.metric): v for v in mixed_claims(rows, 0.5, "moe-lm-tiny")}
    mone_rs = found[("mone", "rs", "Δppl % over all three sources (all in-domain)")]
    assert mone_rs.pairs.n == 3 and mone_rs.interval[0] > 0  # MoNE degrades ~20 points less on every seed
    glob = found[("mone-global", "reap-global", "Δppl % over all three sources (all in-domain)")]
    assert glob.interval[1] < 0
    # A three-domain zoo model with one training seed: no verdict either way, whatever the interval says.
    assert {v.verdict for v in found.values()} == {INCONCLUSIVE}


def test_the_report_lists_mixed_rows_per_source_and_what_changed():
    from bench.compress import mixed_sections

    mixed = [_mixed_row(m, s, p) for m, p in (("mone", 1.1), ("rs", 1.3), ("mone-global", 1.2)) for s in range(3)]
    single = []
    for source in ("shakespeare", "stdlib-source"):
        for m, p in (("mone", 1.6), ("rs", 1.2)):
            single += [_mixed_row(m, s, p, source=source) for s in range(3)]
    lines, found, changes = mixed_sections(mixed, single, {"moe-lm-tiny": BASES["moe-lm-tiny"]}, _mixed_tier())
    text = "\n".join(lines)
    assert "22 shakespeare, 21 stdlib-docs, 21 stdlib-source" in text
    assert "| mone | layer | 3 | 10.0 ± 0.0 | 10.0 ± 0.0 | 10.0 ± 0.0 | 10.0 ± 0.0 |" in text
    assert "| mone-global | global | 3 |" in text and "MDE" in text and len(found) >= 2
    (change,) = changes
    assert change["one-source, all sources"]["mean_diff"] < 0 < change["mixed, per layer"]["mean_diff"]


def _mixed_tier():
    from bench.compress import MIXED_TIERS

    return MIXED_TIERS["full"]
