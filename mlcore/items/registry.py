"""The registry of item kinds: an explicit list, as :mod:`mlcore.jobs.registry` lists job kinds.

Adding a kind is one :class:`~mlcore.items.kind.ItemKind` in :mod:`mlcore.items.models` or
:mod:`mlcore.items.datasets` (with its check) and one line here; the web's forms, API, library
pages and ingest read this list, so nothing in ``webapp/`` changes. Importing it imports no torch.
Django-free; the library's ``kind`` column takes its choices from :data:`ALL_KINDS`.
"""

from __future__ import annotations

from collections.abc import Iterable

from mlcore.items import datasets, models
from mlcore.items.kind import Category, ItemKind, PlatformReference

ITEM_KINDS: tuple[ItemKind, ...] = (
    models.HF_MOE_LM,
    models.HF_LM,
    models.DIFFUSERS_VAE,
    models.DIFFUSERS_GENERATOR,
    models.WATERMARK_MARKERS,
    models.POINTCLOUD_SEGMENTER,
    models.VIDEO_DIT,
    models.TINY_ENCODER,
    models.MOE_TASK_CLASSIFIER,
    models.VIDEO_CLASSIFIER,
    datasets.TEXT,
    datasets.IMAGES,
    datasets.POINTCLOUDS,
    datasets.POINTCLOUD_DATASET,
    datasets.VIDEO_CLIPS,
    datasets.GRAPHS,
    datasets.ROUTING_TRACE,
    datasets.WATERMARK_KEYRING,
)


class UnknownItemKind(LookupError):
    pass


def _by_name(kinds: Iterable[ItemKind]) -> dict[str, ItemKind]:
    found: dict[str, ItemKind] = {}
    for kind in kinds:
        if kind.name in found:
            raise TypeError(f"item kind registered twice: {kind.name!r}")
        found[kind.name] = kind
    return found


_KINDS = _by_name(ITEM_KINDS)


def library_kinds(category: Category) -> tuple[str, ...]:
    """The names of the kinds a team library holds in ``category``, in the registry's order."""
    return tuple(k.name for k in ITEM_KINDS if k.in_library and k.category == category)


#: What a team library holds (the ``accepts`` vocabulary of ``model`` / ``dataset`` parameters,
#: less the kinds that are built in or platform-made only).
MODEL_KINDS: tuple[str, ...] = library_kinds("model")
DATASET_KINDS: tuple[str, ...] = library_kinds("dataset")
ALL_KINDS: tuple[str, ...] = (*MODEL_KINDS, *DATASET_KINDS)


def all_item_kinds() -> tuple[ItemKind, ...]:
    return ITEM_KINDS


def get_item_kind(name: str) -> ItemKind:
    try:
        return _KINDS[name]
    except KeyError:
        raise UnknownItemKind(f"Unknown item kind {name!r}. Known kinds: {', '.join(_KINDS)}.") from None


def category_of(kind: str) -> str:
    """``"model"`` or ``"dataset"`` for a library kind; any other is refused with the list of library kinds."""
    if kind in MODEL_KINDS:
        return "model"
    if kind in DATASET_KINDS:
        return "dataset"
    raise ValueError(f"Unknown item kind {kind!r}; use one of: {', '.join(ALL_KINDS)}.")


def platform_references(accepts: Iterable[str]) -> list[PlatformReference]:
    """The platform-made references (``keyring:platform``) of the kinds a parameter accepts."""
    accepted = set(accepts)
    return [ref for kind in ITEM_KINDS if kind.name in accepted for ref in kind.platform_references]
