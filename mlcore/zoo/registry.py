"""The zoo's models, by name. Later issues add their trained models here."""

from __future__ import annotations

from mlcore.catalog import BuiltinItem

MODELS: tuple[BuiltinItem, ...] = ()
