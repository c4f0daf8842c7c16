"""One compact cache file per study (bench/cache.py), and the refusal to report rows computed from
zoo models that have since been retrained."""

import json
import subprocess
import sys

import pytest

from bench import common
from bench.cache import Store, convert
from bench.common import StaleCache, check_zoo_cache


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
    cache = Store(tmp_path / "video.jsonl")
    cache.put("attention-4096", {})
    cache.put("quality-full-s0", {})
    check_zoo_cache(cache, ("dit",), "attention-*")
    check_zoo_cache(cache, ("judge",), "quality-*")
    lines = (tmp_path / "video.jsonl").read_text().count("\n")
    check_zoo_cache(cache, ("dit",), "attention-*")  # unchanged models: nothing to say, nothing written
    assert (tmp_path / "video.jsonl").read_text().count("\n") == lines

    _zoo_model(zoo, "dit", "sha-retrained")
    check_zoo_cache(cache, ("judge",), "quality-*")  # the judge's rows are still good
    with pytest.raises(StaleCache, match=r"earlier dit: delete the rows attention-\*"):
        check_zoo_cache(cache, ("dit",), "attention-*")

    cache.delete("attention-4096")
    check_zoo_cache(cache, ("dit",), "attention-*")  # recomputed rows will belong to the new model
    recorded = Store(tmp_path / "video.jsonl").get("zoo")
    assert recorded["dit"] == common.zoo_fingerprints(("dit",))["dit"] and set(recorded) == {"dit", "judge"}


def test_a_missing_model_has_its_own_fingerprint(zoo):
    assert common.zoo_fingerprints(("nowhere",)) == {"nowhere": "missing"}
    assert common.zoo_fingerprints(("dit",))["dit"] != common.zoo_fingerprints(("judge",))["judge"]


def test_a_row_is_appended_as_one_line_and_the_last_value_of_a_key_wins(tmp_path):
    store = Store(tmp_path / "study.jsonl")
    assert store.get("a") is None and "a" not in store
    store.put("a", {"loss": 0.1})
    store.put("b/c", {"loss": float("nan")})
    store.put("a", {"loss": 0.2})
    assert len((tmp_path / "study.jsonl").read_text().splitlines()) == 3
    again = Store(tmp_path / "study.jsonl")
    assert again.get("a") == {"loss": 0.2} and again.keys() == ["a", "b/c"] and again.keys("b/*") == ["b/c"]


def test_a_row_appended_by_another_process_is_seen_without_reopening_the_store(tmp_path):
    store = Store(tmp_path / "study.jsonl")
    store.put("mine", {"x": 1})
    code = "import sys; from bench.cache import Store; Store(sys.argv[1]).put('theirs', {'x': 2})"
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "study.jsonl")], check=True, timeout=60)
    assert store.get("theirs") == {"x": 2}


def test_a_line_cut_short_by_a_killed_run_leaves_that_configuration_unfinished(tmp_path):
    (tmp_path / "study.jsonl").write_text('{"key": "done", "value": 1}\n{"key": "half", "val')
    store = Store(tmp_path / "study.jsonl")
    assert store.keys() == ["done"]
    store.put("half", 2)  # the rerun's row starts a line of its own
    assert Store(tmp_path / "study.jsonl").get("half") == 2 and store.keys() == ["done", "half"]


def test_a_cached_value_is_computed_once(tmp_path):
    store, calls = Store(tmp_path / "study.jsonl"), []
    assert store.cached("k", lambda: calls.append(1) or {"v": 1}) == {"v": 1}
    assert store.cached("k", lambda: calls.append(1) or {"v": 2}) == {"v": 1}
    assert calls == [1]


def test_converting_folds_loose_rows_into_one_file_keyed_by_their_paths_and_keeps_checkpoints(tmp_path):
    folder = tmp_path / "video"
    (folder / "full" / "stdlib").mkdir(parents=True)
    (folder / "judge-static-300").mkdir()
    (folder / "attention-4096.json").write_text(json.dumps({"ratio": 0.25}, indent=1))
    (folder / "full" / "stdlib" / "uniform-s0.json").write_text(json.dumps({"loss": 1.5}))
    (folder / "judge-static-300" / "config.json").write_text("{}")
    (folder / "judge-static-300" / "diffusion_pytorch_model.safetensors").write_bytes(b"weights")
    assert convert(folder) == 2
    store = Store(tmp_path / "video.jsonl")
    assert store.get("attention-4096") == {"ratio": 0.25} and store.get("full/stdlib/uniform-s0") == {"loss": 1.5}
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == [
        "config.json",
        "diffusion_pytorch_model.safetensors",
    ]


def test_every_committed_study_cache_reads_back():
    for name in ("compress", "distill", "el", "mixture", "pointcloud", "routing", "video", "watermark"):
        assert Store.named(name).keys(), name
