"""The point-cloud benchmark's ``paper`` tier (the method card's own scale, trained on a GPU) and the
machinery that makes it one call there: ``--device``, a step override, the wall-clock budget that
saves and resumes, pre-generated scans and ``--jobs``. Everything here runs on the CPU at toy scale."""

import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from bench import pointcloud as bench
from mlcore.pointcloud.datasets import make_scan
from mlcore.pointcloud.pipeline import ScanPool, TrainConfig, train
from mlcore.pointcloud.ptv3 import PTv3, PTv3Config

#: The paper tier's configurations on a toy model, one training and one validation scan per dataset.
TOY = {"model": {"channels": (16, 32), "depths": (1, 1), "dec_depths": (1,)}, "points": 512, "scenes": 1}


@pytest.fixture
def toy_paper(monkeypatch, tmp_path):
    monkeypatch.setattr(bench.cache, "CACHE", tmp_path / "cache")
    monkeypatch.setitem(bench.TIERS, "paper", replace(bench.TIERS["paper"], eval_scenes=1, **TOY))
    return tmp_path / "cache"


def test_the_paper_tier_has_the_method_cards_scale():
    spec = bench.TIERS["paper"]
    assert spec.configs == ("dense-active", "moe-proj", "ppt-active") and spec.seeds == 3
    assert spec.model["channels"][0] == 64  # C = 64
    assert sum(spec.model["depths"]) + sum(spec.model["dec_depths"]) == 10  # ~10 blocks
    assert 8_000 <= spec.points <= 16_384  # 8-16k-point crops
    assert 2_000 <= spec.steps <= 3_000
    assert (spec.scenes, spec.eval_scenes) == (150, 30)
    card = PTv3(PTv3Config(**bench.MODELS["moe-proj"]))
    for config in spec.configs:
        model_args, _ = bench.CONFIGS[config]
        model = PTv3(PTv3Config(**{**model_args, **spec.model}))
        assert model.cfg.channels == (64, 128, 192)
        assert sum(p.numel() for p in model.parameters()) > 3 * sum(p.numel() for p in card.parameters())
    smoke = bench.TIERS["paper-smoke"]  # the GPU call's dry run on a CPU: the same models, seconds of work
    assert (smoke.configs, smoke.model) == (spec.configs, spec.model) and smoke.steps * smoke.scenes <= 10
    assert {"paper", "paper-smoke"} <= set(bench.GPU_TIERS)


def test_reporting_trains_no_paper_run_and_lists_the_cached_ones(monkeypatch, tmp_path):
    monkeypatch.setattr(bench.cache, "CACHE", tmp_path / "pointcloud")
    monkeypatch.setenv("MOELAB_BENCH_CACHED_ONLY", "1")
    miou = dict.fromkeys("ABCDEF", 0.5)
    run = {"config": "moe-proj", "seed": 0, "miou": miou, "usage": {}, "train_seconds": 150.0, "device": "H200"}
    run["parameters"] = {"total": 9_000_000, "active": 7_000_000}
    bench.store().put("paper-moe-proj-s0", run)
    assert bench._cached_runs("paper") == [run]
    lines, table = bench.paper_lines(bench._cached_runs("paper"))
    text = "\n".join(lines)
    assert "C = 64" in text and "10 blocks" in text and "2.5–2.5 min a run on H200" in text
    assert "| dense-active | not run |" in text and list(table) == ["moe-proj"]
    (tmp_path / "results").mkdir()
    start = time.perf_counter()
    bench.run("paper", tmp_path / "results")  # reads the cache; training a paper run takes hours
    assert time.perf_counter() - start < 10
    assert "| moe-proj | 9000k (7000k) |" in (tmp_path / "results" / "pointcloud.md").read_text()


def test_a_pre_generated_scan_is_the_scan_make_scan_makes(tmp_path):
    made = bench.load_scan(tmp_path, "C", 3, "val")
    (saved,) = list(tmp_path.glob("*/C-val-3.npz"))
    loaded = bench.load_scan(tmp_path, "C", 3, "val")
    fresh = make_scan("C", 3, "val")
    for scan in (made, loaded):
        assert np.array_equal(scan.xyz, fresh.xyz) and np.array_equal(scan.labels, fresh.labels)
        assert scan.rgb is None and np.array_equal(scan.intensity, fresh.intensity)
        assert scan.xyz.dtype == fresh.xyz.dtype and scan.labels.dtype == fresh.labels.dtype
    assert saved.stat().st_size > 0


def test_only_on_the_cpu_with_a_step_override_trains_and_caches_under_its_own_name(toy_paper, capsys):
    bench.main(["--tier", "paper", "--only", "moe-proj:0", "--device", "cpu", "--steps", "2"])
    out = bench.store().get("paper-2steps-moe-proj-s0")
    assert out["train"]["steps"] == 2 and out["train"]["points"] == 512
    assert out["model"]["channels"] == [16, 32] and out["model"]["proj"] == "moe"
    assert out["device"] == "cpu" and set(out["miou"]) == set("ABCDEF")
    assert "paper-moe-proj-s0" not in bench.store()  # never taken for a full-length run
    assert not list((toy_paper / "state").glob("*.pt"))  # a finished run leaves no state
    assert "step 2/2" in capsys.readouterr().out


def test_the_wall_budget_saves_the_state_and_the_next_call_resumes_from_its_step(toy_paper, capsys):
    args = ["--tier", "paper", "--only", "dense-active:1", "--device", "cpu", "--steps", "3"]
    with pytest.raises(SystemExit) as stopped:
        bench.main([*args, "--wall-minutes", "1e-6"])
    assert stopped.value.code == bench.UNFINISHED
    state = toy_paper / "state" / "paper-3steps-dense-active-s1.pt"
    assert torch.load(state, weights_only=False)["step"] == 1
    assert "paper-3steps-dense-active-s1" not in bench.store()
    first = capsys.readouterr().out
    assert "step 1/3" in first and "stopped by the wall-clock budget at step 1/3" in first
    bench.main(args)
    second = capsys.readouterr().out
    assert "step 1/3" not in second and "step 2/3" in second and "step 3/3" in second
    assert bench.store().get("paper-3steps-dense-active-s1")["train"]["steps"] == 3
    assert not state.exists()


def test_a_run_stopped_at_its_deadline_ends_where_an_uninterrupted_run_ends(tmp_path):
    cfg = TrainConfig(steps=4, batch_size=2, points=256, scenes=1, datasets=("A", "C"))
    pool = ScanPool(cfg.datasets, cfg.scenes)

    def model() -> PTv3:
        torch.manual_seed(0)
        return PTv3(PTv3Config(channels=(16, 32), depths=(1, 1), dec_depths=(1,), proj="moe"))

    whole = model()
    reference = train(whole, cfg, pool=pool)
    state = tmp_path / "run.pt"
    stopped = train(model(), cfg, pool=pool, state_path=state, deadline=time.perf_counter())
    assert stopped.steps == 1 and torch.load(state, weights_only=False)["step"] == 1
    resumed_model = model()
    resumed = train(resumed_model, cfg, pool=pool, state_path=state)
    assert resumed.steps == 4 and [s for s, _ in resumed.loss] == [0, 1, 2, 3]
    assert [v for _, v in resumed.loss] == pytest.approx([v for _, v in reference.loss], rel=1e-5)
    for a, b in zip(whole.parameters(), resumed_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_jobs_trains_each_pair_in_its_own_process_on_pre_generated_scans(monkeypatch, tmp_path, capsys):
    # One pair keeps this to seconds (a process that imports torch takes ~5 s here); the scans are made
    # in this process first, so --jobs finds them on disk as a resuming call does.
    monkeypatch.setattr(bench.cache, "CACHE", tmp_path / "cache")
    scans, spec = tmp_path / "scans", bench.TIERS["quick"]
    made = bench.pregenerate_scans(scans, replace(spec, scenes=0, eval_scenes=0), 1)
    for name in ("A", "B", "C", "D"):
        for i in range(spec.scenes):
            bench.load_scan(scans, name, i, "train")
    for name in "ABCDEF":
        bench.load_scan(scans, name, 0, "val")
    assert made < 1 and bench.pregenerate_scans(scans, spec, 2) < 1  # nothing left to make: no pool
    bench.main(
        [
            "--tier",
            "quick",
            "--jobs",
            "2",
            "--only",
            "moe-proj:0",
            "--steps",
            "1",
            "--threads",
            "1",
            "--scan-cache",
            str(scans),
        ]
    )
    result = bench.store().get("quick-1steps-moe-proj-s0")  # written by the run's own process
    assert result["train"]["steps"] == 1 and result["device"] == "cpu"
    log = (tmp_path / "cache" / "state" / "logs" / "quick-1steps-moe-proj-s0.log").read_text()
    assert "[pointcloud] moe-proj seed 0" in log and "step 1/1" in log  # the run's own process wrote it
    assert len(list(scans.glob("*/*.npz"))) == 3 * 4 + 1 * 6  # training scans of A-D, validation of A-F
    assert "1 of 1 finished" in capsys.readouterr().out
