"""Library pieces on other apps' pages: a job's lineage panel, and beside each of its files either
"in the library" or the "Add to library" button."""

from __future__ import annotations

from typing import Any

from django import template

from webapp.library.offers import Offer, offer_for
from webapp.library.selectors import lineage_of_job, made_by

register = template.Library()


@register.inclusion_tag("library/_job_lineage.html")
def job_lineage(job: Any) -> dict[str, Any]:
    return lineage_of_job(job)


@register.inclusion_tag("library/_promote.html", takes_context=True)
def promote_button(context: template.Context, job: Any, artifact: Any, writable: bool = False) -> dict[str, Any]:
    """A file of a finished job: "in the library" with a link when the job already put it there;
    else, to a member who may write and for a job that succeeded, "Add to library" with the kinds
    its content can be (:mod:`webapp.library.offers`)."""
    offer = Offer()
    if job.is_terminal:
        offer = offer_for(artifact, made_by(job), may_add=writable and job.status == "succeeded")
    return {"job": job, "artifact": artifact, "offer": offer, "csrf_token": context.get("csrf_token")}


#: The card's fields in reading order, with their labels; anything else follows, as recorded.
CARD_LABELS = {
    "architecture": "Architecture",
    "model_type": "Model type",
    "parameters": "Parameters",
    "layers": "Layers",
    "moe_layers": "MoE layers",
    "hidden_size": "Hidden size",
    "experts_per_layer": "Experts per layer",
    "top_k": "Top-k",
    "records": "Records",
    "points": "Points",
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


def _short(count: int) -> str:
    for size, unit in ((10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= size:
            return f"{count / size:.1f}{unit}"
    return str(count)


@register.filter
def card_summary(card: dict[str, Any]) -> str:
    """One line for the library's list: architecture, parameters, experts, top-k; records, source."""
    parts = []
    if card.get("architecture"):
        parts.append(str(card["architecture"]))
    if isinstance(card.get("parameters"), int):
        parts.append(f"{_short(card['parameters'])} parameters")
    experts = card.get("experts_per_layer", card.get("experts"))
    if experts:
        parts.append(f"{experts} experts")
    if card.get("top_k"):
        parts.append(f"top-{card['top_k']}")
    if isinstance(card.get("records"), int):
        parts.append(f"{card['records']:,} record{'' if card['records'] == 1 else 's'}")
    if card.get("source"):
        parts.append(str(card["source"]))
    return " · ".join(parts)
