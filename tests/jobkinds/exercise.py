"""A test-only kind that exercises every part of ``ctx``: progress, logs, metrics, charts,
artifacts, registration, cancellation, user errors and internal errors, and slow steps for
killing a worker mid-job."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from mlcore.jobs import Choice, File, Float, Int, JobContext, JobError, JobSpec, Seed

spec = JobSpec(
    name="test-exercise",
    title="Exercise the job contract",
    summary="Counts steps, reporting through every ctx channel.",
    version=1,
    queue="cpu",
    soft_time_limit=60,
    time_limit=90,
    params=(
        Int(name="steps", default=3, min=1, max=10_000, help="How many steps to count."),
        Float(name="step_seconds", default=0.0, min=0.0, max=60.0),
        Choice(name="outcome", default="succeed", options=("succeed", "user-error", "crash")),
        Int(name="fail_at", default=0, min=0, max=10_000, help="Step at which to fail (with outcome)."),
        File(name="notes", formats=("txt", "csv", "json"), max_bytes=1_000_000, help="An optional text file."),
        Seed(name="seed"),
    ),
    validate=lambda p: [("fail_at", "Must not exceed steps.")] if p["fail_at"] > p["steps"] else [],
    guide="The loss curve should fall as 1/(step+1).",
)


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    steps = params["steps"]
    if "notes" in inputs:
        ctx.log(f"notes: {Path(inputs['notes']).read_text()[:200]}")
    points = []
    for step in range(steps):
        if ctx.cancelled():
            ctx.log(f"cancelled at step {step}")
            return {"stopped_at": step}
        if params["outcome"] != "succeed" and step == params["fail_at"]:
            if params["outcome"] == "user-error":
                raise JobError(f"Asked to fail at step {step}.")
            raise RuntimeError(f"crash at step {step}")
        loss = 1.0 / (step + 1)
        points.append({"step": step, "loss": loss})
        ctx.metric("loss", loss, step=step)
        ctx.log(f"step {step}: loss {loss:.4f}")
        ctx.progress((step + 1) / steps, f"step {step + 1} of {steps}")
        ctx.chart(
            "loss",
            {
                "$schema": "https://vega.github.io/schema/vega-lite/v6.json",
                "title": "Loss",
                "data": {"values": points},
                "mark": "line",
                "encoding": {
                    "x": {"field": "step", "type": "quantitative", "title": "Step"},
                    "y": {"field": "loss", "type": "quantitative", "title": "Loss"},
                },
            },
        )
        if params["step_seconds"]:
            time.sleep(params["step_seconds"])
    ctx.metric("final_loss", points[-1]["loss"])
    ctx.metric("seed", params["seed"])
    table = ctx.workdir / "losses.csv"
    table.write_text("step,loss\n" + "".join(f"{p['step']},{p['loss']}\n" for p in points))
    ctx.artifact("losses.csv", table, "text/csv")
    summary = ctx.workdir / "summary.json"
    summary.write_text(json.dumps({"steps": steps, "seed": params["seed"]}))
    ctx.artifact("summary.json", summary, "application/json")
    ctx.register("text", table, {"records": steps})
    return {"steps": steps}
