"""bench.watermark_forgery's report: each plain forger's row beside the two aligning forgers' rows."""

from bench import BENCHMARKS
from bench import watermark_forgery as study
from bench.watermark_embed import MUTUAL_ALIGNER, PUBLIC_ALIGNER


def _rate(value: float, bits: float) -> dict:
    return {"value": value, "ci": [value - 0.01, value + 0.01], "n": 500, "mean_matched_bits": bits}


def test_the_report_puts_each_plain_forgery_beside_the_aligned_ones_with_the_same_n_and_originals():
    forged = {}
    for n, base in ((10, 0.06), (100, 0.02)):
        for originals in ("with", "without"):
            name = f"N={n} {originals} originals"
            forged[name] = _rate(base, 23.0)
            forged[f"{name}, aligned by {PUBLIC_ALIGNER}"] = _rate(0.9 + n / 1000, 38.0)
            forged[f"{name}, aligned by {MUTUAL_ALIGNER}"] = _rate(0.8 + n / 1000, 37.0)
    result = {
        "sources": 100,
        "targets": 500,
        "tau": 32,
        "key_bits": 48,
        "fpr_forged_key": _rate(0.01, 0),
        "tpr_marked": _rate(0.96, 0),
        "forged": forged,
        "cpu_seconds": 12.0,
    }
    text = study.report(result, "full")
    rows = [line for line in text.splitlines() if line.startswith("| 10 ") or line.startswith("| 100 ")]
    assert len(rows) == 4
    assert rows[0].startswith("| 10 | with | 0.060 [0.050, 0.070] | **0.910 [0.900, 0.920]** | **0.810")
    assert rows[3].startswith("| 100 | without | 0.020") and "23.0 / 38.0 / 37.0" in rows[3]
    assert "τ = 32 of 48 bits" in text and "tier full" in text


def test_the_study_is_listed_for_make_bench():
    assert BENCHMARKS["watermark-forgery"] == "bench.watermark_forgery"
    assert set(study.TIERS) == {"quick", "full"}
