"""Built-in datasets, by name."""

from __future__ import annotations

from mlcore.catalog import BuiltinItem

DATASETS: tuple[BuiltinItem, ...] = (
    BuiltinItem(
        name="stdlib-docs",
        kind="text",
        title="Python documentation topics",
        description="The help topics that ship with CPython (pydoc_data.topics): English technical prose.",
        builder="mlcore.data.text:build_stdlib_docs",
        card={"source": "pydoc_data.topics", "license": "PSF"},
    ),
)
