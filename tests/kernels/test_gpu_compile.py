"""The Triton kernels compile for a real GPU target, not only run in the interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kernels


def test_the_triton_kernels_compile_for_a_hopper_gpu(tmp_path: Path) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path), "TRITON_DEFAULT_FP_FUSION": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "tests.kernels.compile_for_gpu"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=Path(kernels.__file__).parent.parent,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("compiled") == 4
