"""What every job records about where it ran: code revision, packages, host, device, inputs."""

from __future__ import annotations

import hashlib
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "triton", "numpy", "diffusers", "open3d-cpu", "celery", "django")
_ROOT = Path(__file__).resolve().parents[2]


def git_revision() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def sha256_of(path: Path) -> str:
    """sha256 of a file, or of a directory's files in sorted order with their relative names."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()


def collect(*, seed: int | None, device: str, inputs: dict[str, Path | list[Path]]) -> dict[str, Any]:
    hashes: dict[str, str | list[str]] = {}
    for name, value in inputs.items():
        hashes[name] = [sha256_of(p) for p in value] if isinstance(value, list) else sha256_of(value)
    return {
        "git_revision": git_revision(),
        "packages": package_versions(),
        "python": platform.python_version(),
        "seed": seed,
        "host": socket.gethostname(),
        "device": device,
        "input_sha256": hashes,
    }
