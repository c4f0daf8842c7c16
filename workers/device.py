"""Which device a worker offers, found without initialising CUDA in the worker's parent process
(forked children cannot reuse a CUDA context)."""

from __future__ import annotations

import os
import shutil
import subprocess


def describe_device() -> str:
    """A label for the worker-status list: the GPU's name from ``nvidia-smi``, or ``cpu``."""
    if os.environ.get("MOELAB_DEVICE"):
        return os.environ["MOELAB_DEVICE"]
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "" or not shutil.which("nvidia-smi"):
        return "cpu"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    names = [line.strip() for line in out.splitlines() if line.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        picked = [names[int(i)] for i in visible.split(",") if i.strip().isdigit() and int(i) < len(names)]
        names = picked or names
    return f"cuda ({', '.join(names)})" if names else "cpu"


def task_device() -> str:
    """The torch device a job runs on. Called inside the task, so CUDA starts in the child only.

    torch is imported only when a GPU may be present: a CPU-only worker keeps light jobs fast.
    """
    if os.environ.get("MOELAB_DEVICE"):
        return os.environ["MOELAB_DEVICE"]
    if describe_device() == "cpu":
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
