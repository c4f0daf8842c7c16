"""The classes a saved segmenter predicts, read from its ``config.json`` and checked against its head.

A segmenter folder (:func:`~mlcore.pointcloud.pipeline.save_segmenter`) names its output classes,
in logit order, in ``labels``: the SynMix master labels (the zoo, ``pointcloud-train`` on SynMix),
or the user's own classes (after SynMix's when mixed) for one trained on a user's scans
(:func:`~mlcore.pointcloud.user_train.save_user_segmenter`). Those also carry a ``user`` block:

- ``classes``: the user's classes, what ``pointcloud-segment`` predicts by default (a mixed model's
  other classes are SynMix's, there to help training);
- ``codes``: class name → the id the user's files gave it (the LAS code, the class map's key),
  written back into a labelled LAS and used to compare a prediction with a file's labels;
- ``voxel``: the grid the user's scans were trained at (the segmenting grid under ``setting=auto``);
- ``attributes``: ``colour`` / ``intensity``, those the training scans held (``attributes=auto``);
- ``synmix``: the SynMix datasets mixed in (whose indoor / outdoor grids then make sense too).

Mappings defined on SynMix's classes (the coarse taxonomy, the ASPRS codes) apply only to a
segmenter whose classes are exactly SynMix's (:attr:`SegmenterClasses.synmix_named`).

Segmenters saved before the ``user`` block kept the user's classes in ``card.user_classes`` and the
voxel in ``grids.user``; they load without codes or attributes. Plain Python (no numpy, no torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mlcore.pointcloud.labels import LABELS

#: The attributes a user's training scans may have held, as ``pointcloud-segment`` names them.
USER_ATTRIBUTES: tuple[str, ...] = ("colour", "intensity")
_RETRAIN = "retrain it with pointcloud-train, which saves them"


class SegmenterError(ValueError):
    """A segmenter folder that cannot be loaded; the message says what is missing or wrong."""


@dataclass(frozen=True)
class SegmenterClasses:
    """What a segmenter's outputs mean. ``own``, ``codes`` and ``attributes`` index ``names``."""

    names: tuple[str, ...]  #: one per output, in logit order
    own: tuple[int, ...] = ()  #: the user's classes (empty: a SynMix segmenter)
    codes: Mapping[int, int] = field(default_factory=dict)  #: class → the id the user's files gave it
    voxel: float | None = None  #: the grid the user's scans were trained at
    attributes: tuple[str, ...] | None = None  #: what the training scans held (None: not recorded)
    synmix: tuple[str, ...] = ()  #: SynMix datasets mixed in with the user's scans

    @property
    def synmix_named(self) -> bool:
        """Exactly the SynMix classes in SynMix's order: the coarse and ASPRS mappings apply."""
        return self.names == LABELS

    @property
    def user_trained(self) -> bool:
        return self.voxel is not None

    def index(self, name: str) -> int | None:
        """The output of the class called ``name`` (the same name, else the first alike without case), or None."""
        if name in self.names:
            return self.names.index(name)
        lowered = [n.lower() for n in self.names]
        return lowered.index(name.lower()) if name.lower() in lowered else None


def _listing(names: tuple[str, ...] | list[str], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _class_names(config: Mapping[str, Any], head: int | None) -> tuple[str, ...]:
    labels = config.get("labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(n, str) and n.strip() for n in labels):
        raise SegmenterError(
            "config.json does not list the model's class names (labels: one name per output, in order), so its "
            f"predictions cannot be named; {_RETRAIN}, or add the list"
        )
    names = tuple(labels)
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise SegmenterError(
            f"config.json names the class {twice!r} twice (labels), so two outputs would read alike; give each "
            f"output its own name or {_RETRAIN}"
        )
    if head is not None and len(names) != head:
        raise SegmenterError(
            f"config.json names {len(names)} classes ({_listing(names)}) but the model has {head} outputs, so the "
            "names cannot belong to its predictions; use the config.json saved with these weights or "
            f"{_RETRAIN}"
        )
    return names


def _user_block(config: Mapping[str, Any], names: tuple[str, ...]) -> Mapping[str, Any] | None:
    """The ``user`` block, or one rebuilt from an older user segmenter's card and grids."""
    user = config.get("user")
    if user is not None:
        if not isinstance(user, dict):
            raise SegmenterError(f"config.json's user section is not a mapping; {_RETRAIN}")
        return user
    grids = config.get("grids")
    if isinstance(grids, dict) and "user" in grids:
        card = config.get("card") if isinstance(config.get("card"), dict) else {}
        listed = card.get("user_classes") if isinstance(card.get("user_classes"), list) else []
        # Mixed with SynMix, a user's "Building" trained as SynMix's "building": match without case.
        lowered = {n.lower(): n for n in names}
        own = [lowered[n.lower()] for n in listed if isinstance(n, str) and n.lower() in lowered]
        return {"classes": own or list(names), "voxel": grids["user"]}
    return None


def read_classes(config: Mapping[str, Any], head: int | None = None) -> SegmenterClasses:
    """The classes of the segmenter ``config`` describes (``head``: its number of outputs), or a
    :class:`SegmenterError` that names what is missing or inconsistent and what to do."""
    names = _class_names(config, head)
    user = _user_block(config, names)
    if user is None:
        if names == LABELS:
            return SegmenterClasses(names)
        raise SegmenterError(
            f"config.json names classes of its own ({_listing(names)}) but not the voxel size they were trained at "
            f"(user.voxel), which segmenting needs; {_RETRAIN}"
        )
    voxel = user.get("voxel")
    if isinstance(voxel, bool) or not isinstance(voxel, int | float) or not math.isfinite(voxel) or voxel <= 0:
        raise SegmenterError(
            f"config.json gives no usable voxel size for its classes (user.voxel is {voxel!r}, not a positive "
            f"number of metres); {_RETRAIN}"
        )
    own_names = user.get("classes")
    if not isinstance(own_names, list) or not own_names or not all(isinstance(n, str) for n in own_names):
        raise SegmenterError(f"config.json's user.classes is not a list of class names; {_RETRAIN}")
    unknown = [n for n in own_names if n not in names]
    if unknown:
        raise SegmenterError(
            f"config.json's user.classes names {_listing(unknown)}, which the model's labels ({_listing(names)}) do "
            f"not hold; use the config.json saved with these weights or {_RETRAIN}"
        )
    raw_codes = user.get("codes", {})
    if not isinstance(raw_codes, dict) or not all(
        name in names and isinstance(code, int) and not isinstance(code, bool) for name, code in raw_codes.items()
    ):
        raise SegmenterError(
            "config.json's user.codes must map class names of the model to whole-number ids "
            f'({{"ground": 2}}); {_RETRAIN}'
        )
    attributes = user.get("attributes")
    if attributes is not None and (
        not isinstance(attributes, list) or any(a not in USER_ATTRIBUTES for a in attributes)
    ):
        raise SegmenterError(
            f"config.json's user.attributes must list some of {', '.join(USER_ATTRIBUTES)}; {_RETRAIN}"
        )
    synmix = user.get("synmix", [])
    if not isinstance(synmix, list) or not all(isinstance(d, str) for d in synmix):
        raise SegmenterError(f"config.json's user.synmix must list SynMix dataset names; {_RETRAIN}")
    return SegmenterClasses(
        names=names,
        own=tuple(names.index(n) for n in own_names),
        codes={names.index(n): int(c) for n, c in raw_codes.items()},
        voxel=float(voxel),
        attributes=None if attributes is None else tuple(a for a in USER_ATTRIBUTES if a in attributes),
        synmix=tuple(synmix),
    )


def user_block(
    own: list[str],
    codes: Mapping[str, int],
    voxel: float,
    attributes: tuple[str, ...] | list[str],
    synmix: tuple[str, ...] | list[str],
) -> dict[str, Any]:
    """The ``user`` block :func:`read_classes` reads (written by ``save_user_segmenter``)."""
    return {
        "classes": list(own),
        "codes": {name: int(code) for name, code in codes.items()},
        "voxel": float(voxel),
        "attributes": [a for a in USER_ATTRIBUTES if a in attributes],
        "synmix": list(synmix),
    }
