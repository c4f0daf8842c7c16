"""``watermark-verify`` through the runner with an in-memory ctx: a tiny random extractor (the
real network class, random weights) and keyrings written as the platform's resolver writes them."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.jobs.spec import JobError, ValidationError
from mlcore.watermark.keys import KeyRecord, write_keyring
from mlcore.watermark.stats import threshold_bits


@pytest.fixture(scope="module")
def extractor_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from mlcore.watermark.extractor import Extractor

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("markers")
    Extractor(num_bits=48, image_size=32, channels=(8, 8, 8), head_channels=8, hidden=32).save_pretrained(
        folder / "extractor"
    )
    return folder


def _image(seed: int, path: Path, fmt: str = "PNG") -> Path:
    pixels = np.random.default_rng(seed).integers(0, 256, (40, 40, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, fmt)
    return path


def _bits_of(extractor_dir: Path, path: Path) -> str:
    from mlcore.watermark.verification import cached_extractor, open_image

    probabilities = cached_extractor(extractor_dir).decode([open_image(path)])[0]
    return "".join("1" if p > 0.5 else "0" for p in probabilities)


def _flip(bits: str, count: int) -> str:
    return "".join(("1" if c == "0" else "0") if i < count else c for i, c in enumerate(bits))


def run(raw: dict, files: dict, ctx: InMemoryContext | None = None):
    kind = get_kind("watermark-verify")
    ctx = ctx or InMemoryContext()
    params, inputs = prepare(kind, raw, files, resolver=LocalResolver(), workdir=ctx.workdir)
    return execute(kind, params, inputs, ctx), ctx


def test_it_attributes_a_marked_image_and_leaves_an_unmarked_one(tmp_path: Path, extractor_dir: Path) -> None:
    marked = _image(1, tmp_path / "marked.png")
    bits = _bits_of(extractor_dir, marked)
    ring = write_keyring(
        tmp_path / "ring.json",
        [
            KeyRecord(id="k1", name="launch", organisation="Routing Lab", bits=bits),
            KeyRecord(id="k2", name="other", organisation="Other Lab", bits=_flip(bits, 48)),
        ],
    )
    # A second image whose bits the keyring does not hold: its best key agrees only by chance.
    plain = _image(2, tmp_path / "plain.jpg", "JPEG")
    outcome, ctx = run({"extractor": str(extractor_dir), "keyring": str(ring)}, {"images": [marked, plain]})
    assert outcome.status == "succeeded", outcome.traceback
    rows = {r["image"]: r for r in csv.DictReader(ctx.artifacts["results.csv"].path.open())}
    assert rows["marked.png"]["verdict"] == "detected"
    assert rows["marked.png"]["organisation"] == "Routing Lab"
    assert rows["marked.png"]["bits_matched"] == "48"
    assert rows["marked.png"]["decoded_bits"] == bits
    assert float(rows["marked.png"]["p_corrected"]) == pytest.approx(2 * 2.0**-48)
    report = json.loads(ctx.artifacts["results.json"].path.read_text())
    assert report["thresholds"]["detect_bits"] == threshold_bits(48, 2, 1e-3) == 36
    assert report["thresholds"]["num_keys"] == 2
    assert ctx.metrics.scalars["images"] == 2
    assert ctx.metrics.scalars["detected"] >= 1
    assert ctx.charts["bits_matched"]["layer"][1]["data"]["values"][0]["bits"] == 36
    assert any("detected at FPR 0.001" in line for line in ctx.lines)


def test_a_zip_batch_is_verified_image_by_image(tmp_path: Path, extractor_dir: Path) -> None:
    archive = tmp_path / "batch.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(5):
            buffer = io.BytesIO()
            Image.fromarray(np.full((32, 32, 3), 40 * i, dtype=np.uint8)).save(buffer, "WEBP")
            zf.writestr(f"shots/{i}.webp", buffer.getvalue())
    ring = write_keyring(tmp_path / "ring.json", [KeyRecord(id="k", name="", organisation="Lab", bits="01" * 24)])
    outcome, ctx = run({"extractor": str(extractor_dir), "keyring": str(ring)}, {"images": [archive]})
    assert outcome.status == "succeeded", outcome.traceback
    rows = list(csv.DictReader(ctx.artifacts["results.csv"].path.open()))
    assert [r["image"] for r in rows] == [f"shots/{i}.webp" for i in range(5)]
    assert ctx.metrics.scalars["keys_searched"] == 1


def test_a_revoked_key_still_matches_and_is_flagged(tmp_path: Path, extractor_dir: Path) -> None:
    marked = _image(3, tmp_path / "m.png")
    ring = write_keyring(
        tmp_path / "ring.json",
        [KeyRecord(id="old", name="", organisation="Lab", bits=_bits_of(extractor_dir, marked), revoked=True)],
    )
    outcome, ctx = run({"extractor": str(extractor_dir), "keyring": str(ring)}, {"images": [marked]})
    assert outcome.status == "succeeded", outcome.traceback
    row = next(csv.DictReader(ctx.artifacts["results.csv"].path.open()))
    assert (row["verdict"], row["revoked"]) == ("detected", "True")


@pytest.mark.parametrize("platform_extractor", [True, False])
def test_other_teams_keys_are_searched_only_with_the_platforms_extractor(
    tmp_path: Path, extractor_dir: Path, platform_extractor: bool
) -> None:
    from mlcore.watermark.disclosure import extractor_fingerprint
    from mlcore.watermark.keys import keyring_payload

    marked = _image(5, tmp_path / "marked.png")
    theirs = KeyRecord(
        id="theirs", name="launch", organisation="Other Lab", bits=_bits_of(extractor_dir, marked), own=False
    )
    allowed = extractor_fingerprint(extractor_dir) if platform_extractor else "0" * 64
    ring = tmp_path / "ring.json"
    ring.write_bytes(keyring_payload([theirs], foreign_extractors=[allowed]))
    outcome, ctx = run({"extractor": str(extractor_dir), "keyring": str(ring)}, {"images": [marked]})
    assert outcome.status == "succeeded", outcome.traceback
    row = json.loads(ctx.artifacts["results.json"].path.read_text())["images"][0]
    if platform_extractor:
        assert (row["verdict"], row["organisation"]) == ("detected", "Other Lab")
        assert "other_teams_keys_skipped" not in ctx.metrics.scalars
    else:
        # A chosen extractor picks the bits it outputs: the verdicts would be chosen questions.
        assert (row["verdict"], row["organisation"]) == ("not detected", None)
        assert ctx.metrics.scalars["other_teams_keys_skipped"] == 1.0
        assert ctx.metrics.scalars["keys_searched"] == 0
        assert any("platform's own extractor" in line for line in ctx.lines)


def test_it_refuses_a_truncated_png(tmp_path: Path, extractor_dir: Path) -> None:
    good = _image(4, tmp_path / "good.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(good[: len(good) // 2])
    ring = write_keyring(tmp_path / "ring.json", [])
    outcome, _ = run({"extractor": str(extractor_dir), "keyring": str(ring)}, {"images": [tmp_path / "cut.png"]})
    assert outcome.status == "failed"
    assert "cut.png: truncated or corrupt image" in outcome.error


def test_it_refuses_a_file_that_is_not_an_image(tmp_path: Path, extractor_dir: Path) -> None:
    (tmp_path / "notes.png").write_text("hello, this is text")
    with pytest.raises(JobError, match=r"expected png or jpeg or webp or zip, got a txt file"):
        run({"extractor": str(extractor_dir)}, {"images": [tmp_path / "notes.png"]})


def test_it_refuses_a_keyring_for_another_key_length(tmp_path: Path, extractor_dir: Path) -> None:
    ring = write_keyring(tmp_path / "ring.json", [KeyRecord(id="k", name="", organisation="Lab", bits="01" * 16)])
    outcome, _ = run(
        {"extractor": str(extractor_dir), "keyring": str(ring)}, {"images": [_image(5, tmp_path / "a.png")]}
    )
    assert outcome.status == "failed" and "keys have 32 bits but the extractor reads 48" in outcome.error


def test_it_asks_for_images_when_none_are_given(tmp_path: Path, extractor_dir: Path) -> None:
    ring = write_keyring(tmp_path / "ring.json", [])
    outcome, _ = run({"extractor": str(extractor_dir), "keyring": str(ring)}, {})
    assert outcome.status == "failed" and "upload images" in outcome.error


def test_the_suspicious_rate_may_not_be_stricter_than_the_detection_rate() -> None:
    with pytest.raises(ValidationError, match="suspicious_fpr"):
        get_kind("watermark-verify").spec.clean({"fpr": 0.01, "suspicious_fpr": 0.001})


def test_the_platform_keyring_is_refused_outside_the_platform(tmp_path: Path, extractor_dir: Path) -> None:
    with pytest.raises(JobError, match="web platform's key registry"):
        run({"extractor": str(extractor_dir)}, {"images": [_image(6, tmp_path / "a.png")]})


def test_the_demo_keyring_is_a_valid_keyring_with_one_public_key(tmp_path: Path) -> None:
    from mlcore.watermark.demo import DEMO_KEY, build_demo_keyring
    from mlcore.watermark.keys import load_keyring

    build_demo_keyring(tmp_path)
    assert load_keyring(tmp_path / "keyring.json") == [DEMO_KEY]
    assert DEMO_KEY.num_bits == 48 and DEMO_KEY.organisation == "MoE Lab demo"


@pytest.mark.skipif(
    not (Path(__file__).resolve().parents[3] / "mlcore/zoo/checkpoints/molm/manifest.json").is_file(),
    reason="the zoo's molm-tiny checkpoint is not committed yet",
)
def test_the_sample_attributes_the_marked_half_to_the_demo_organisation() -> None:
    spec = get_kind("watermark-verify").spec
    outcome, ctx = run(dict(spec.sample), {})
    assert outcome.status == "succeeded", outcome.traceback
    rows = list(csv.DictReader(ctx.artifacts["results.csv"].path.open()))
    assert len(rows) == 16
    verdicts = {r["image"]: (r["verdict"], r["organisation"]) for r in rows}
    marked = [verdicts[f"marked/{i:02d}.png"] for i in range(8)]
    unmarked = [verdicts[f"unmarked/{i:02d}.png"] for i in range(8)]
    assert marked.count(("detected", "MoE Lab demo")) >= 6  # most marked images clear 36 of 48 bits
    assert not any(verdict == "detected" for verdict, _ in unmarked)
