"""Template helpers for pages that explain themselves: Markdown, a kind's guide and a job's summary line."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from mlcore.jobs.registry import UnknownKind, get_kind
from webapp.guides.markdown import render, render_inline

register = template.Library()


@register.filter
def markdown(text: str) -> SafeString:
    return render(text or "")


@register.filter
def markdown_inline(text: str) -> SafeString:
    return render_inline(text or "")


@register.simple_tag
def kind_guide(kind_name: str) -> SafeString:
    """The kind's "how to read this" as HTML; empty for a kind no longer registered."""
    try:
        return render(get_kind(kind_name).spec.guide)
    except UnknownKind:
        return SafeString("")


@register.simple_tag
def job_summary(job: Any) -> str:
    """The one-line summary a finished job's kind derives from its scalar metrics (``JobSpec.summarize``)."""
    if job.status != "succeeded":
        return ""
    try:
        spec = get_kind(job.kind).spec
    except UnknownKind:
        return ""
    return spec.summary_line((job.metrics or {}).get("scalars", {}))
