"""The home page's cards: the four flagship jobs and the research tools, built from the registry.

A flagship is an area (compression, watermarking, point clouds, video) matched by kind-name prefix,
so a kind that lands later shows up with no change here; until one is registered its card says
"coming soon" instead of linking to a form that does not exist. Every other registered kind is a
research tool. Papers and promises come from ``docs/guides/NAME.md`` front matter when present.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlcore.jobs.registry import all_kinds
from mlcore.jobs.spec import JobSpec
from webapp.guides.content import kind_doc


@dataclass(frozen=True)
class Area:
    key: str
    title: str
    promise: str
    paper: str
    prefixes: tuple[str, ...]
    #: A page of the area's own (a URL name) the card's button opens instead of one kind's form.
    page: str = ""
    page_label: str = ""  # that button's words


FLAGSHIPS: tuple[Area, ...] = (
    Area(
        "compress",
        "Compress an MoE model",
        "Prune a quarter of a model's experts and see exactly what it costs in perplexity and accuracy.",
        "MoNE: Mixture of Novices and Experts (arXiv 2507.00390)",
        ("compress-",),
    ),
    Area(
        "watermark",
        "Watermark images",
        # Not "invisible and robust": on photos the demo markers' marks do not yet read back (see the guide).
        "Mark your own images with your team's key, or check whether an image carries a mark.",
        "MOLM: Mixture of LoRA Markers",
        ("watermark-",),
        page="portal:watermark",
        page_label="Mark or check images",
    ),
    Area(
        "pointcloud",
        "Segment point clouds",
        # The button opens the first kind with a sample (pointcloud-segment): say what it does.
        "Label every point of a 3D scan with a mixture-of-experts point transformer, then explore it in 3D.",
        "Point-MoE: multi-dataset 3D semantic segmentation with experts",
        ("pointcloud-",),
    ),
    Area(
        "video",
        "Generate video",
        "Sample short clips from a video diffusion transformer whose attention routes tokens into groups.",
        "MoGA: Mixture-of-Groups Attention (with ProMoE's routed FFN)",
        ("video-",),
    ),
)


@dataclass(frozen=True)
class Card:
    title: str
    promise: str
    paper: str
    spec: JobSpec | None = None  # the kind "Try with a sample" opens; None: coming soon
    others: list[JobSpec] = field(default_factory=list)  # further kinds of the same area
    page: str = ""  # the area's own page (a URL name) the button opens, when it has one
    page_label: str = ""

    @property
    def available(self) -> bool:
        return self.spec is not None


def _card(spec: JobSpec, others: list[JobSpec] | None = None, area: Area | None = None) -> Card:
    meta = kind_doc(spec.name).meta
    if area is not None and area.page:
        # The card opens the area's page, not this kind's form: it promises what the page offers.
        return Card(
            title=area.title,
            promise=area.promise,
            paper=area.paper,
            spec=spec,
            page=area.page,
            page_label=area.page_label,
        )
    return Card(
        title=area.title if area else spec.title,
        promise=meta.get("promise") or (area.promise if area else spec.summary),
        paper=meta.get("paper") or (area.paper if area else ""),
        spec=spec,
        others=others or [],
    )


def home_cards() -> tuple[list[Card], list[Card]]:
    """(flagship cards in a fixed order, research-tool cards in registry order)."""
    specs = [kind.spec for kind in all_kinds()]
    claimed: set[str] = set()
    flagships = []
    for area in FLAGSHIPS:
        members = [s for s in specs if s.name.startswith(area.prefixes)]
        claimed.update(s.name for s in members)
        if not members:
            flagships.append(Card(title=area.title, promise=area.promise, paper=area.paper))
            continue
        # The first member with a sample is what the button runs; a kind without one still links to its form.
        primary = next((s for s in members if s.sample), members[0])
        flagships.append(_card(primary, [s for s in members if s is not primary], area))
    tools = [_card(s) for s in specs if s.name not in claimed]
    return flagships, tools
