"""Portal fixtures: a tiny random extractor (the real network class) that verify workers load,
images, keys with chosen bits (as if that key had marked the image), and settings for each test."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from webapp.accounts.models import Team
from webapp.portal.crypto import seal
from webapp.portal.models import WatermarkKey


def _tiny_extractor(tmp_path_factory: pytest.TempPathFactory, name: str, seed: int) -> Path:
    import torch

    from mlcore.watermark.extractor import Extractor

    torch.manual_seed(seed)
    folder = tmp_path_factory.mktemp(name) / "extractor"
    Extractor(num_bits=48, image_size=32, channels=(8, 8, 8), head_channels=8, hidden=32).save_pretrained(folder)
    return folder.parent


@pytest.fixture(scope="session")
def extractor_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _tiny_extractor(tmp_path_factory, "molm", 0)


@pytest.fixture(scope="session")
def second_extractor_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another extractor of the same key length (other weights): the portal reads with both."""
    return _tiny_extractor(tmp_path_factory, "photo", 1)


@pytest.fixture(autouse=True)
def portal_settings(settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    settings.WATERMARK_KEY_BITS = 48
    settings.PORTAL_RATE_PER_MINUTE = 1000
    settings.PORTAL_WAIT_SECONDS = 60  # the first check in a worker loads the extractor
    settings.PORTAL_RATE_BACKEND = "database"


@pytest.fixture
def with_extractor(settings, monkeypatch: pytest.MonkeyPatch, extractor_dir: Path) -> Path:
    settings.WATERMARK_EXTRACTOR = str(extractor_dir)
    monkeypatch.setenv("MOELAB_WATERMARK_EXTRACTOR", str(extractor_dir))  # for workers started as processes
    return extractor_dir


def png_bytes(seed: int, size: int = 40, fmt: str = "PNG") -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, fmt)
    return buffer.getvalue()


def bits_of(extractor_dir: Path, data: bytes) -> str:
    """What the extractor reads from ``data``: a key with these bits "marked" the image."""
    from mlcore.watermark.verification import cached_extractor, open_image

    probabilities = cached_extractor(extractor_dir).decode([open_image(data)])[0]
    return "".join("1" if p > 0.5 else "0" for p in probabilities)


def flip(bits: str, count: int) -> str:
    return "".join(("1" if c == "0" else "0") if i < count else c for i, c in enumerate(bits))


def key_with_bits(team: Team, bits: str, *, name: str = "campaign", revoked: bool = False) -> WatermarkKey:
    from django.utils import timezone

    return WatermarkKey.objects.create(
        team=team,
        name=name,
        num_bits=len(bits),
        sealed_bits=seal(bits),
        revoked_at=timezone.now() if revoked else None,
    )
