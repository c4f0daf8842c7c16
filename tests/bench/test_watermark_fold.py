"""bench.watermark_fold: the rule that picks the fold period, its report, and the folder each candidate reads with."""

import json

from bench import BENCHMARKS
from bench import watermark_fold as study
from bench.watermark_embed import ATTACKS
from mlcore.watermark.embed import TILE_KEYS, TileKeys
from mlcore.zoo.molm_photo import PARITY_TILE_KEYS


def _candidate(jpeg: float, resize: float, worst: float) -> dict:
    rows = {"n": 40, "cpu_seconds": 1.0, **{f"bits_{a}": 0.95 for a in ATTACKS}}
    rows["bits_jpeg-75"], rows["bits_resize-0.5"] = jpeg, resize
    forged = {"N=10 with originals": {"value": 0.01}, "N=10 without originals": {"value": worst}}
    return {"rows": rows, "forgery": {"sources": 100, "targets": 200, "forged": forged, "cpu_seconds": 2.0}}


def test_a_candidate_that_a_forger_beats_is_never_chosen_however_well_it_reads():
    measured = {"none (sign)": _candidate(0.85, 0.90, 0.12), "0.5": _candidate(0.80, 0.87, 0.02)}
    assert study.choose(measured) == "0.5"
    assert study.choose({"none (sign)": _candidate(0.85, 0.90, 0.12)}) is None


def test_of_safe_candidates_the_better_attacked_read_wins_and_within_noise_the_lower_forgery():
    measured = {
        "1.0": _candidate(0.807, 0.871, 0.025),
        "0.5": _candidate(0.796, 0.884, 0.02),
        "0.2": _candidate(0.70, 0.79, 0.01),
    }
    assert study.choose(measured) == "0.5"  # mean 0.840 beside 0.839, and forged less
    measured["1.0"] = _candidate(0.85, 0.90, 0.03)
    assert study.choose(measured) == "1.0"  # better by more than 0.01: the higher forgery is the price


def test_the_report_gives_every_candidate_row_and_the_choice():
    measured = {"none (sign)": _candidate(0.85, 0.90, 0.12), "0.5": _candidate(0.80, 0.87, 0.02)}
    text = study.report(measured, "full", study.choose(measured))
    assert "| 0.5 | 0.950 | 0.800 | 0.870 | 0.010 | 0.020 |" in text
    assert "| none (sign) | 0.950 | 0.850 | 0.900 | 0.010 | 0.120 |" in text
    assert "Chosen: **0.5**" in text and "seed 5" in text and "(31, 32, 33)" in text


def test_each_candidate_reads_with_its_own_scheme_and_the_shipped_scheme_is_a_candidate(tmp_path):
    base = tmp_path / "base"
    (base / "extractor").mkdir(parents=True)
    (base / "extractor" / "config.json").write_text(json.dumps({"num_bits": 48, TILE_KEYS: 1}))
    folder = study.folder_with(base, study.scheme(0.5), tmp_path / "c")
    config = json.loads((folder / "extractor" / "config.json").read_text())
    assert TileKeys.from_config(config[TILE_KEYS]) == TileKeys(seed=study.SEED, period=0.5)
    assert json.loads((base / "extractor" / "config.json").read_text())[TILE_KEYS] == 1  # the base is untouched
    assert PARITY_TILE_KEYS in [study.scheme(q) for q in study.PERIODS]
    assert BENCHMARKS["watermark-fold"] == "bench.watermark_fold"
