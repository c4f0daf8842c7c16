"""The dispatcher: Triton on CUDA, the twin elsewhere, and MOELAB_KERNELS to override."""

from __future__ import annotations

import pytest
import torch

from kernels import kernel_backend


def test_it_picks_the_twin_for_cpu_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOELAB_KERNELS", raising=False)
    assert kernel_backend("cpu") == "torch"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_it_picks_triton_for_cuda_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MOELAB_KERNELS", raising=False)
    assert kernel_backend("cuda") == "triton"


def test_the_environment_can_force_the_twin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOELAB_KERNELS", "torch")
    assert kernel_backend("cuda") == "torch"


def test_forcing_triton_on_cpu_needs_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOELAB_KERNELS", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1"):
        kernel_backend("cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernel_backend("cpu") == "triton"


def test_it_rejects_an_unknown_backend_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOELAB_KERNELS", "cuda")
    with pytest.raises(ValueError, match="MOELAB_KERNELS"):
        kernel_backend()
