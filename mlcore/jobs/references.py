"""Resolve ``model`` / ``dataset`` / ``key`` references to local directories.

A reference is ``zoo:NAME`` (a built-in model or dataset, also accepted as a bare ``NAME``),
``library:ID`` (a team library item, resolved by the web platform's resolver) or, in
``moelab run`` only, a local path. Resolution happens before ``run`` starts, so ``run`` only
ever sees directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from mlcore.catalog import BuiltinItem, materialize
from mlcore.jobs.params import Dataset, Key, Model
from mlcore.jobs.spec import JobError

#: ``keyring:platform``: every key registered on the web platform (a ``watermark-keyring`` dataset).
KEYRING_PREFIX = "keyring:"


class Resolver(Protocol):
    def resolve(self, param: Model | Dataset | Key, reference: str) -> Path: ...


def builtin_items() -> dict[str, BuiltinItem]:
    from mlcore.data.registry import DATASETS
    from mlcore.zoo.registry import MODELS

    return {item.name: item for item in (*MODELS, *DATASETS)}


def builtin_for(param: Model | Dataset, reference: str) -> BuiltinItem | None:
    """The built-in item a ``zoo:NAME`` (or bare ``NAME``) reference names, checked against
    what the parameter accepts; ``None`` if it names no built-in item."""
    name = reference.removeprefix("zoo:")
    item = builtin_items().get(name)
    if item is None:
        if reference.startswith("zoo:"):
            choices = [f"zoo:{n}" for n, i in builtin_items().items() if not param.accepts or i.kind in param.accepts]
            hint = f"pick one of {', '.join(choices)}" if choices else "pick one from the list"
            raise JobError(f"{param.title}: there is no built-in item named {name!r}; {hint}, or a library item.")
        return None
    if param.accepts and item.kind not in param.accepts:
        raise JobError(
            f"{param.title}: {name!r} is a {item.kind}; this job accepts {', '.join(param.accepts)}. Pick another item."
        )
    return item


class LocalResolver:
    """The CLI's resolver: built-in items, and local paths when ``allow_paths`` is set."""

    def __init__(self, *, allow_paths: bool = True, cache: Path | None = None) -> None:
        self.allow_paths = allow_paths
        self.cache = cache

    def resolve(self, param: Model | Dataset | Key, reference: str) -> Path:
        if isinstance(param, Key):
            return self._key_file(param, reference)
        if reference.startswith(KEYRING_PREFIX):
            raise JobError(
                f"{param.title}: {reference!r} is the web platform's key registry; in moelab run pass a keyring "
                'JSON file ({"version": 1, "keys": [{"id", "name", "organisation", "bits", "revoked"}]}).'
            )
        item = builtin_for(param, reference)
        if item is not None:
            return materialize(item, self.cache)
        if reference.startswith("library:"):
            raise JobError(f"{param.title}: library items are available only through the web platform.")
        path = Path(reference).expanduser()
        if self.allow_paths and path.exists():
            return path.resolve()
        raise JobError(f"{param.title}: {reference!r} is neither a built-in item nor an existing path.")

    def _key_file(self, param: Key, reference: str) -> Path:
        """A key file ``{"id", "name", "bits"}`` on disk (key ids live in the platform's registry)."""
        from mlcore.watermark.keys import InvalidKey, load_key_file

        path = Path(reference).expanduser()
        if not (self.allow_paths and path.is_file()):
            raise JobError(
                f"{param.title}: key ids are available only through the web platform; in moelab run pass a "
                'key file {"id": ..., "name": ..., "bits": "0101..."}.'
            )
        try:
            load_key_file(path)
        except InvalidKey as exc:
            raise JobError(f"{param.title}: {exc}") from None
        return path.resolve()
