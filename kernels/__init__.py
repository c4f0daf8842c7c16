"""Triton kernels with PyTorch twins; the dispatcher picks Triton on CUDA and the twin elsewhere.

Imports nothing from mlcore, webapp or workers. Set `TRITON_INTERPRET=1` before importing this
package to run the Triton kernels on CPU (fp32 only).
"""

from kernels.dispatch import kernel_backend
from kernels.fused_moe import fused_moe
from kernels.group_attention import group_attention

__all__ = ["fused_moe", "group_attention", "kernel_backend"]
