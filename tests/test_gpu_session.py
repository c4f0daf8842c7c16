"""scripts/gpu-session.sh is run on a lent GPU only now and then, so its dry run here keeps every command
line it starts in step with the CLIs it calls (on the CPU, with tiny budgets, outside the project's caches)."""

import json
import os
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_session_dry_run_runs_every_part_and_packs_what_comes_back(tmp_path: Path) -> None:
    env = {**os.environ, "OUT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        ["bash", "scripts/gpu-session.sh", "--dry-run", "--parts", "kernels,pointcloud,molm"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "all kernels match their twins" in (tmp_path / "kernels.txt").read_text()
    session = (tmp_path / "session.log").read_text()
    assert "pointcloud: finished" in session and "molm: out of time, state saved" in session

    with tarfile.open(tmp_path / "pointcloud.tar.gz") as archive:
        (member,) = [m for m in archive.getmembers() if m.name.endswith("pointcloud-cache.jsonl")]
        rows = archive.extractfile(member).read().decode().splitlines()  # type: ignore[union-attr]
    runs = sorted(json.loads(row)["key"] for row in rows)
    assert runs == [f"paper-smoke-{config}-s0" for config in ("dense-active", "moe-proj", "ppt-active")]
    with tarfile.open(tmp_path / "molm.tar.gz") as archive:
        assert any(n.endswith("train_log.jsonl") for n in archive.getnames())
    # The dry run never touches the project's own caches.
    assert "paper-smoke-" not in (ROOT / "bench" / "cache" / "pointcloud.jsonl").read_text()
