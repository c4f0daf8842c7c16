"""Library pieces on other apps' pages: a job's lineage panel and the promote-artifact button."""

from __future__ import annotations

from typing import Any

from django import template

from webapp.library.kinds import ALL_KINDS
from webapp.library.selectors import lineage_of_job

register = template.Library()


@register.inclusion_tag("library/_job_lineage.html")
def job_lineage(job: Any) -> dict[str, Any]:
    return lineage_of_job(job)


@register.inclusion_tag("library/_promote.html", takes_context=True)
def promote_button(context: template.Context, job: Any, artifact: Any) -> dict[str, Any]:
    return {"job": job, "artifact": artifact, "kinds": ALL_KINDS, "csrf_token": context.get("csrf_token")}


#: The card's fields in reading order, with their labels; anything else follows, as recorded.
CARD_LABELS = {
    "architecture": "Architecture",
    "model_type": "Model type",
    "parameters": "Parameters",
    "layers": "Layers",
    "hidden_size": "Hidden size",
    "experts_per_layer": "Experts per layer",
    "top_k": "Top-k",
    "records": "Records",
    "sources": "Sources",
    "files": "Files",
    "bytes": "Unpacked size",
}


@register.filter
def card_rows(card: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``(key, label, value)`` for the card, known fields first in a fixed order (JSON keeps none)."""
    known = [key for key in CARD_LABELS if key in card]
    rest = sorted(key for key in card if key not in CARD_LABELS)
    return [(key, CARD_LABELS.get(key, key.replace("_", " ").capitalize()), card[key]) for key in known + rest]


@register.filter
def thousands(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)
