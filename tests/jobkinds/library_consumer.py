"""A test-only kind that takes library items (a model and a text dataset) and registers a new
dataset made from them, so lineage runs both ways: used by this job, made by this job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlcore.jobs import Dataset, JobContext, JobSpec, Model

spec = JobSpec(
    name="test-library-consumer",
    title="Read library items",
    summary="Summarises a model and a corpus from the library into a new dataset.",
    version=1,
    queue="cpu",
    soft_time_limit=60,
    time_limit=90,
    params=(
        Model(name="model", accepts=("hf-moe-lm",), help="An MoE language model."),
        Dataset(name="corpus", accepts=("text",), help="A text corpus."),
    ),
)


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    lines: list[str] = []
    if "model" in inputs:
        config = json.loads((Path(inputs["model"]) / "config.json").read_text())
        lines.append(f"model_type {config['model_type']}")
    if "corpus" in inputs:
        texts = sorted(p for p in Path(inputs["corpus"]).rglob("*") if p.is_file())
        lines += [f"{p.name} {sum(1 for line in p.read_text().splitlines() if line.strip())}" for p in texts]
    ctx.log("\n".join(lines))
    summary = ctx.workdir / "summary.txt"
    summary.write_text("\n".join(lines) + "\n")
    ctx.artifact("summary.txt", summary, "text/plain")
    ctx.register("text", summary, {"name": "summary of the inputs", "made_from": sorted(inputs)})
    return {"lines": len(lines)}
