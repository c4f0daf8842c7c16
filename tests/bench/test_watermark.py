"""``make bench-watermark`` end to end on a tiny random bundle (the real run uses the zoo's molm-tiny)."""

import json
import sys

from bench import watermark as bench
from mlcore.watermark.pipeline import load_bundle
from tests.mlcore.watermark.tiny import write_bundle


def test_the_benchmark_writes_targets_the_lambda_curve_attacks_and_calibration(tmp_path, monkeypatch):
    folder = write_bundle(tmp_path / "bundle")
    tiny = bench.Tier(
        seeds=(0, 1), clean=200, watermarked=8, keys=2, averaging=(5,), query_images=2, query_budget=20,
        baseline_clean=50, lambdas=(0.0, 4.0), lambda_steps=2, lambda_images=8, attacks=("jpeg-50", "crop-0.7"),
    )  # fmt: skip
    monkeypatch.setitem(bench.TIERS, "quick", tiny)
    # The latency section (W2's) starts a portal and a worker; it has its own tests.
    monkeypatch.setitem(sys.modules, "bench.watermark_latency", None)
    monkeypatch.setattr(bench, "_bundle", lambda: load_bundle(folder))
    bench.run("quick", tmp_path / "results")
    markdown = (tmp_path / "results" / "watermark.md").read_text()
    for heading in (
        "## Targets",
        "## λ trade-off",
        "## False-positive calibration",
        "## Attacks",
        "## Verification latency",
    ):
        assert heading in markdown
    data = json.loads((tmp_path / "results" / "watermark.json").read_text())
    assert [p["lam"] for p in data["lambda_curve"]] == [0.0, 4.0]
    methods = {(r["method"], r["attack"]) for r in data["pooled"]}
    assert {("MOLM", "jpeg-50"), ("DWT-DCT", "jpeg-50"), ("MOLM", "forge-5"), ("MOLM", "query-nes")} <= methods
    assert all(r["seeds"] == 2 for r in data["pooled"] if r["attack"] == "jpeg-50")
    assert len(data["suites"]) == 2


def test_a_rebuilt_report_keeps_the_latency_section_but_not_the_sections_computed_after_it():
    written = (
        "# MOLM\n\n## Verification latency (CPU)\n\n| a | b |\n\nTotal benchmark time: 9 s.\n\n"
        "## Verdicts on the paper's levels\n\n| claim |\n\n_Written 2026 on here._\n"
    )
    assert bench.latency_section(written) == "## Verification latency (CPU)\n\n| a | b |"
    # A report rebuilt before (no total time) ends its latency section at the next heading all the same.
    rebuilt = written.replace("\n\nTotal benchmark time: 9 s.", "")
    assert bench.latency_section(rebuilt) == "## Verification latency (CPU)\n\n| a | b |"
    assert bench.latency_section("# MOLM\n") is None


def test_a_rebuilt_report_takes_the_latency_study_written_since_and_its_own_otherwise(tmp_path):
    import json

    def write(name: str, when: str, body: str) -> None:
        (tmp_path / f"{name}.json").write_text(json.dumps({"written_at": when}))
        (tmp_path / f"{name}.md").write_text(body)

    write("watermark", "2026-12-05T22:20:13+00:00", "own")
    assert bench.newest_latency(tmp_path) == "own"  # no latency study at all
    write("watermark-latency", "2026-12-06T05:10:00+00:00", "measured since")
    assert bench.newest_latency(tmp_path) == "measured since"
    write("watermark", "2026-12-06T06:00:00+00:00", "own, newer")
    assert bench.newest_latency(tmp_path) == "own, newer"


def test_the_report_repeats_the_embed_studys_main_and_forgery_tables_when_it_has_run(tmp_path):
    assert bench.embed_section(tmp_path) == []
    (tmp_path / "watermark-embed.md").write_text(
        "# Watermark embed\n\nintro\n\n| method | bits |\n| MOLM | 0.7 |\n\n## Learned baselines, seed by seed\n\n"
        "| seed 0 |\n\n## Forgery by averaging\n\n| forged |\n\n_Written 2026 on here._\n"
    )
    (tmp_path / "watermark-embed.json").write_text(json.dumps({"written_at": "2026-12-05"}))
    text = "\n".join(bench.embed_section(tmp_path))
    assert "## Watermarking the user's own photos (issue #23)" in text and "written 2026-12-05" in text
    assert "| MOLM | 0.7 |" in text and "### Forgery by averaging\n\n| forged |" in text
    assert "seed 0" not in text and "_Written" not in text and "# Watermark embed" not in text


def test_the_report_adds_the_forgery_studys_sections_after_the_embed_studys_when_both_have_run(tmp_path):
    (tmp_path / "watermark-forgery.md").write_text(
        "# Watermark forgery against the photo markers\n\nprotocol\n\n## How well each reads\n\n| bits |\n\n"
        "## Forgery\n\n### zoo:molm-photo-tiles\n\n| N | aligned |\n| 10 | 0.04 |\n\n"
        "## The forger who holds the markers\n\n| re-marked |\n\n_Written 2026 on here._\n"
    )
    assert bench.embed_section(tmp_path) == []  # the forgery study's tables belong to the embed study's section
    embed = "# Watermark embed\n\nintro\n\n## Forgery by averaging\n\n| forged |\n"
    (tmp_path / "watermark-embed.md").write_text(embed)
    (tmp_path / "watermark-embed.json").write_text(json.dumps({"written_at": "2026-12-05"}))
    (tmp_path / "watermark-forgery.json").write_text(json.dumps({"written_at": "2026-12-06"}))
    text = "\n".join(bench.embed_section(tmp_path))
    assert text.index("### Forgery by averaging") < text.index("### The photo markers each way")
    for heading in ("#### How well each reads", "#### Forgery", "##### zoo:molm-photo-tiles", "#### The forger who"):
        assert f"\n{heading}" in text
    assert "| 10 | 0.04 |" in text and "| re-marked |" in text and "written 2026-12-06" in text
    assert "# Watermark forgery against" not in text and "_Written" not in text
