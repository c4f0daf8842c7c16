"""The kernel benchmarks' dry run interprets the Triton kernels on the CPU: the interpreter must be on
before triton is imported, as in tests/kernels (whose fixture this reuses)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

from tests.kernels.conftest import triton_interpreted  # noqa: F401
