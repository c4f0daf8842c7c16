"""``make bench-core``: the MoE layer and group attention on the CPU.

Three tables, each measured in one run: the MoE layer against per-expert loops and against
transformers' Mixtral block, group attention against full SDPA, and what recording a routing trace
adds to a forward pass.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.common import write_results


def run(tier: str, results: Path) -> None:
    from bench.kernels_cpu import group_attention_table
    from bench.moe_layer import moe_layer_table, trace_overhead_table

    moe_md, moe_json = moe_layer_table(tier)
    attn_md, attn_json = group_attention_table(tier)
    trace_md, trace_json = trace_overhead_table(tier)
    body = "# Core benchmarks (CPU)\n\n" + "\n\n".join((moe_md, attn_md, trace_md)) + "\n"
    data = {"tier": tier, "moe_layer": moe_json, "group_attention": attn_json, "trace_recording": trace_json}
    write_results(results, "core", body, data)
    print(body)
    print(json.dumps({"written": str(results / "core.md")}))
