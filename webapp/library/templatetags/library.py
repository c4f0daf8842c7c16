"""Library pieces on other apps' pages: a job's lineage panel and the promote-artifact button."""

from __future__ import annotations

from typing import Any

from django import template

from mlcore.items.registry import all_item_kinds
from webapp.library.selectors import lineage_of_job

register = template.Library()


@register.inclusion_tag("library/_job_lineage.html")
def job_lineage(job: Any) -> dict[str, Any]:
    return lineage_of_job(job)


@register.inclusion_tag("library/_promote.html", takes_context=True)
def promote_button(context: template.Context, job: Any, artifact: Any) -> dict[str, Any]:
    return {"job": job, "artifact": artifact, "kinds": kinds_for(artifact), "csrf_token": context.get("csrf_token")}


#: An artifact's media type as the library's upload formats name it (``mlcore.sniff``).
MEDIA_FORMATS = {
    "application/zip": "zip",
    "application/x-tar": "tar",
    "application/gzip": "tar",
    "text/plain": "txt",
    "text/csv": "csv",
    "application/json": "json",
    "application/jsonl": "jsonl",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/webp": "webp",
    "application/x-ply": "ply",
}


def kinds_for(artifact: Any) -> list[str]:
    """The library kinds an artifact could be, by its format: a video, a chart's JSON or a report
    is none (no "Add to library" then), and a ZIP is offered as the kinds archives can hold."""
    fmt = MEDIA_FORMATS.get(getattr(artifact, "media_type", ""), "")
    if not fmt:
        return []
    return [kind.name for kind in all_item_kinds() if fmt in kind.formats]


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
