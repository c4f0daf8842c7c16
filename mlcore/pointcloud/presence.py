"""BatchNorm statistics per attribute presence: a segmenter robust to missing attributes, and not blind.

Why. PTv3-lite normalises with BatchNorm in its embedding, pooling, unpooling and head
(:mod:`mlcore.pointcloud.ptv3`). A model trained with attribute dropout sees crops with and without
colour; the running statistics its BatchNorms keep are an average over both, and at inference they
serve a scan that has colour and one that has none alike. For a class that only the attribute
separates, that average is what blinds the model. Measured on bench/pointcloud_attributes.py's
painted doors (door IoU with colour, 150 steps, "balanced" re-maps with 30% colour dropout drawn per
batch, seeds 0 / 1 / 2): 0.37 / 0.38 / 0.23 with the statistics as trained, 0.84 / 0.59 / 0.82 with
every BatchNorm's statistics re-estimated on colour crops of the same training scans; without
dropout, 0.94 and 0.97. Excluding the colourless crops from the loss does not help (30% per crop:
0.01), so it is not their labels.

What. Once trained, :func:`calibrate` re-estimates every BatchNorm's running mean and variance
once per *presence pattern* — which of colour and intensity a scan carries — on training crops
reduced to that pattern as inference encodes a missing attribute (zeros). The segmenter keeps the
sets (``presence_stats.safetensors``, :func:`mlcore.pointcloud.pipeline.save_segmenter`) and every
inference path reads a scan with the set of the attributes it carries (:func:`statistics`). A
segmenter without them reads exactly as before.

The statistics of one pattern are estimated over the whole training mixture, every crop reduced to
the attributes of the pattern it carries: what a training batch whose dropout draw kept exactly those
attributes normalised with (:data:`~mlcore.pointcloud.augment.PRESETS`' per-batch dropout), not
the crops that carry the pattern alone (streets for "intensity", rooms for "colour": statistics no
training batch of a mixed run had). On one dataset the two are the same; on the zoo recipe (SynMix
validation, 4 scans per dataset, as captured; A–F) they differ by about the scans' spread: 0.731 /
0.709 / 0.497 / 0.571 / 0.521 / 0.600 over the mixture, 0.719 / 0.756 / 0.522 / 0.586 / 0.540 / 0.528
over the carrying crops, 0.706 / 0.681 / 0.502 / 0.555 / 0.501 / 0.627 with the statistics as trained
(geometry only, where both ways coincide: 0.343 / 0.501 / 0.478 / 0.559 / 0.502 / 0.169 against
0.361 / 0.508 / 0.479 / 0.575 / 0.492 / 0.209). A pattern with an attribute no training crop carries
gets no set, so a model trained on colourless streets reads a coloured scan with the statistics it
was trained with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from mlcore.pointcloud.augment import COLOUR, INTENSITY, present

#: Presence patterns by name → the attributes a scan of that pattern carries.
PATTERNS: dict[str, tuple[str, ...]] = {
    "none": (),
    "colour": ("colour",),
    "intensity": ("intensity",),
    "colour+intensity": ("colour", "intensity"),
}
Statistics = dict[str, dict[str, Tensor]]


def pattern_of(feat: np.ndarray) -> str:
    """The presence pattern of point features (:func:`~mlcore.pointcloud.augment.present`: a channel that
    is zero on every point is absent, as :func:`~mlcore.pointcloud.datasets.point_features` encodes it)."""
    return _named(present(feat))


def pattern_for(rgb: np.ndarray | None, intensity: np.ndarray | None) -> str:
    """The presence pattern of a whole scan's attributes (None, or zero on every point: absent)."""
    return _named(
        {
            "colour": rgb is not None and bool(np.any(rgb)),
            "intensity": intensity is not None and bool(np.any(intensity)),
        }
    )


def _named(has: dict[str, bool]) -> str:
    carried = {attribute for attribute, there in has.items() if there}
    return next(name for name, attributes in PATTERNS.items() if set(attributes) == carried)


def batchnorms(model: nn.Module) -> dict[str, nn.BatchNorm1d]:
    return {name: m for name, m in model.named_modules() if isinstance(m, nn.BatchNorm1d)}


def reduced(sample: Any, attributes: Sequence[str]) -> Any:
    """``sample`` (a :class:`~mlcore.pointcloud.pipeline.Sample`) with every attribute but ``attributes``
    removed as inference encodes a missing one."""
    feat = sample.feat.copy()
    if "colour" not in attributes:
        feat[:, COLOUR] = 0.0
    if "intensity" not in attributes:
        feat[:, INTENSITY] = 0.0
    return replace(sample, feat=feat)


def _buffers(norms: dict[str, nn.BatchNorm1d]) -> dict[str, Tensor]:
    """A copy of every BatchNorm's running mean and variance, keyed ``NAME.running_mean`` / ``..._var``."""
    return {
        f"{n}.running_{which}": getattr(m, f"running_{which}").detach().clone()
        for n, m in norms.items()
        for which in ("mean", "var")
    }


def _load(norms: dict[str, nn.BatchNorm1d], buffers: dict[str, Tensor]) -> None:
    for n, m in norms.items():
        m.running_mean.copy_(buffers[f"{n}.running_mean"])
        m.running_var.copy_(buffers[f"{n}.running_var"])


@torch.no_grad()
def calibrate(
    model: nn.Module, crops: Sequence[Any], forward: Callable[[list[Any]], None], *, batch_size: int
) -> Statistics:
    """Per presence pattern, every BatchNorm's running mean and variance over all ``crops``, each
    reduced to the pattern's attributes (a cumulative average over batches of ``batch_size``, in the
    order given: mixed as training mixed them; ``forward(samples)`` runs the model on a batch).
    Patterns with an attribute no crop carries are left out. The model is left as it was found."""
    norms = batchnorms(model)
    kept, momenta, training = _buffers(norms), {n: m.momentum for n, m in norms.items()}, model.training
    carried = {a for crop in crops for a, there in present(crop.feat).items() if there}
    out: Statistics = {}
    model.eval()
    try:
        for name, attributes in PATTERNS.items():
            if not set(attributes) <= carried or not crops:
                continue
            items = [reduced(crop, attributes) for crop in crops]
            for m in norms.values():
                m.reset_running_stats()
                m.momentum = None  # a cumulative average: every batch counts the same
                m.train()
            for start in range(0, len(items), batch_size):
                forward(items[start : start + batch_size])
            out[name] = _buffers(norms)
    finally:
        _load(norms, kept)
        for n, m in norms.items():
            m.momentum = momenta[n]
        model.train(training)
    return out


def check(model: nn.Module, stats: Statistics) -> None:
    """A ``ValueError`` unless ``stats`` holds, for known patterns, a mean and variance of the shape of
    every BatchNorm of ``model`` (what a saved file must hold to be read with this model)."""
    expected = {k: tuple(v.shape) for k, v in _buffers(batchnorms(model)).items()}
    for pattern, tensors in stats.items():
        if pattern not in PATTERNS:
            raise ValueError(f"unknown presence pattern {pattern!r}")
        if {k: tuple(v.shape) for k, v in tensors.items()} != expected:
            raise ValueError(f"the {pattern!r} statistics do not match the model's BatchNorms")


@contextmanager
def statistics(model: nn.Module, pattern: str) -> Iterator[None]:
    """Inside this block ``model``'s BatchNorms read with the statistics of ``pattern``, when the model
    holds a set for it (``model.presence_stats``, from :func:`calibrate`); otherwise nothing changes."""
    stats: Statistics | None = getattr(model, "presence_stats", None)
    if not stats or pattern not in stats:
        yield
        return
    norms = batchnorms(model)
    kept = _buffers(norms)
    try:
        _load(norms, stats[pattern])
        yield
    finally:
        _load(norms, kept)
