"""Fixtures the embed path's test modules share."""

import pytest

from mlcore.watermark import embed
from tests.mlcore.watermark.tiny import write_bundle


@pytest.fixture
def small_working_grid(monkeypatch):
    """A 96-pixel working grid: the tiny test VAE reads 16-pixel tiles, so an image is ~150 tiles, and a
    96 × 96 photo is its own working image (no resize between them)."""
    monkeypatch.setattr(embed, "WORK_SIDE", 96)


@pytest.fixture(scope="module")
def embed_bundle_dir(tmp_path_factory):
    """A tiny bundle whose markers leave a visible residual."""
    return write_bundle(tmp_path_factory.mktemp("bundle"), init_scale=2.0)
