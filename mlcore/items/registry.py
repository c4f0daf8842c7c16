"""The item kinds a library holds, split into models and datasets (the ``accepts`` vocabulary of
``model`` / ``dataset`` parameters in ``docs/architecture.md``). Django-free and torch-free."""

from __future__ import annotations

MODEL_KINDS: tuple[str, ...] = (
    "hf-moe-lm",
    "hf-lm",
    "diffusers-vae",
    "diffusers-generator",
    "watermark-markers",
    "pointcloud-segmenter",
    "video-dit",
    "tiny-encoder",
    "moe-task-classifier",
)
DATASET_KINDS: tuple[str, ...] = ("text", "images", "pointclouds", "graphs", "routing-trace")
ALL_KINDS: tuple[str, ...] = (*MODEL_KINDS, *DATASET_KINDS)


def category_of(kind: str) -> str:
    """``"model"`` or ``"dataset"``; an unknown kind is refused with the list of known ones."""
    if kind in MODEL_KINDS:
        return "model"
    if kind in DATASET_KINDS:
        return "dataset"
    raise ValueError(f"Unknown item kind {kind!r}; use one of: {', '.join(ALL_KINDS)}.")
