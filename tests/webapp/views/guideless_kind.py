"""A job kind without a "how to read this" guide: the guide tests register it to show they catch one."""

from __future__ import annotations

from typing import Any

from mlcore.jobs import Int, JobSpec

spec = JobSpec(
    name="test-guideless",
    title="A kind nobody explained",
    summary="Registered only by the guide tests.",
    version=1,
    queue="cpu",
    params=(Int(name="steps", default=1, min=1, max=3),),
)


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: Any) -> None:
    ctx.progress(1.0, "done")
