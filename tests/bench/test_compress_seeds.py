from bench import BENCHMARKS
from bench.compress import TIERS
from bench.compress_seeds import SEED_TIERS, _markdown, _verdict, seed_checkpoint, summarise_seeds


def _row(method, ratio, delta, seed):
    return {"method": method, "ratio": ratio, "delta_ppl_pct": delta, "training_seed": seed}


def _rows(deltas_by_seed):
    return [_row(m, 0.5, d, seed) for seed, deltas in deltas_by_seed.items() for m, d in deltas.items()]


def test_the_seed_summary_gives_mean_and_sd_over_training_seeds_and_mones_rank_per_seed():
    rows = _rows(
        {
            0: {"mone": 10.0, "mone-zero": 20.0, "rs": 30.0, "hc-smoe": 5.0},
            1: {"mone": 40.0, "mone-zero": 20.0, "rs": 30.0, "hc-smoe": 50.0},
        }
    )
    rows.append({**_row("naee", 0.5, 0.0, 0), "skipped": "too many subsets"})
    entry = summarise_seeds(rows, (0.5,))["0.5"]
    assert entry["methods"]["mone"]["delta_ppl_pct"] == (25.0, 15.0)
    assert entry["methods"]["rs"]["by_seed"] == {0: 30.0, 1: 30.0}
    assert "naee" not in entry["methods"]
    assert entry["mone_rank"][0] == {"mone": 2, "of": 4, "best": "hc-smoe"}
    assert entry["mone_rank"][1] == {"mone": 3, "of": 4, "best": "mone-zero"}


def test_the_expected_order_needs_mone_below_mone_zero_below_every_deletion_method():
    rows = _rows(
        {
            0: {"mone": 1.0, "mone-zero": 2.0, "rs": 3.0, "random": 9.0, "hc-smoe": 0.5},  # merging is not deletion
            1: {"mone": 1.0, "mone-zero": 4.0, "rs": 3.0, "random": 9.0},
            2: {"mone": 5.0, "mone-zero": 2.0, "rs": 3.0, "random": 9.0},
        }
    )
    entry = summarise_seeds(rows, (0.5,))["0.5"]
    order = entry["expected_order"]
    assert order[0]["holds"] and order[0]["mone <= deletion"]
    assert not order[1]["holds"] and not order[1]["mone-zero <= deletion"] and order[1]["mone <= deletion"]
    assert not order[2]["holds"] and not order[2]["mone <= mone-zero"] and not order[2]["mone <= deletion"]
    assert "the expected order of the means holds on 1 of 3 training seeds" in _verdict(entry)


def test_an_untrained_seed_is_reported_with_the_command_that_trains_it():
    name, folder = seed_checkpoint(987)
    assert (name, folder) == ("moe-lm-tiny-s987", None)
    text = _markdown("full", SEED_TIERS["full"], {}, {}, [987])
    assert "python -m mlcore.zoo train moe-lm-tiny --seed 987 --threads 1" in text


def test_the_seed_study_is_registered_and_scores_like_the_full_tier():
    assert BENCHMARKS["compress-seeds"] == "bench.compress_seeds"
    spec = SEED_TIERS["full"]
    assert (spec.eval_windows, spec.cloze_items, spec.ratios) == (
        TIERS["full"].eval_windows,
        TIERS["full"].cloze_items,
        (0.25, 0.5),
    )
    assert (spec.sources, spec.samples, spec.seeds) == (("shakespeare",), (64,), (0,))
