"""CPU benchmark of group attention (the twin) against full SDPA, for `make bench-core`.

For N tokens in G balanced groups (tokens interleaved at random, so the sort and the gathers are
part of the measured time) group attention needs Σ n_g² / N² ≈ 1/G of full attention's FLOPs; the
table shows how close the measured speed-up comes to that bound. Forward pass, no gradients.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from kernels.group_attention import group_attention_torch
from kernels.timing import time_ms

HEADS, HEAD_DIM = 2, 64
TIERS: dict[str, dict[str, Any]] = {
    "quick": {"cases": [(4096, 4), (4096, 8), (4096, 16), (16384, 8)], "repeats": 3},
    "full": {
        "cases": [(n, g) for n in (4096, 16384, 32768) for g in (4, 8, 16)],
        "repeats": 3,
    },
}


def balanced_groups(n_tokens: int, n_groups: int, seed: int = 0) -> torch.Tensor:
    """[1, N] group ids: every group gets ⌊N/G⌋ or ⌈N/G⌉ tokens, scattered over the sequence."""
    shuffle = torch.randperm(n_tokens, generator=torch.Generator().manual_seed(seed))
    return (shuffle % n_groups)[None]


def measure(
    n_tokens: int, n_groups: int, repeats: int, seed: int = 0, sdpa_seconds: float | None = None
) -> dict[str, float]:
    """One row; pass `sdpa_seconds` to reuse full attention's time at this length (it does not depend on G)."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, HEADS, n_tokens, HEAD_DIM, generator=gen) for _ in range(3))
    groups = balanced_groups(n_tokens, n_groups, seed)
    sizes = torch.bincount(groups[0], minlength=n_groups).double()
    cpu = torch.device("cpu")
    with torch.no_grad():
        full = sdpa_seconds or time_ms(lambda: F.scaled_dot_product_attention(q, k, v), cpu, repeats) / 1e3
        grouped = time_ms(lambda: group_attention_torch(q, k, v, groups), cpu, repeats) / 1e3
    flop_fraction = float((sizes**2).sum() / n_tokens**2)
    return {
        "tokens": n_tokens,
        "groups": n_groups,
        "sdpa_s": full,
        "group_s": grouped,
        "speedup": full / grouped,
        "flop_fraction": flop_fraction,
        "ideal_speedup": 1 / flop_fraction,
        # FLOPs of QKᵀ and PV: 2 GEMMs of 2·n²·d each, per head.
        "group_gflops": 4 * float((sizes**2).sum()) * HEAD_DIM * HEADS / grouped / 1e9,
    }


def group_attention_table(tier: str) -> tuple[str, dict]:
    """(markdown table, json-able dict) of group attention vs full SDPA for the tier's (tokens, groups) cases."""
    if tier not in TIERS:
        raise ValueError(f"tier must be one of {sorted(TIERS)}, got {tier!r}")
    settings = TIERS[tier]
    rows: list[dict[str, float]] = []
    sdpa_seconds: dict[int, float] = {}
    for n, g in settings["cases"]:
        rows.append(measure(n, g, settings["repeats"], sdpa_seconds=sdpa_seconds.get(n)))
        sdpa_seconds[n] = rows[-1]["sdpa_s"]
    lines = [
        f"## Group attention (twin) vs full SDPA, CPU fp32, forward, 1×{HEADS} heads×{HEAD_DIM}",
        "",
        "| tokens | groups | SDPA (s) | group (s) | speed-up | FLOP fraction | ideal speed-up | group GFLOP/s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['tokens']} | {r['groups']} | {r['sdpa_s']:.3f} | {r['group_s']:.3f} | {r['speedup']:.1f}x "
        f"| {r['flop_fraction']:.3f} | {r['ideal_speedup']:.1f}x | {r['group_gflops']:.1f} |"
        for r in rows
    ]
    return "\n".join(lines), {
        "heads": HEADS,
        "head_dim": HEAD_DIM,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }


if __name__ == "__main__":
    import sys

    print(group_attention_table(sys.argv[1] if len(sys.argv) > 1 else "quick")[0])
