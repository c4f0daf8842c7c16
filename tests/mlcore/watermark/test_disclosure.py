"""What each viewer may see of a watermark match (``mlcore.watermark.disclosure``), and the
``watermark-verify`` job's outputs for a keyring that mixes the viewer's keys with other teams'."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mlcore.jobs import InMemoryContext
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import execute, prepare
from mlcore.watermark.disclosure import (
    FOREIGN_MATCHES,
    OWN_FIELDS,
    PUBLIC_WEIGHTS_NOTE,
    disclose,
    disclose_match,
    rests_on_public_weights,
)
from mlcore.watermark.keys import KeyRecord, write_keyring
from mlcore.watermark.stats import match_images

MINE = KeyRecord(id="mine-id", name="our campaign", organisation="Us", bits="01" * 24, own=True)
THEIRS = KeyRecord(id="their-id", name="their campaign", organisation="Them", bits="0011" * 12, own=False)


def _row(key: KeyRecord, verdict: str) -> dict:
    probabilities = np.array([[c == "1" for c in key.bits]], dtype=float)
    match = match_images(probabilities, [key])[0][0]
    return {**match.describe(), "verdict": verdict}


def test_the_keys_own_team_sees_everything_but_the_key_bits() -> None:
    shown = disclose(_row(MINE, "detected"), own=True)
    assert list(shown) == list(OWN_FIELDS)
    assert (shown["key_id"], shown["key_name"], shown["bits_matched"]) == ("mine-id", "our campaign", 48)
    assert shown["decoded_bits"] == MINE.bits  # what the image holds, shown to the key's team only


def test_another_teams_detected_key_shows_the_verdict_and_organisation_only() -> None:
    assert disclose(_row(THEIRS, "detected"), own=False) == {"verdict": "detected", "organisation": "Them"}


@pytest.mark.parametrize("verdict", ["not detected", "inconclusive"])
def test_another_teams_undetected_key_shows_the_verdict_alone(verdict: str) -> None:
    # Inconclusive is a partial match, itself an equation in the key: outsiders read it as not detected.
    assert disclose(_row(THEIRS, verdict), own=False) == {"verdict": "not detected", "organisation": None}


def test_a_match_carries_its_keys_own_flag_and_an_empty_keyring_shows_bits_only_to_a_sole_viewer() -> None:
    matches, _ = match_images(np.array([[c == "1" for c in THEIRS.bits]], dtype=float), [MINE, THEIRS])
    assert "key_id" not in disclose_match(matches[0], all_own=False)
    keyless, _ = match_images(np.full((1, 48), 0.9), [])
    assert disclose_match(keyless[0], all_own=True)["decoded_bits"] == "1" * 48
    assert "decoded_bits" not in disclose_match(keyless[0], all_own=False)


def test_the_committed_demo_weights_are_recognised_by_content(tmp_path: Path) -> None:
    from mlcore.zoo.molm import CHECKPOINT

    if not (CHECKPOINT / "manifest.json").is_file():
        pytest.skip("the zoo's molm-tiny checkpoint is not committed")
    assert rests_on_public_weights(CHECKPOINT)
    copy = tmp_path / "renamed" / "extractor"
    copy.mkdir(parents=True)
    weights = "diffusion_pytorch_model.safetensors"
    (copy / weights).write_bytes((CHECKPOINT / "extractor" / weights).read_bytes())
    assert rests_on_public_weights(copy.parent) and rests_on_public_weights(copy)
    (copy / weights).write_bytes(b"trained by us")
    assert not rests_on_public_weights(copy.parent)


# -- the job ---------------------------------------------------------------------------------------


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


def _images(folder: Path, count: int) -> list[Path]:
    rng = np.random.default_rng(7)
    paths = []
    for i in range(count):
        path = folder / f"{i:02d}.png"
        Image.fromarray(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def _bits(extractor_dir: Path, path: Path) -> str:
    from mlcore.watermark.verification import cached_extractor, open_image

    return "".join("1" if p > 0.5 else "0" for p in cached_extractor(extractor_dir).decode([open_image(path)])[0])


def _run(extractor_dir: Path, ring: Path, images: list[Path], ctx: InMemoryContext):
    kind = get_kind("watermark-verify")
    params, inputs = prepare(
        kind,
        {"extractor": str(extractor_dir), "keyring": str(ring)},
        {"images": images},
        resolver=LocalResolver(),
        workdir=ctx.workdir,
    )
    return execute(kind, params, inputs, ctx)


def everything_shown(ctx: InMemoryContext) -> str:
    """Every output a job leaves: artifacts, charts, metrics, log and the summary line."""
    texts = [a.path.read_text() for a in ctx.artifacts.values()]
    scalars = ctx.metrics.to_json()["scalars"]
    summary = get_kind("watermark-verify").spec.summary_line(scalars)
    return "\n".join([*texts, json.dumps(ctx.charts), json.dumps(ctx.metrics.to_json()), *ctx.lines, summary])


def _flip(bits: str, count: int) -> str:
    return "".join(("1" if c == "0" else "0") if i < count else c for i, c in enumerate(bits))


def test_a_job_shows_nothing_of_another_teams_key_but_the_verdict_and_organisation(
    tmp_path: Path, extractor_dir: Path
) -> None:
    images = _images(tmp_path, 4)
    decoded = _bits(extractor_dir, images[0])  # a random extractor reads the same bits from every image
    theirs = KeyRecord(id="theirs-id", name="secret campaign", organisation="Them", bits=decoded, own=False)
    ours = KeyRecord(id="ours-id", name="ours", organisation="Us", bits=_flip(decoded, 20), own=True)
    ctx = InMemoryContext()
    outcome = _run(extractor_dir, write_keyring(tmp_path / "ring.json", [ours, theirs]), images, ctx)
    assert outcome.status == "succeeded", outcome.traceback
    rows = list(csv.DictReader(ctx.artifacts["results.csv"].path.open()))
    assert {(r["verdict"], r["organisation"], r["bits_matched"], r["decoded_bits"]) for r in rows} == {
        ("detected", "Them", "", "")
    }
    shown = everything_shown(ctx)
    for secret in ("theirs-id", "secret campaign", decoded, 'bits_matched": 48', 'p_value"'):
        assert secret not in shown
    # No mean or histogram of bits matched over another team's key: a chart of verdicts instead.
    assert "mean_bits_matched" not in ctx.metrics.scalars and set(ctx.charts) == {"verdicts"}
    assert ctx.metrics.scalars["own_key_images"] == 0


def test_a_job_shows_its_own_teams_key_in_full(tmp_path: Path, extractor_dir: Path) -> None:
    images = _images(tmp_path, 2)
    decoded = _bits(extractor_dir, images[0])
    ours = KeyRecord(id="ours-id", name="ours", organisation="Us", bits=decoded, own=True)
    theirs = KeyRecord(id="theirs-id", name="theirs", organisation="Them", bits=_flip(decoded, 24), own=False)
    ctx = InMemoryContext()
    outcome = _run(extractor_dir, write_keyring(tmp_path / "ring.json", [ours, theirs]), images, ctx)
    assert outcome.status == "succeeded", outcome.traceback
    row = next(csv.DictReader(ctx.artifacts["results.csv"].path.open()))
    assert (row["key_id"], row["key_name"], row["bits_matched"], row["decoded_bits"]) == (
        "ours-id",
        "ours",
        "48",
        decoded,
    )
    assert ctx.metrics.scalars["mean_bits_matched"] == 48 and "bits_matched" in ctx.charts
    assert "theirs-id" not in everything_shown(ctx)


def test_images_past_the_budget_are_matched_against_our_keys_only_and_the_job_says_so(
    tmp_path: Path, extractor_dir: Path
) -> None:
    images = _images(tmp_path, 5)
    decoded = _bits(extractor_dir, images[0])
    theirs = KeyRecord(id="t", name="t", organisation="Them", bits=decoded, own=False)
    ours = KeyRecord(id="o", name="o", organisation="Us", bits=_flip(decoded, 24), own=True)
    ctx = InMemoryContext(allowances={FOREIGN_MATCHES: 2})
    outcome = _run(extractor_dir, write_keyring(tmp_path / "ring.json", [ours, theirs]), images, ctx)
    assert outcome.status == "succeeded", outcome.traceback
    report = json.loads(ctx.artifacts["results.json"].path.read_text())
    assert [r["searched"] for r in report["images"]] == ["every key"] * 2 + ["your team's keys only"] * 3
    # Past the budget the mark of Them is not looked for: our own key is the best there is.
    assert [(r["verdict"], r.get("key_id")) for r in report["images"][2:]] == [("not detected", "o")] * 3
    assert report["thresholds_own_keys_only"]["num_keys"] == 1 and ctx.allowances[FOREIGN_MATCHES] == 0
    assert ctx.metrics.scalars["images_own_keys_only"] == 3
    assert any("budget" in line and "3 of 5 image(s)" in line for line in ctx.lines)
    summary = get_kind("watermark-verify").spec.summary_line(ctx.metrics.to_json()["scalars"])
    assert "3 image(s) beyond today's budget for other teams' keys were matched against your team's keys only" in (
        summary
    )


def test_a_keyring_of_ones_own_spends_no_budget(tmp_path: Path, extractor_dir: Path) -> None:
    ring = write_keyring(tmp_path / "ring.json", [MINE])
    ctx = InMemoryContext(allowances={FOREIGN_MATCHES: 0})
    outcome = _run(extractor_dir, ring, _images(tmp_path, 2), ctx)
    assert outcome.status == "succeeded" and "images_own_keys_only" not in ctx.metrics.scalars


def test_a_verdict_on_the_public_demo_weights_says_so(tmp_path: Path) -> None:
    from mlcore.zoo.molm import CHECKPOINT

    if not (CHECKPOINT / "manifest.json").is_file():
        pytest.skip("the zoo's molm-tiny checkpoint is not committed")
    ctx = InMemoryContext()
    outcome = _run(CHECKPOINT, write_keyring(tmp_path / "ring.json", [MINE]), _images(tmp_path, 1), ctx)
    assert outcome.status == "succeeded", outcome.traceback
    assert PUBLIC_WEIGHTS_NOTE in ctx.lines
    assert json.loads(ctx.artifacts["results.json"].path.read_text())["note"] == PUBLIC_WEIGHTS_NOTE
    assert (
        get_kind("watermark-verify").spec.summary_line(ctx.metrics.to_json()["scalars"]).endswith(PUBLIC_WEIGHTS_NOTE)
    )
