"""Text corpora from what Python and installed packages ship."""

from __future__ import annotations

import json
from pathlib import Path


def stdlib_docs() -> list[str]:
    """One document per help topic of ``pydoc_data.topics``, in a fixed order."""
    from pydoc_data.topics import topics

    return [topics[name].strip() for name in sorted(topics) if topics[name].strip()]


def build_stdlib_docs(target: Path) -> None:
    documents = stdlib_docs()
    with (target / "documents.jsonl").open("w", encoding="utf-8") as f:
        for doc in documents:
            f.write(json.dumps({"text": doc}) + "\n")
    card = {"records": len(documents), "characters": sum(map(len, documents)), "source": "pydoc_data.topics"}
    (target / "card.json").write_text(json.dumps(card, indent=1))
