"""The resume folder: one per computation, never shared across teams or inputs, swept when stale."""

import os
import time
from pathlib import Path

from workers.resume import forget, resume_folder, sweep_resume

RECORD = {"input_sha256": {"model": "a" * 64}, "git_revision": "abc123", "host": "gpu-1"}


def folder(root: Path, **changes: object) -> Path:
    what = {"team": 1, "kind": "compress-moe", "params": {"ratios": [0.25], "load": "auto"}, "provenance": RECORD}
    what.update(changes)
    return resume_folder(root, **what)  # type: ignore[arg-type]


def test_a_re_run_of_the_same_computation_on_another_host_gets_the_same_folder(tmp_path: Path) -> None:
    assert folder(tmp_path) == folder(tmp_path, provenance={**RECORD, "host": "gpu-2"})
    assert not folder(tmp_path).exists(), "the kind creates the folder, not the worker"


def test_another_team_other_inputs_parameters_or_code_get_another_folder(tmp_path: Path) -> None:
    mine = folder(tmp_path)
    assert folder(tmp_path, team=2) != mine
    assert folder(tmp_path, params={"ratios": [0.5], "load": "auto"}) != mine
    assert folder(tmp_path, provenance={**RECORD, "input_sha256": {"model": "b" * 64}}) != mine
    assert folder(tmp_path, provenance={**RECORD, "git_revision": "def456"}) != mine


def test_the_sweep_removes_folders_left_unwritten_for_days_and_keeps_fresh_ones(tmp_path: Path) -> None:
    stale, fresh = tmp_path / "stale", tmp_path / "fresh"
    for path in (stale, fresh):
        (path / "calibration").mkdir(parents=True)
        (path / "calibration" / "progress.json").write_text("{}")
    old = time.time() - 8 * 86400
    for path in (stale / "calibration" / "progress.json", stale / "calibration", stale):
        os.utime(path, (old, old))
    assert sweep_resume(tmp_path, days=7) == [stale]
    assert fresh.exists() and not stale.exists()


def test_forget_removes_a_folder_and_tolerates_none_or_a_missing_one(tmp_path: Path) -> None:
    (tmp_path / "f" / "x").mkdir(parents=True)
    forget(tmp_path / "f")
    forget(tmp_path / "f")
    forget(None)
    assert not (tmp_path / "f").exists()
