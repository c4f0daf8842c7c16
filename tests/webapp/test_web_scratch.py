"""What a killed web process leaves in the temporary directory is swept; a folder in use never is
(``webapp/scratch.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.workers.processes import ROOT
from webapp.accounts.models import Team
from webapp.jobs.services import job_submit
from webapp.scratch import MIN_AGE_S, PREFIX, UPLOAD_AGE_S, scratch_folder, sweep


def age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_folder_in_use_survives_the_sweep_and_goes_when_its_user_is_done(tmp_root: Path) -> None:
    with scratch_folder("submit") as folder:
        (folder / "upload.zip").write_bytes(b"a user's file")
        age(folder, 10 * MIN_AGE_S)
        assert folder.parent == tmp_root and folder.name.startswith(f"{PREFIX}submit-")
        assert oct(folder.stat().st_mode & 0o777) == "0o700"
        assert sweep() == [] and (folder / "upload.zip").exists()
    assert not folder.exists()


def test_the_sweep_removes_the_folder_of_a_killed_process(tmp_root: Path) -> None:
    code = (
        "import sys, time; from webapp.scratch import scratch_folder\n"
        "with scratch_folder('submit') as f:\n"
        "    (f / 'upload.zip').write_bytes(b'x'); print(f, flush=True); time.sleep(600)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_root), "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    try:
        assert child.stdout is not None
        folder = Path(child.stdout.readline().strip())
        age(folder, 10 * MIN_AGE_S)
        assert sweep() == [], "the live process's folder was swept"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert (folder / "upload.zip").exists()  # a SIGKILL runs no cleanup
    assert sweep() == [folder] and not folder.exists()


def test_a_fresh_unlocked_folder_is_left_for_its_process_to_lock(tmp_root: Path) -> None:
    folder = tmp_root / f"{PREFIX}submit-abc"
    folder.mkdir()
    assert sweep() == [] and folder.exists()
    assert sweep(now=time.time() + 2 * MIN_AGE_S) == [folder]


def test_old_upload_spool_files_go_and_recent_ones_stay(tmp_root: Path, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    old, recent = spool / "tmpa.upload.zip", spool / "tmpb.upload.ply"
    old.write_bytes(b"left by a killed request")
    recent.write_bytes(b"a request still streaming")
    age(old, UPLOAD_AGE_S + 60)
    unrelated = tmp_root / "someone-elses-file"
    unrelated.write_bytes(b"not ours")
    age(unrelated, 10 * UPLOAD_AGE_S)
    assert sweep(uploads=spool) == [old]
    assert recent.exists() and unrelated.exists()


def test_a_web_process_sweeps_as_it_starts(tmp_root: Path) -> None:
    orphan = tmp_root / f"{PREFIX}submit-orphan"
    (orphan / "upload").mkdir(parents=True)
    age(orphan, 10 * MIN_AGE_S)
    env = {**os.environ, "TMPDIR": str(tmp_root), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", "import webapp.wsgi"], check=True, cwd=ROOT, env=env, timeout=120)
    assert not orphan.exists()


@pytest.mark.django_db
def test_a_submission_leaves_nothing_in_the_temporary_directory(tmp_root: Path, team: Team, member: User) -> None:
    upload = SimpleUploadedFile("notes.txt", b"a note for the router\n", content_type="text/plain")
    job_submit(team=team, user=member, kind="test-exercise", raw_params={"steps": 2}, files={"notes": [upload]})
    assert list(tmp_root.iterdir()) == []
