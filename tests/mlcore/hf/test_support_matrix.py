"""docs/hf-support.md publishes the generated matrix: every family once, with the adapter's own answers.

Each family's row is checked against the adapter on that family in test_families.py (which builds
the model anyway); here only what needs no model: the page lists every family of the installed
transformers exactly once, refused ones with their structural reason.
"""

from pathlib import Path

from mlcore.hf.families import MOE_FAMILIES
from mlcore.hf.support import REFUSED, header

ROOT = Path(__file__).resolve().parents[3]
BEGIN, END = "<!-- support-matrix:begin -->\n", "<!-- support-matrix:end -->"


def published() -> str:
    text = (ROOT / "docs/hf-support.md").read_text(encoding="utf-8")
    return text[text.index(BEGIN) + len(BEGIN) : text.index(END)]


def test_the_page_lists_every_family_exactly_once() -> None:
    table = published()
    assert table.startswith("\n".join(header()) + "\n"), "regenerate with: python -m mlcore.hf.matrix"
    for model_type, title in MOE_FAMILIES.items():
        assert table.count(f"| {title} | `{model_type}` |") == 1, model_type


def test_refused_families_carry_their_structural_reason() -> None:
    table = published()
    for model_type, (reason, blocks) in REFUSED.items():
        assert f"| {MOE_FAMILIES[model_type]} | `{model_type}` | {reason} | {blocks} |" in table
