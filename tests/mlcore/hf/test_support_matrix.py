"""The README and docs/hf-support.md publish exactly the adapter's own capability table."""

from pathlib import Path

import pytest

from mlcore.hf import adapt, tiny_config
from mlcore.hf.support import OPERATIONS, VARIANTS, support_markdown
from tests.mlcore.hf.conftest import build

ROOT = Path(__file__).resolve().parents[3]
BEGIN, END = "<!-- support-matrix:begin -->\n", "<!-- support-matrix:end -->"


@pytest.mark.parametrize("page", ["README.md", "docs/hf-support.md"])
def test_the_page_holds_the_generated_matrix(page: str) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    published = text[text.index(BEGIN) + len(BEGIN) : text.index(END)]
    assert published == support_markdown(), "regenerate with: python -m mlcore.hf.support > table"


@pytest.mark.parametrize(("label", "arch", "overrides"), VARIANTS, ids=[v[0] for v in VARIANTS])
def test_every_row_is_what_the_adapter_answers_for_that_model(label: str, arch: str, overrides: dict) -> None:
    support = adapt(build(arch, **overrides)).support()
    assert list(support) == list(OPERATIONS)
    assert set(support.values()) <= {"yes", "masked", "no"}
    assert f"| {label} | " + " | ".join(support[op] for op in OPERATIONS) + " |" in support_markdown()
    assert tiny_config(arch, **overrides).model_type == arch
