"""bench.watermark_embed's averaging forgery and its markers folders, on a tiny random bundle."""

import json

import numpy as np

from bench import watermark_embed as bench
from tests.mlcore.watermark.tiny import write_bundle


def _photos(n, seed, side=80):
    rng = np.random.default_rng(seed)
    # Smooth photos (a few gradients) rather than noise, so the residual is small against the content.
    y, x = np.mgrid[0:side, 0:side] / side
    return [
        np.clip(np.stack([a * x + b * y + c for a, b, c in rng.uniform(0, 1, (3, 3))], -1) * 200, 0, 255).astype(
            np.uint8
        )
        for _ in range(n)
    ]


def test_the_forgery_stamps_the_mean_residual_and_reports_rates_at_a_calibrated_threshold(tmp_path, monkeypatch):
    folder = write_bundle(tmp_path / "bundle")
    monkeypatch.setattr(bench, "FORGE_NS", (2, 3))
    out = bench.forgery(folder, _photos(3, 0), _photos(3, 1), _photos(4, 2), seed=0)
    assert out["sources"] == 3 and out["targets"] == 4 and 0 <= out["tau"] <= 49
    assert out["negatives"] == 4 * 10  # the clean targets against the forged key and nine others
    assert set(out["forged"]) == {f"N={n} {w} originals" for n in (2, 3) for w in ("with", "without")}
    for row in out["forged"].values():
        assert row["n"] == 4 and 0.0 <= row["value"] <= 1.0 and row["ci"][0] <= row["value"] <= row["ci"][1]
    # With the originals the forger holds the mark itself (about the target PSNR); without them, the mean
    # of other photos' content as well, a far stronger and cruder pattern.
    with_originals = out["forged"]["N=2 with originals"]["pattern_psnr"]
    assert with_originals > bench.TARGET_PSNR - 1
    assert out["forged"]["N=2 without originals"]["pattern_psnr"] < with_originals - 10


def test_the_joint_markers_are_measured_only_once_exported(tmp_path, monkeypatch):
    folder = write_bundle(tmp_path / "joint")
    monkeypatch.setenv("MOLM_RESIDUAL_MARKERS", str(folder))
    monkeypatch.setattr(bench, "ROOT", tmp_path)  # no committed or var/ checkpoints in sight
    assert bench.JOINT_LABEL not in bench.molm_folders()
    (folder / "manifest.json").write_text(json.dumps({"files": {}}))
    assert bench.molm_folders()[bench.JOINT_LABEL] == folder


def _png(pixels: np.ndarray) -> bytes:
    from mlcore.watermark import image_io

    return image_io.encode(image_io.SourceImage(name="a.png", format="PNG", pixels=pixels))


def test_a_key_aware_reader_is_scored_and_calibrated_on_reads_for_each_key_it_checks(monkeypatch):
    monkeypatch.setattr(bench, "FORGE_NS", (2,))
    key = np.random.default_rng(0).integers(0, 2, 48)
    checked: list[tuple[int, ...]] = []

    def read_for(images, bits):
        # A reader that finds in every image exactly the key it looks for: the worst case for the null.
        checked.append(tuple(bits))
        return np.tile(np.asarray(bits, float), (len(images), 1))

    def key_agnostic(images):
        raise AssertionError("a key-aware forgery must not read the clean targets once for every key")

    sources, own, targets = _photos(2, 0), _photos(2, 1), _photos(3, 2)
    out = bench._forgery(
        lambda pixels, i: _png(pixels),
        lambda data: np.asarray(key, float),
        key_agnostic,
        key,
        sources,
        own,
        targets,
        np.random.default_rng(1),
        read_for=read_for,
    )
    assert len(set(checked)) == 10  # the forged key and nine others on the clean targets
    assert out["negatives"] == 3 * 10 and out["tau"] == 49  # every read matches: nothing can be flagged at 1 %
    assert out["fpr_forged_key"]["value"] == 0.0 and out["forged"]["N=2 with originals"]["value"] == 0.0


def test_the_shipped_photo_markers_are_measured_both_ways_whenever_their_checkpoint_is_committed(tmp_path, monkeypatch):
    from mlcore.watermark.embed import OFFSET_KEY, TILE_KEYS

    monkeypatch.setattr(bench, "ROOT", tmp_path)
    assert bench.PHOTO_LABEL not in bench.molm_folders() and bench.TILES_LABEL not in bench.molm_folders()
    photo = tmp_path / "mlcore" / "zoo" / "checkpoints" / "molm-photo"
    (photo / "extractor").mkdir(parents=True)
    (photo / "manifest.json").write_text(json.dumps({"files": {}}))
    (photo / "extractor" / "config.json").write_text(json.dumps({"num_bits": 48, OFFSET_KEY: "random-search"}))
    folders = bench.molm_folders()
    assert folders[bench.PHOTO_LABEL] == photo
    tiles = json.loads((folders[bench.TILES_LABEL] / "extractor" / "config.json").read_text())
    assert TILE_KEYS in tiles and OFFSET_KEY not in tiles


def test_aligning_forgers_move_every_mark_to_one_phase_so_marks_at_secret_phases_add_up(monkeypatch):
    """A toy marker: the key's bits as ±20 on 48 scattered pixels of an 8-pixel tile (0 on the other 16),
    tiled over the photo at a secret phase per photo, read by folding the photo at the phase where the
    fold is most confident (as the portal searches). Moved to one phase first (each photo's phase, as the
    public phase search tells a forger, or found by correlating the marked photos with no reader at all),
    8 marks add up where their plain mean smears the tile."""
    monkeypatch.setattr(bench, "FORGE_NS", (8,))
    rng = np.random.default_rng(3)
    key = rng.integers(0, 2, 48)
    where = rng.permutation(64)[:48]  # scattered, so only the mark's own phase reads all 48 at ±20
    tile = np.zeros(64)
    tile[where] = np.where(key == 1, 20.0, -20.0)
    mark = np.tile(tile.reshape(8, 8), (16, 16))[..., None]
    phases = [(int(a), int(b)) for a, b in rng.integers(0, 8, (8, 2))]

    def flat(n: int, seed: int) -> list[np.ndarray]:
        r = np.random.default_rng(seed)
        return [np.clip(r.integers(90, 160) + r.normal(0, 2, (128, 128, 3)), 0, 255).astype(np.uint8) for _ in range(n)]

    def marked(pixels: np.ndarray, i: int) -> bytes:
        return _png(np.clip(pixels + np.roll(mark, phases[i], axis=(0, 1)), 0, 255).astype(np.uint8))

    def read_one(x: np.ndarray) -> np.ndarray:
        h = x.astype(float).mean(-1)
        tiles = (h - h.mean()).reshape(16, 8, 16, 8).mean((0, 2))
        folds = [np.roll(tiles, (-dy, -dx), axis=(0, 1)).ravel()[where] for dy in range(8) for dx in range(8)]
        folded = max(folds, key=lambda f: np.abs(f).mean())
        return 1 / (1 + np.exp(-folded))

    from mlcore.watermark import image_io

    found = iter(phases)
    out = bench._forgery(
        marked,
        lambda data: read_one(image_io.read(data).pixels),
        lambda images: np.stack([read_one(x) for x in images]),
        key,
        flat(8, 0),
        flat(8, 1),
        flat(40, 2),
        np.random.default_rng(4),
        aligners={"the phases": lambda written: next(found), "correlation": bench.correlation_aligner(reach=4)},
    )
    forged = out["forged"]
    assert list(forged) == [
        f"N=8 {originals} originals{aligned}"
        for aligned in ("", ", aligned by the phases", ", aligned by correlation")
        for originals in ("with", "without")
    ]
    for originals in ("with", "without"):
        plain = forged[f"N=8 {originals} originals"]
        assert plain["value"] < 0.5
        for aligner in ("the phases", "correlation"):
            aligned = forged[f"N=8 {originals} originals, aligned by {aligner}"]
            assert aligned["value"] == 1.0
            assert aligned["mean_matched_bits"] > plain["mean_matched_bits"] + 8


def test_a_row_whose_label_was_renamed_is_not_carried_beside_the_row_measured_under_its_new_name(tmp_path):
    assert len(bench.RENAMED) >= 2  # molm-photo's label and molm-photo-tiles' were both renamed
    for old, new in bench.RENAMED.items():
        rows = {old: {"n": 120}, "MOLM embed, a folder not on this machine": {"n": 8}}
        (tmp_path / "watermark-embed.json").write_text(json.dumps({"written_at": "then", "rows": rows, "forgery": {}}))
        carried, _ = bench.carried_over(tmp_path, {new})
        assert list(carried) == ["MOLM embed, a folder not on this machine"]
        carried, _ = bench.carried_over(tmp_path, set())  # not measured now under either name: carried as it was
        assert old in carried
