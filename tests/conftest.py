"""Shared test set-up: the test-only job kind is registered for every test and every worker."""

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("MOELAB_EXTRA_KINDS", "tests.jobkinds.exercise")


@pytest.fixture
def tmp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This process's temporary directory (and, passed as ``TMPDIR``, a child's), in a folder of the test's own."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
