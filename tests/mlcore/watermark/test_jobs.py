"""The three MOLM job kinds, run in-process on tiny random diffusers models (watermark-verify is W2's)."""

import json

import numpy as np
import pytest
from PIL import Image

from mlcore.jobs import InMemoryContext, JobError, ValidationError
from mlcore.jobs.registry import get_kind
from mlcore.watermark.keys import write_key_file
from tests.mlcore.watermark.tiny import write_bundle, write_generator


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory):
    return write_bundle(tmp_path_factory.mktemp("bundle"))


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    bits = "".join(np.random.default_rng(0).choice(["0", "1"], 48))
    return write_key_file(tmp_path_factory.mktemp("key") / "key.json", id="k1", name="acme-main", bits=bits)


def _run(kind: str, raw: dict, inputs: dict, tmp_path):
    spec = get_kind(kind)
    ctx = InMemoryContext(workdir=tmp_path)
    return spec.run(spec.spec.clean(raw), inputs, ctx), ctx


def test_generate_writes_new_pngs_under_the_key_and_checks_them(tmp_path, bundle_dir, key_file):
    metrics, ctx = _run(
        "watermark-generate",
        {"count": 3, "steps": 2, "seed": 0, "key": "k1"},
        {"model": bundle_dir, "key": key_file},
        tmp_path,
    )
    pngs = sorted((tmp_path / "images").glob("*.png"))
    assert len(pngs) == 3
    assert Image.open(pngs[0]).size == (16, 16)
    assert 0 <= metrics["self_check_bit_accuracy"] <= 1 and metrics["psnr"] > 0
    assert ctx.artifacts["image-0000.png"].media_type == "image/png"
    (registered,) = ctx.registrations  # the images go to the team library as an image set
    assert registered.kind == "images" and registered.path == tmp_path / "images"
    # The same seed gives the same images; another seed samples other latents (not re-decoded crops).
    _run(
        "watermark-generate",
        {"count": 3, "steps": 2, "seed": 0, "key": "k1"},
        {"model": bundle_dir, "key": key_file},
        tmp_path / "a",
    )
    _run(
        "watermark-generate",
        {"count": 3, "steps": 2, "seed": 1, "key": "k1"},
        {"model": bundle_dir, "key": key_file},
        tmp_path / "b",
    )
    same = np.asarray(Image.open(sorted((tmp_path / "a" / "images").glob("*.png"))[0]))
    other = np.asarray(Image.open(sorted((tmp_path / "b" / "images").glob("*.png"))[0]))
    assert np.array_equal(same, np.asarray(Image.open(pngs[0])))
    assert not np.array_equal(same, other)


def test_generate_rejects_a_key_of_another_length(tmp_path, bundle_dir):
    short = write_key_file(tmp_path / "short.json", id="k2", name="short", bits="01" * 16)
    with pytest.raises(JobError, match="has 32 bits but these markers carry 48"):
        _run("watermark-generate", {"count": 1, "seed": 0, "key": "k1"}, {"model": bundle_dir, "key": short}, tmp_path)


def test_generate_rejects_a_generator_without_markers(tmp_path, key_file):
    plain = write_generator(tmp_path / "plain")
    with pytest.raises(JobError, match=r"not a watermark-markers directory: markers/config\.json is missing"):
        _run("watermark-generate", {"count": 1, "seed": 0, "key": "k1"}, {"model": plain, "key": key_file}, tmp_path)


def test_train_registers_markers_that_generate_accepts(tmp_path, bundle_dir, key_file):
    raw = {"adapters": "16", "rank": 2, "steps": 4, "batch_size": 4, "seed": 0}
    metrics, ctx = _run("watermark-train", raw, {"generator": bundle_dir}, tmp_path)
    assert metrics["num_bits"] == 48
    assert 0 <= metrics["bit_accuracy"] <= 1
    registered = ctx.registrations[0]
    assert registered.kind == "watermark-markers"
    card = json.loads((registered.path / "card.json").read_text())
    assert card["num_bits"] == 48 and card["P"] == 16
    assert {"bit_accuracy", "fidelity", "losses"} <= set(ctx.charts)
    out, _ = _run(
        "watermark-generate",
        {"count": 2, "steps": 2, "seed": 0, "key": "k1"},
        {"model": registered.path, "key": key_file},
        tmp_path / "gen",
    )
    assert out["images"] == 2


def test_train_accepts_a_bare_diffusers_vae_folder(tmp_path):
    vae_dir = write_generator(tmp_path / "g", unet=False) / "vae"
    metrics, _ = _run(
        "watermark-train",
        {"adapters": "16", "rank": 2, "steps": 2, "batch_size": 2, "seed": 0},
        {"generator": vae_dir},
        tmp_path / "w",
    )
    assert metrics["num_bits"] == 48


def test_train_refuses_keys_shorter_than_48_bits(tmp_path, bundle_dir):
    with pytest.raises(JobError, match=r"24-bit keys on this decoder; at least 48 are needed"):
        _run("watermark-train", {"adapters": "4", "steps": 1, "seed": 0}, {"generator": bundle_dir}, tmp_path)


def test_robustness_reports_every_attack_for_both_methods(tmp_path, bundle_dir):
    raw = {
        "images": 8,
        "clean_images": 1000,
        "keys": 2,
        "attacks": "jpeg-50,crop-0.7,regen-own-vae",
        "averaging": 10,
        "query_budget": 20,
        "baseline": True,
        "seed": 0,
    }
    metrics, ctx = _run("watermark-robustness", raw, {"model": bundle_dir}, tmp_path)
    report = json.loads((tmp_path / "robustness.json").read_text())
    attacks = {(r["method"], r["attack"]) for r in report["rows"]}
    for name in ("none", "jpeg-50", "crop-0.7", "regen-own-vae"):
        assert ("MOLM", name) in attacks and ("DWT-DCT", name) in attacks
    assert {("MOLM", "average-remove-10"), ("MOLM", "forge-10"), ("MOLM", "query-nes")} <= attacks
    assert report["thresholds"]["0.001"]["negatives"] == 2000  # every clean image × every key
    assert report["thresholds"]["0.001"]["fpr"] <= 0.001
    assert {"bit_accuracy", "tpr_0.001", "tpr_0.01"} <= set(ctx.charts)
    assert 0 <= metrics["molm_jpeg-50_bit_accuracy"] <= 1


def test_robustness_refuses_too_few_clean_images_for_a_0_1_percent_threshold():
    with pytest.raises(ValidationError, match="clean_images"):
        get_kind("watermark-robustness").spec.clean({"clean_images": 500})


def test_every_kind_has_a_guide_and_a_sample_that_validates():
    for name in ("watermark-train", "watermark-generate", "watermark-robustness"):
        spec = get_kind(name).spec
        assert "How to read this" in spec.guide
        sample = dict(spec.sample)
        if any(p.type == "key" for p in spec.params):
            sample["key"] = "k1"  # the team picks its own key; the sample cannot know it
        spec.clean(sample)
