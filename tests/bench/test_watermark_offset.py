from dataclasses import replace

from bench import BENCHMARKS
from bench.cache import Store
from bench.watermark_offset import (
    ISSUE_SEEDS,
    ISSUE_TARGETS,
    TIERS,
    collect,
    forgery_key,
    left_chance,
    periodic_key,
    phase_key,
    report,
    rows_key,
    train_key,
)


def _forgery(rate, tpr):
    forged = {f"N={n} {w} originals": {"value": rate} for n in (10, 100) for w in ("with", "without")}
    return {"key_bits": 48, "tpr_marked": {"value": tpr}, "forged": forged, "wall_seconds": 600.0}


def _train(variant, tile_bits, reached, seconds=1600.0):
    return {
        "variant": variant,
        "seed": 0,
        "steps": 1000,
        "steps_reached": reached,
        "held_out": {"tile_none": tile_bits, "tile_jpeg75": 0.5, "tile_resize05": 0.5},
        "held_out_bits": 12288,
        "train_seconds": seconds,
        "command": f"python -m mlcore.zoo train molm-residual --variant {variant}",
    }


def _store(tmp_path, random_phase_bits=0.50):
    spec = TIERS["full"]
    store = Store(tmp_path / "watermark-offset.jsonl")
    store.put(train_key("bootstrap", 0, 1000), _train("bootstrap", 0.58, 1000))
    store.put(train_key("random-offset", 0, 1000), _train("random-offset", random_phase_bits, 200, 500.0))
    store.put(train_key("random-offset-curriculum", 0, 1000), _train("random-offset-curriculum", 0.50, 300, 800.0))
    for reader, bits, rate, tpr in (("fixed", 0.67, 0.79, 0.44), ("search", 0.50, 0.0, 0.06)):
        row = {"n": 8, "psnr": 38.0, "bits_none": bits, "bits_jpeg-75": bits, "bits_resize-0.5": bits}
        store.put(rows_key(reader, 0, spec), {**row, "bits_unmarked_random_key": 0.5, "wall_seconds": 100.0})
        store.put(forgery_key(reader, 0, spec), _forgery(rate, tpr))
    keep = {"periodic_share_of_one_mark": 0.13, "mean_of_10_keeps_of_the_periodic_part": 0.4}
    keep |= {"mean_of_30_keeps_of_the_periodic_part": 0.3, "mean_of_10_keeps_of_the_energy": 0.2}
    keep |= {"mean_of_30_keeps_of_the_energy": 0.1}
    store.put(periodic_key(0, spec), {"fixed grid": keep, "secret random offset": keep})
    found = {"drawn": [1, 2], "found": [1, 2], "bits_true_phase": 0.6, "bits_found_phase": 0.6, "bits_phase_0": 0.5}
    missed = {**found, "found": [5, 5]}
    store.put(phase_key(0, spec), {"images": [found, missed, missed, missed]})
    return store


def test_the_report_is_rebuilt_from_cached_rows_and_states_the_shortfall_from_the_tier(tmp_path):
    spec = TIERS["full"]
    text, data = report(spec, collect(spec, _store(tmp_path)), "full")
    assert f"{len(spec.seeds)} training seed(s) of the {ISSUE_SEEDS} the issue asks" in text
    assert f"{spec.forge_targets} forgery targets of the ≥{ISSUE_TARGETS} the issue asks" in text
    assert data["cost_to_meet_seconds"] > 0 and "Meeting it would cost about" in text
    assert "| 0 | 4 | 1/4 [" in text  # the phase search's hit rate, from the cached images
    assert data["verdicts"][0]["verdict"] == "inconclusive at this scale"


def test_at_the_issues_scale_no_shortfall_is_stated(tmp_path):
    spec = replace(TIERS["full"], seeds=(0, 1, 2), forge_targets=ISSUE_TARGETS, steps=5000)
    text, data = report(spec, collect(spec, Store(tmp_path / "empty.jsonl")), "full")
    assert data["shortfall"] == [] and "Not at the issue's scale" not in text


def test_the_offset_is_not_shipped_while_every_secret_phase_reader_is_at_chance(tmp_path):
    spec = TIERS["full"]
    text, data = report(spec, collect(spec, _store(tmp_path)), "full")
    assert not data["any_secret_phase_reader_left_chance"]
    assert "so the random offset is not shipped" in text
    text, data = report(spec, collect(spec, _store(tmp_path / "x", random_phase_bits=0.6)), "full")
    assert data["any_secret_phase_reader_left_chance"] and "not shipped" not in text


def test_leaving_chance_needs_more_than_noise_over_the_bits_read():
    assert left_chance(0.52, 12288) and not left_chance(0.505, 12288)
    assert not left_chance(0.53, 384) and left_chance(0.55, 384)


def test_the_study_is_registered():
    assert BENCHMARKS["watermark-offset"] == "bench.watermark_offset"
