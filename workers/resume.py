"""Where a job keeps what lets a later attempt continue it: the resume folder.

A long job whose worker dies (the OOM killer, a hard time limit, ``docker kill``) loses its scratch
folder (:mod:`workers.scratch`). What it finished is worth keeping: a layer-by-layer calibration
of a 14 GB checkpoint commits its progress after every decoder layer
(:class:`mlcore.hf.sequential.PassCheckpoint`). The kind writes that progress under
``ctx.resume_dir``, a folder named by what the job computes: its team, kind, parameters, the sha256
of every input (from its provenance) and the code revision. A redelivered attempt, or a re-run with
the same inputs and parameters, gets the same folder and continues there; anything else gets
another folder, so a team never continues another team's work, nor work on other inputs.

The folder is made by the kind only when it has something to keep, removed when the job succeeds
or is cancelled, kept when it fails (that is the point), and swept after ``RESUME_DAYS`` without a
write. It lives under ``MOELAB_RESUME_DIR``: a volume every GPU worker mounts, in production, so an
attempt on another host continues as well.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def resume_folder(root: Path, *, team: object, kind: str, params: dict[str, Any], provenance: dict[str, Any]) -> Path:
    """The folder of the job that computes this (module docstring); not created here."""
    what = {
        "team": str(team),
        "kind": kind,
        "params": params,
        "inputs": provenance.get("input_sha256", {}),
        "code": provenance.get("git_revision", ""),
    }
    digest = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()
    return Path(root) / digest


def forget(folder: Path | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def sweep_resume(root: Path, *, days: float, now: float | None = None) -> list[Path]:
    """Remove resume folders nothing has written to for ``days``; returns what went."""
    now = time.time() if now is None else now
    removed = []
    try:
        folders = [p for p in Path(root).iterdir() if p.is_dir()]
    except FileNotFoundError:
        return removed
    for folder in folders:
        newest = max((p.stat().st_mtime for p in folder.rglob("*")), default=folder.stat().st_mtime)
        if now - newest > days * 86400:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    if removed:
        log.warning("removed %d resume folder(s) unused for %g days", len(removed), days)
    return removed
