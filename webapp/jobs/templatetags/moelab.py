"""Template pieces every page shares: status pills, progress bars, durations, the team switcher."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from webapp.accounts.models import Membership, Role
from webapp.accounts.selectors import teams_for_user
from webapp.jobs.models import Job

register = template.Library()


@register.simple_tag
def status_pill(status: str) -> SafeString:
    label = Job.Status(status).label if status in Job.Status.values else status
    return format_html('<span class="pill pill-{}" data-status="{}">{}</span>', status, status, label)


@register.inclusion_tag("jobs/includes/progress.html")
def progress_bar(job: Job, large: bool = False) -> dict[str, Any]:
    # A finished job's bar is full whatever its last progress report said, so "done" reads as done.
    fraction = 1.0 if job.status == Job.Status.SUCCEEDED else max(0.0, min(1.0, job.progress or 0.0))
    return {"job": job, "percent": round(fraction * 100, 1), "large": large}


@register.filter
def duration(value: timedelta | None) -> str:
    """``1h 02m``, ``3m 05s`` or ``4.2s``: short enough for a table cell."""
    if value is None:
        return "—"
    seconds = value.total_seconds()
    if seconds < 10:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


@register.filter
def distinct(values: Any) -> list[Any]:
    """The values in their first order, each once (a worker lists a queue per pool process)."""
    return list(dict.fromkeys(values or []))


@register.filter
def seconds_in_words(value: int | float | None) -> str:
    """A time limit as a person says it: ``1 h 5 min``, ``30 min``, ``45 s``."""
    if value is None:
        return "—"
    seconds = int(value)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(p for p in parts if p) or "0 s"


@register.filter
def param_value(value: Any) -> str:
    """A parameter value as a person would type it: lists comma-separated, None as a dash."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


@register.filter
def metric_value(value: Any) -> str:
    """Six significant digits; whole numbers (seeds, counts stored as floats) in full."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    return param_value(value)


@register.filter
def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


@register.inclusion_tag("includes/team_switcher.html", takes_context=True)
def team_switcher(context: template.Context) -> dict[str, Any]:
    request = context["request"]
    return {"teams": list(teams_for_user(request.user)), "current": context.get("team")}


@register.filter
def get_item(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key)


@register.simple_tag(takes_context=True)
def can_write(context: template.Context, team: Any) -> bool:
    """Whether the person may submit in ``team`` (owners and members), for showing write links."""
    membership = context.get("membership")
    if membership is not None and getattr(membership, "team_id", None) == getattr(team, "pk", None):
        return bool(membership.can_write)
    user = context["request"].user
    return Membership.objects.filter(team=team, user=user, role__in=(Role.OWNER, Role.MEMBER)).exists()
