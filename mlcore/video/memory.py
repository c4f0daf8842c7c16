"""What a video DiT job will need, from its configuration alone (no torch: the web process calls this).

The estimate is deliberately conservative, so that a job the worker cannot hold is refused before
it starts rather than killed half-way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Floats kept alive per token and channel in one block during inference (qkv, attention output,
#: the FFN's hidden layer, norms and residuals) with head-room for the allocator.
_FLOATS_PER_TOKEN_CHANNEL = 24
_BYTES = 4  # float32


def token_count(config: Mapping[str, Any], frames: int, size: int) -> int:
    pt, ph, pw = config["patch_size"]
    return (frames // pt) * (size // ph) * (size // pw)


def estimate_memory_bytes(config: Mapping[str, Any], *, batch: int, frames: int, size: int, attention: str) -> int:
    """Peak bytes to sample ``batch`` clips with classifier-free guidance (which doubles the rows).

    Full attention is budgeted as if the N×N scores were materialised per head (the CPU math
    kernel does); MoGA as the largest balanced group plus the per-frame branch; local as the
    per-frame branch, the larger of its two static windows.
    """
    tokens = token_count(config, frames, size)
    rows = 2 * batch
    width = max(int(config["dim"]), int(config.get("ffn_width", 4 * config["dim"])))
    activations = rows * tokens * width * _FLOATS_PER_TOKEN_CHANNEL * _BYTES
    per_frame = tokens // max(1, frames // config["patch_size"][0])
    pairs = tokens * tokens if attention == "full" else tokens * per_frame
    if attention == "moga":
        pairs += tokens * tokens // max(1, int(config.get("num_groups", 4)))
    scores = rows * int(config["heads"]) * pairs * _BYTES * 3  # scores, softmax, and the mask or grad
    return int(activations + scores + 256 * 2**20)  # + the interpreter, torch and the weights


def sampling_seconds(config: Mapping[str, Any], params: Mapping[str, Any]) -> float:
    """A rough CPU time: ~2 GFLOP/s effective, 2·params-per-token FLOPs per token, two rows per clip."""
    tokens = token_count(config, params["frames"], params["resolution"])
    dim = int(config["dim"])
    per_token = 2 * 12 * dim * dim * 4 + 4 * tokens * dim  # 4 blocks of projections, FFN and attention
    return 2 * params["clips"] * tokens * per_token * params["steps"] / 2e9
