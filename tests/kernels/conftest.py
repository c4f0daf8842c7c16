"""The kernels' tests run the Triton kernels in the interpreter, which must be on before triton is imported."""

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def force_backend(monkeypatch: pytest.MonkeyPatch):
    """Pin the dispatcher to one backend for a test: `force_backend("triton")`."""

    def force(name: str) -> None:
        monkeypatch.setenv("MOELAB_KERNELS", name)

    return force


@pytest.fixture
def triton_interpreted() -> None:
    """Skip unless the Triton kernels in this process were compiled for the interpreter (CPU)."""
    import torch

    from kernels.dispatch import triton_available

    if not triton_available():
        pytest.skip("triton is not installed")
    from kernels.fused_moe import _fused_moe_kernel

    # Triton decides at decoration time, so the kernels must have been imported with the variable set.
    if not torch.cuda.is_available() and type(_fused_moe_kernel).__name__ != "InterpretedFunction":
        pytest.skip("run with TRITON_INTERPRET=1 set before Python starts (scripts/test.sh sets it)")
