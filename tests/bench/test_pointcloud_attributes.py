"""The attribute study's cache: a full-tier run resumes from the trainings it finished, and a changed
preset or tier never reuses a stale one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench import pointcloud_attributes as attributes
from bench.cache import Store

TINY = attributes.Tier(
    robustness_scans=1, seeds=1, train_scans=1, heldout_scans=1, steps=2, points=256, batch_size=1,
    extra=(("robust preset, with attribute", "robust", False),), extra_seeds=1,
)  # fmt: skip
CASE = attributes.CASES["road-markings"]


def test_a_run_resumes_from_the_trainings_it_cached_without_training_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "attributes.jsonl")
    first = attributes.case_runs(CASE, TINY, store)
    assert [r["training"] for r in first] == [
        "augmented, with attribute",
        "augmented, geometry only",
        "robust preset, with attribute",
    ]
    assert all(0.0 <= r["geometry only"]["miou"] <= 1.0 for r in first)

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached training was trained again")

    monkeypatch.setattr(attributes, "train_case", no_training)
    assert attributes.case_runs(CASE, TINY, Store(store.path)) == first


def test_a_changed_preset_tier_or_seed_names_another_training() -> None:
    key = attributes.run_key(CASE, TINY, "robust preset, with attribute", "robust", 0)
    assert key != attributes.run_key(CASE, TINY, "robust preset, with attribute", "robust-batch", 0)
    assert key != attributes.run_key(
        CASE, dataclasses.replace(TINY, steps=3), "robust preset, with attribute", "robust", 0
    )
    assert key != attributes.run_key(CASE, TINY, "robust preset, with attribute", "robust", 1)
    # Statistics kept per attribute presence are another training; not keeping them is the same as before.
    assert key != attributes.run_key(CASE, TINY, "robust preset, with attribute", "robust", 0, True)
    assert key == attributes.run_key(CASE, TINY, "robust preset, with attribute", "robust", 0, False)
    # More seeds or robustness scans change no training: their runs are reused.
    more = dataclasses.replace(TINY, seeds=18, robustness_scans=4)
    assert key == attributes.run_key(CASE, more, "robust preset, with attribute", "robust", 0)


def test_part_one_rows_of_a_segmenter_not_on_this_machine_are_carried_over_and_say_so(tmp_path: Path) -> None:
    previous = tmp_path / "pointcloud-attributes.json"
    rows = [{"dataset": "A", "carries": "colour"}]
    previous.write_text(
        json.dumps(
            {
                "tier": {"name": "full"},
                "written_at": "2026-12-05T16:00:00+00:00",
                "robustness": {"zoo": [], "card budget": rows},
                "segmenters": {"card budget": {"folder": "var/bench/card", "command": "python -m x"}},
            }
        )
    )
    out: dict = {"robustness": {"zoo": []}, "segmenters": {"zoo": {}}}
    attributes.carry_robustness(out, previous, "quick")
    assert list(out["robustness"]) == ["zoo"]  # another tier's report carries nothing
    attributes.carry_robustness(out, previous, "full")
    assert out["robustness"]["card budget"] == rows
    assert out["segmenters"]["card budget"]["carried_over"] == "2026-12-05T16:00:00+00:00"
    assert out["segmenters"]["zoo"] == {}  # measured here: not touched
