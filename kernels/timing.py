"""One timer for the kernels' benchmarks (kernels/ imports nothing from mlcore, so it has its own)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def time_ms(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    """Median wall time of `fn` in milliseconds after one warm-up call (which also compiles Triton kernels)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))
