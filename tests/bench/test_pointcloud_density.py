"""The density study: a survey of a long street, samples of it, and the report's verdict."""

from __future__ import annotations

import numpy as np

from bench import pointcloud_density as density


def test_a_survey_holds_the_points_asked_for_with_labels_of_dataset_c_and_samples_are_subsets() -> None:
    from mlcore.pointcloud.datasets import IGNORE, get_dataset

    cloud = density.survey(0, points=60_000)
    assert len(cloud.xyz) == len(cloud.intensity) == len(cloud.labels) == 60_000
    assert cloud.positions >= 2
    assert set(np.unique(cloud.labels)) <= set(get_dataset("C").class_ids) | {IGNORE}
    assert np.ptp(cloud.xyz[:, 0]) > 150  # the van drove most of the 240 m street
    small = density.sample(cloud, 10_000, seed=0)
    assert len(small.xyz) == 10_000
    rows = {tuple(p) for p in cloud.xyz.tolist()}
    assert all(tuple(p) in rows for p in small.xyz[:200].tolist())
    assert density.sample(cloud, 10**9, seed=0) is cloud


def test_the_report_computes_the_gap_per_street_and_misses_the_goal_when_any_street_is_off() -> None:
    def row(model: str, street: int, size: int, miou: float) -> dict:
        return {"model": model, "street": street, "size": size, "miou": miou, "voxels": size // 10,
                "iou": {"road": miou}}  # fmt: skip

    big = density.SURVEY_POINTS
    rows = [
        row("steady", 0, 100_000, 0.60), row("steady", 0, big, 0.62),
        row("steady", 1, 100_000, 0.50), row("steady", 1, big, 0.48),
        row("dense-blind", 0, 100_000, 0.70), row("dense-blind", 0, big, 0.60),
    ]  # fmt: skip
    assert density.gaps(rows)["steady"] == {0: 0.62 - 0.60, 1: 0.48 - 0.50}
    text = density.report(
        {"tier": "quick", "goal": 0.03, "survey_points": big, "street_length_m": 240.0, "rows": rows,
         "seconds": 1.0, "machine": {"platform": "test"}}
    )  # fmt: skip
    assert "- steady: Δ +0.000 ± 0.028 over 2 street(s), largest |Δ| 0.020: goal met." in text
    assert "- dense-blind: Δ -0.100 over 1 street(s), largest |Δ| 0.100: goal missed." in text
    assert "| dense-blind | 0 | 0.700 (10,000) | 0.600 (200,000) | -0.100 ✗ |" in text


def test_seeds_of_one_training_are_summarised_together() -> None:
    assert density.training("zoo pointmoe-synmix s2") == "zoo pointmoe-synmix"
    assert density.training("zoo pointmoe-synmix") == "zoo pointmoe-synmix"
    assert density.training("recipe + surveys s1b") == "recipe + surveys s1b"
    big = density.SURVEY_POINTS
    rows = [
        {"model": m, "street": 0, "size": size, "miou": v, "voxels": 1, "iou": {}}
        for m, size, v in (("zoo", 100_000, 0.6), ("zoo", big, 0.55), ("zoo s1", 100_000, 0.6), ("zoo s1", big, 0.62))
    ]
    text = density.report(
        {"tier": "full", "goal": 0.03, "survey_points": big, "street_length_m": 240.0, "rows": rows,
         "seconds": 1.0, "machine": {"platform": "test"}}
    )  # fmt: skip
    assert "| zoo | 2 | -0.015 ± 0.049 | -0.050 … +0.020 | 1 of 2 |" in text


def test_the_tile_border_check_compares_one_tile_with_many_on_the_same_points() -> None:
    from bench.pointcloud_attributes import segmenters
    from mlcore.pointcloud.pipeline import load_segmenter

    model, _ = load_segmenter(segmenters()["zoo pointmoe-synmix"])
    cloud = density.sample(density.survey(0, points=80_000), 60_000, seed=0)
    found = density.tile_borders(model, cloud)
    assert found["points"] == 60_000 and found["tiles"]["whole"] == 1
    assert found["tiles"]["tiled"] >= found["voxels"] // density.SMALL_TILE
    assert 0.0 <= found["differ"] <= 0.02  # measured 0.36% over 44 tiles; the goal is 1%
    text = density.report(
        {"tier": "quick", "goal": 0.03, "survey_points": density.SURVEY_POINTS, "street_length_m": 240.0,
         "rows": [], "tile_borders": [{"model": "zoo", "street": 0, **found}, {"model": "bad", "street": 1,
         **{**found, "differ": 0.02}}], "tile_goal": 0.01, "seconds": 1.0, "machine": {"platform": "test"}}
    )  # fmt: skip
    assert f"| zoo | 0 | {found['voxels']:,} | {found['tiles']['tiled']} | {found['differ']:.2%} |" in text
    assert "| bad | 1 |" in text and "| 2.00% ✗ |" in text


def test_rows_of_seeds_whose_folders_are_gone_are_carried_over_with_when_they_were_measured(tmp_path) -> None:
    import json

    rows = [
        {"model": "zoo pointmoe-synmix", "street": 0, "size": 100_000, "miou": 0.5},
        {"model": "zoo pointmoe-synmix s1", "street": 0, "size": 100_000, "miou": 0.4},
    ]
    (tmp_path / f"{density.NAME}.json").write_text(
        json.dumps({"tier": "full", "written_at": "2026-12-06T03:27:30+00:00", "rows": rows})
    )
    from bench.common import last_report

    previous = last_report(tmp_path / f"{density.NAME}.json", "full") or {}
    carried = density.carried_rows(previous, {"zoo pointmoe-synmix"})
    assert carried == [{**rows[1], "carried_over": "2026-12-06T03:27:30+00:00"}]
    other_tier = last_report(tmp_path / f"{density.NAME}.json", "quick") or {}
    assert density.carried_rows(other_tier, {"zoo pointmoe-synmix"}) == []  # another tier's report
