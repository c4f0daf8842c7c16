"""Benchmark caches refuse to report rows computed from zoo models that have since been retrained."""

import json

import pytest

from mlcore.bench import common
from mlcore.bench.common import StaleCache, check_zoo_cache


def _zoo_model(zoo, name, weights):
    (zoo / name).mkdir(parents=True, exist_ok=True)
    (zoo / name / "manifest.json").write_text(json.dumps({"name": name, "files": {"model.safetensors": weights}}))


@pytest.fixture
def zoo(tmp_path, monkeypatch):
    folder = tmp_path / "zoo"
    _zoo_model(folder, "dit", "sha-a")
    _zoo_model(folder, "judge", "sha-b")
    monkeypatch.setattr(common, "ZOO_CHECKPOINTS", folder)
    return folder


def test_a_retrained_model_makes_the_rows_that_depend_on_it_stale_until_they_are_deleted(tmp_path, zoo):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "attention-4096.json").write_text("{}")
    (cache / "quality-full-s0.json").write_text("{}")
    check_zoo_cache(cache, ("dit",), "attention-*.json")
    check_zoo_cache(cache, ("judge",), "quality-*.json")
    check_zoo_cache(cache, ("dit",), "attention-*.json")  # unchanged models: nothing to say

    _zoo_model(zoo, "dit", "sha-retrained")
    check_zoo_cache(cache, ("judge",), "quality-*.json")  # the judge's rows are still good
    with pytest.raises(StaleCache, match=r"earlier dit: delete attention-\*\.json"):
        check_zoo_cache(cache, ("dit",), "attention-*.json")

    (cache / "attention-4096.json").unlink()
    check_zoo_cache(cache, ("dit",), "attention-*.json")  # recomputed rows will belong to the new model
    recorded = json.loads((cache / "zoo.json").read_text())
    assert recorded["dit"] == common.zoo_fingerprints(("dit",))["dit"] and set(recorded) == {"dit", "judge"}


def test_a_missing_model_has_its_own_fingerprint(zoo):
    assert common.zoo_fingerprints(("nowhere",)) == {"nowhere": "missing"}
    assert common.zoo_fingerprints(("dit",))["dit"] != common.zoo_fingerprints(("judge",))["judge"]
