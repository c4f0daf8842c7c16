"""bench.watermark_embed's baseline parts: invisible-watermark's forgery, rows over seeds, carried-over rows."""

import json

import numpy as np
import pytest
import torch

from bench import watermark_embed as bench


def _photos(n, seed, side=256):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:side, 0:side] / side
    smooth = [np.stack([a * x + b * y + c for a, b, c in rng.uniform(0, 1, (3, 3))], -1) * 150 for _ in range(n)]
    return [np.clip(s + rng.normal(0, 8, s.shape), 0, 255).astype(np.uint8) for s in smooth]


def test_the_dwt_dct_forgery_follows_the_protocol_of_the_markers(monkeypatch):
    pytest.importorskip("imwatermark")
    monkeypatch.setattr(bench, "FORGE_NS", (2, 3))
    out = bench.imwatermark_forgery("dwtDct", _photos(3, 0), _photos(3, 1), _photos(4, 2), seed=0)
    assert out["key_bits"] == 48 and out["sources"] == 3 and out["targets"] == 4
    assert out["negatives"] == 4 * 10  # the clean targets against the forged key and nine others
    assert set(out["forged"]) == {f"N={n} {w} originals" for n in (2, 3) for w in ("with", "without")}
    # DWT-DCT reads its own marks back: the real marks clear the threshold calibrated on clean crops.
    assert out["tpr_marked"]["value"] == 1.0


def test_a_learned_baseline_s_row_is_the_mean_of_its_seeds_with_every_seed_kept():
    def row(n, value):
        return {m: value for m in bench.ROW_METRICS} | {"n": n, "held_out_photos": {"n": 1, **_bits(value)}}

    def _bits(value):
        return {f"bits_{a}": value for a in bench.ATTACKS}

    out = bench.over_seeds({0: row(40, 0.6), 1: row(40, 0.8)})
    assert out["n"] == 80 and out["n_label"] == "80 (2 seeds)"
    assert out["bits_none"] == pytest.approx(0.7) and out["held_out_photos"]["bits_none"] == pytest.approx(0.7)
    assert set(out["by_seed"]) == {"0", "1"}


def test_molm_rows_not_measured_now_are_carried_over_and_say_from_when(tmp_path):
    previous = {
        "written_at": "2026-12-05T11:38:57+00:00",
        "tier": "quick",
        "rows": {
            "MOLM embed, a folder only another machine has": {"n": 8, "bits_none": 0.7},
            "MOLM embed, measured again now": {"n": 8, "bits_none": 0.5},
            "MOLM embed that could not run": {"error": "missing"},
            "DWT-DCT": {"n": 8, "bits_none": 0.9},
            # A learned row (every run trains and measures those), under a label no run writes any more.
            "MOLM on the baselines' training (an older label)": {"n": 40, "bits_none": 0.6},
        },
        "forgery": {"MOLM embed, a folder only another machine has": {"tau": 32}},
    }
    (tmp_path / "watermark-embed.json").write_text(json.dumps(previous))
    rows, forgeries = bench.carried_over(tmp_path, {"MOLM embed, measured again now"})
    assert list(rows) == ["MOLM embed, a folder only another machine has"] == list(forgeries)
    origin = {"written_at": "2026-12-05T11:38:57+00:00", "tier": "quick"}
    assert rows["MOLM embed, a folder only another machine has"]["carried_over"] == origin
    assert forgeries["MOLM embed, a folder only another machine has"]["carried_over"] == origin
    # Carried again later, a row keeps the run it was measured in.
    (tmp_path / "watermark-embed.json").write_text(json.dumps({"written_at": "later", "rows": rows}))
    again, _ = bench.carried_over(tmp_path, set())
    assert again["MOLM embed, a folder only another machine has"]["carried_over"] == origin
    assert bench.carried_note(again)[1].startswith("† Carried over from the report written 2026-12-05")


def test_the_secret_phase_copy_reads_by_search_and_leaves_the_fixed_grid_bundle_as_it_was(embed_bundle_dir):
    from mlcore.watermark import embed
    from mlcore.watermark.pipeline import load_bundle

    fixed = load_bundle(embed_bundle_dir)
    hidden = bench.secret_phase(fixed)
    assert embed.offset_mode(hidden.extractor) == "random-search"
    assert embed.offset_mode(fixed.extractor) is None
    assert hidden.markers is fixed.markers and hidden.generator is fixed.generator
    weights = fixed.extractor.state_dict()
    assert all(torch.equal(v, weights[k]) for k, v in hidden.extractor.state_dict().items())


def test_the_phase_table_counts_exact_and_wrapped_one_pixel_hits_per_reader():
    def image(found, key_aware):
        return {"drawn": [0, 5], "found": found, "key_aware": key_aware, "bits_true": 0.7, "bits_found": 0.5,
                "bits_key_aware": 0.7}  # fmt: skip

    phases = {"images": [image([0, 5], [0, 5]), image([23, 5], [0, 5]), image([9, 9], [0, 6])]}
    text = "\n".join(bench.phase_section(phases, stride=24))
    assert "| portal's search, key unknown | 1/3 [" in text and "| 2/3 | 0.500 |" in text  # 23 wraps to 0
    assert "| key-aware search | 2/3 [" in text and "| 3/3 | 0.700 |" in text


def test_the_attacked_phase_table_counts_hits_and_names_the_commonest_wrapped_miss_per_file():
    def image(found, after):
        return {
            "drawn": [23, 5],
            "found": found,
            "bits_found": 0.75,
            "bits_true": 0.75,
            "attacks": {"jpeg-75": {"found": after, "bits_found": 0.5, "bits_true": 0.625}},
        }

    # After JPEG two of three searches land one row below the secret phase (0 wraps to 23 + 1).
    phases = {"images": [image([23, 5], [0, 5]), image([23, 5], [0, 5]), image([22, 5], [23, 5])]}
    text = "\n".join(bench.attacked_phase_section(phases, stride=24))
    assert "| as written | 2/3 | 3/3 | (-1, 0): 1 | 0.750 | 0.750 |" in text
    assert "| jpeg-75 | 1/3 | 3/3 | (1, 0): 2 | 0.500 | 0.625 |" in text
