"""bench.watermark_forgery's report: each marker's reading row, each plain forger beside the two aligning
forgers, the worst forger named, and the forger who re-marks with the public markers."""

from bench import BENCHMARKS
from bench import watermark_forgery as study
from bench.watermark_embed import ATTACKS, MUTUAL_ALIGNER, PUBLIC_ALIGNER


def _rate(value: float, bits: float) -> dict:
    return {"value": value, "ci": [max(value - 0.01, 0.0), value + 0.01], "n": 500, "mean_matched_bits": bits}


def _measured(plain: float, aligned: float, bits_clean: float) -> dict:
    forged = {}
    for n in (10, 100):
        for originals in ("with", "without"):
            name = f"N={n} {originals} originals"
            forged[name] = _rate(plain, 23.0)
            forged[f"{name}, aligned by {PUBLIC_ALIGNER}"] = _rate(aligned + n / 10000, 38.0)
            forged[f"{name}, aligned by {MUTUAL_ALIGNER}"] = _rate(aligned - 0.1 + n / 10000, 37.0)
    rows = {"n": 120, "psnr": 38.1, "bits_unmarked_random_key": 0.5, "portal_bits": 36, "cpu_seconds": 1.0}
    for attack in ATTACKS:
        rows[f"bits_{attack}"] = bits_clean
        rows[f"detected_{attack}"] = 0.5
    forgery = {
        "sources": 100,
        "targets": 500,
        "tau": 32,
        "key_bits": 48,
        "fpr_forged_key": _rate(0.01, 0),
        "tpr_marked": _rate(0.96, 0),
        "forged": forged,
        "cpu_seconds": 12.0,
    }
    restamp = {"targets": 100, "cpu_seconds": 3.0}
    for n in study.RESTAMP_READS:
        restamp[f"N={n}"] = {**_rate(0.99, 40.0), "key_bits_read": 47}
    return {"rows": rows, "forgery": forgery, "restamp": restamp}


def test_the_report_puts_each_plain_forgery_beside_the_aligned_ones_and_names_each_markers_worst_forger():
    phase, _, tiles = study.MARKERS
    text = study.report({phase: _measured(0.06, 0.9, 0.686), tiles: _measured(0.02, 0.02, 0.935)}, "full")
    assert "odd period of 0.5" in text  # the default's fold, as the zoo item writes it
    assert f"| {phase} | 120 | 38.1 | 0.686 |" in text and f"| {tiles} | 120 | 38.1 | 0.935 |" in text
    phase_part = text[text.index(f"### {phase}") : text.index(f"### {tiles}")]
    rows = [line for line in phase_part.splitlines() if line.startswith(("| 10 ", "| 100 "))]
    assert len(rows) == 4
    assert rows[0].startswith("| 10 | with | 0.060 [0.050, 0.070] | 0.901 [0.891, 0.911] | 0.801")
    assert rows[3].startswith("| 100 | without | 0.060") and "23.0 / 38.0 / 37.0" in rows[3]
    assert "Worst forger: N=100 with originals, aligned by the public phase search, 0.910" in phase_part
    assert "(target ≤ 0.05: missed)" in phase_part
    tiles_part = text[text.index(f"### {tiles}") :]
    assert "Worst forger: N=100 with originals, aligned by the public phase search, 0.030" in tiles_part
    assert "(target ≤ 0.05: met)" in tiles_part
    assert f"| {tiles} | 10 | 47 of 48 | 0.990 [0.980, 1.000] |" in text
    assert "τ = 32 of 48 bits" in text and "tier full" in text


def test_the_verdict_is_met_only_when_the_whole_interval_is_under_the_target():
    assert study.forgery_table(_measured(0.02, 0.02, 0.9)["forgery"])[-1].endswith("(target ≤ 0.05: met).")
    assert "not settled" in study.forgery_table(_measured(0.02, 0.045, 0.9)["forgery"])[-1]


def test_the_study_is_listed_for_make_bench():
    assert BENCHMARKS["watermark-forgery"] == "bench.watermark_forgery"
    assert set(study.TIERS) == {"quick", "full"}
