"""``make bench-core``: the MoE layer and group attention on the CPU (issue 3).

Two tables, each a set of speed ratios measured in one run: the MoE layer against a per-expert
loop and against transformers' Mixtral block, and group attention against full SDPA.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlcore.bench.common import write_results


def run(tier: str, results: Path) -> None:
    from kernels.bench_cpu import group_attention_table
    from mlcore.moe.bench import moe_layer_table

    moe_md, moe_json = moe_layer_table(tier)
    attn_md, attn_json = group_attention_table(tier)
    body = "# Core benchmarks (CPU)\n\n" + moe_md + "\n\n" + attn_md + "\n"
    write_results(results, "core", body, {"tier": tier, "moe_layer": moe_json, "group_attention": attn_json})
    print(body)
    print(json.dumps({"written": str(results / "core.md")}))
