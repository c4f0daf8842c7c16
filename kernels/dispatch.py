"""Which implementation runs: the Triton kernel on CUDA, its PyTorch twin elsewhere.

`MOELAB_KERNELS=triton|torch` overrides the choice. Forcing `triton` on CPU tensors needs the Triton
interpreter (`TRITON_INTERPRET=1`, set before triton is imported); that is how the tests run the kernels.
"""

from __future__ import annotations

import os
from collections import Counter

import torch

BACKENDS = ("triton", "torch")

# Every Triton launch is counted by kernel name, so tests can prove the Triton path really ran.
LAUNCHES: Counter[str] = Counter()


def triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def kernel_backend(device: torch.device | str | None = None) -> str:
    """'triton' or 'torch': what the dispatcher picks now for tensors on `device` (default: CUDA if present)."""
    forced = os.environ.get("MOELAB_KERNELS", "").strip().lower()
    if forced and forced not in BACKENDS:
        raise ValueError(f"MOELAB_KERNELS={forced!r} is not one of {BACKENDS}; unset it or pick one of those")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    on_cuda = torch.device(device).type == "cuda"
    if forced == "torch":
        return "torch"
    if forced == "triton":
        if not triton_available():
            raise RuntimeError("MOELAB_KERNELS=triton but triton is not installed; pip install triton or unset it")
        if not on_cuda and not interpreter_on():
            raise RuntimeError(
                "MOELAB_KERNELS=triton on CPU tensors needs the Triton interpreter: "
                "export TRITON_INTERPRET=1 before starting Python"
            )
        return "triton"
    return "triton" if on_cuda and triton_available() else "torch"
