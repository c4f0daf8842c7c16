"""The point-cloud benchmark's command line and report sections (no training, no measurement)."""

import pytest

from bench import pointcloud as bench


def test_only_wants_a_known_configuration_and_a_seed(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--tier", "full", "--only", "moe-everything:1"])
    with pytest.raises(SystemExit):
        bench.main(["--tier", "full", "--only", "moe-proj"])
    assert "CONFIG:SEED" in capsys.readouterr().err


def test_only_trains_just_the_named_configuration_and_seed(monkeypatch):
    calls = []
    monkeypatch.setattr(bench.cli, "run_config", lambda config, seed, tier, name: calls.append((config, seed, name)))
    bench.main(["--tier", "full", "--only", "moe-proj:1", "--only", "dense-active:2"])
    assert calls == [("moe-proj", 1, "full"), ("dense-active", 2, "full")]


def test_a_cached_run_is_reused_without_training(monkeypatch, tmp_path):
    monkeypatch.setattr(bench.cache, "CACHE", tmp_path / "pointcloud")
    cached = {"config": "moe-proj", "seed": 1, "miou": {}}
    bench.store().put("full-moe-proj-s1", cached)
    assert bench.run_config("moe-proj", 1, bench.TIERS["full"], "full") == cached


def test_the_throughput_table_reports_cpu_time_speed_up_and_peak_memory():
    row = {
        "points": 1_000_000,
        "voxels": 600_000,
        "chunks": 6,
        "model": "zoo:pointmoe-synmix",
        "seconds": 20.0,
        "cpu_seconds": 8.0,
        "points_per_cpu_second": 125_000,
        "points_per_cpu_second_best": 150_000,
        "speedup": 1.14,
        "same_labels": 1.0,
        "peak_rss_bytes": 3 * 2**30,
        "rss_before_bytes": 2**30,
        "nonfinite_voxels": 6_000,
    }
    old = {"points": 100_000, "seconds": 9.0, "points_per_second": 11_000}  # no CPU time: not comparable
    lines = bench.throughput_lines([row, old])
    table = [line for line in lines if line.startswith("| 1")]
    assert len(table) == 1
    assert "125,000; 150,000" in table[0] and "×1.14" in table[0] and "3.00 GiB (1.00)" in table[0]
    assert "1.0%" in table[0]


def test_non_finite_shares_are_listed_only_for_runs_that_overflowed():
    runs = [
        {"config": "moe-proj-bn", "seed": 0, "nonfinite": dict.fromkeys("ABCDEF", 0.0) | {"D": 0.25}},
        {"config": "moe-proj", "seed": 0, "nonfinite": dict.fromkeys("ABCDEF", 0.0)},
        {"config": "dense-active", "seed": 0},
    ]
    lines = bench.nonfinite_lines(runs)
    rows = [line for line in lines if line.startswith("| moe") or line.startswith("| dense")]
    assert rows == ["| moe-proj-bn (s0) | 0.0% | 0.0% | 0.0% | 25.0% | 0.0% | 0.0% |"]
    assert "1 of the 2 runs that recorded it had none (`moe-proj` never overflowed)" in "\n".join(lines)
    assert bench.nonfinite_lines(runs[1:]) == []


def test_the_usage_chart_shows_the_first_and_last_moe_layer_by_their_numbers(tmp_path):
    from mlcore.jobs.pointcloud_train import usage_chart

    usage = {"A": [[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]], "C": [[0.0, 1.0], [0.5, 0.5], [0.9, 0.1]]}
    run = {"config": "moe-proj", "seed": 0, "usage": usage}
    assert bench.usage_chart_png(run, tmp_path / "usage.png")
    assert (tmp_path / "usage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = usage_chart({"A": [[0.2, 0.8]]}, [3])["data"]["values"]
    assert {r["layer"] for r in rows} == {"layer 3"}
    assert not bench.usage_chart_png({"config": "dense-active", "seed": 0, "usage": {}}, tmp_path / "none.png")


def test_the_report_repeats_the_real_sensor_studies_tables_that_have_been_written(tmp_path):
    from bench.pointcloud.study import real_sensor_lines

    assert real_sensor_lines(tmp_path) == []
    (tmp_path / "pointcloud-encodings.md").write_text(
        "# Encodings\n\nintro\n\n## Encoding invariance\n\n### room 0\n\n| PLY | 1.000 |\n\n"
        "## Attributes\n\n| other |\n\n_Written 2026 on here._\n"
    )
    (tmp_path / "pointcloud-encodings.json").write_text('{"written_at": "2026-12-05"}')
    text = "\n".join(real_sensor_lines(tmp_path))
    assert "## Point clouds from real sensors (issue #22)" in text and "(written 2026-12-05)" in text
    assert "#### Encoding invariance" in text and "##### room 0\n\n| PLY | 1.000 |" in text
    assert "| other |" not in text and "intro" not in text and "_Written" not in text
    assert "Attribute robustness" not in text  # that study has not written its report here
    # A report written before reports were stamped names no date rather than a question mark.
    (tmp_path / "pointcloud-heldout.md").write_text("# Held out\n\n## The zoo recipe, seeds 0, 1, 2\n\n| a |\n")
    (tmp_path / "pointcloud-heldout.json").write_text("{}")
    text = "\n".join(real_sensor_lines(tmp_path))
    assert "From bench/results/pointcloud-heldout.md.\n" in text and "written ?" not in text
