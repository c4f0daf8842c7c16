"""Every item kind is checked in the worker with the loader its jobs use, so a ``ready`` item is
one those jobs can open, and its card says what it is (architecture, parameters, experts per
layer and top-k for models; records and sources for datasets). Junk is refused with a message
and nothing stored."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from mlcore.analysis.routing import LayerRouting
from mlcore.items.registry import ALL_KINDS
from mlcore.jobs.registry import all_kinds
from tests.mlcore.analysis.trace_files import write_trace
from tests.webapp.library.conftest import AddItem, zip_bytes, zip_folder
from tests.webapp.library.test_ingest import assert_refused, stored_library_files
from webapp.library.models import LibraryItem

pytestmark = pytest.mark.django_db
ZOO = Path(__file__).resolve().parents[3] / "mlcore" / "zoo" / "checkpoints"


def png(size: int = 8) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (200, 30, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("kind", "folder", "expected"),
    [
        ("pointcloud-segmenter", "pointmoe-synmix", {"experts_per_layer": 4, "top_k": 2, "classes": 14}),
        ("pointcloud-segmenter", "ptv3-synmix-dense", {"classes": 14}),
        ("video-dit", "video-dit-digits", {"frames": 8, "resolution": 16}),
        ("watermark-markers", "molm", {"bits": 48}),
        ("diffusers-vae", "molm/vae", {"architecture": "diffusers AutoencoderKL"}),
        ("tiny-encoder", "lora-base-tiny", {}),
    ],
)
def test_it_accepts_each_model_kind_and_writes_its_card(
    add_item: AddItem, kind: str, folder: str, expected: dict
) -> None:
    item = add_item(zip_folder(ZOO / folder), kind=kind, name=folder, filename=f"{kind}.zip")
    assert item.status == LibraryItem.Status.READY, item.error
    assert item.card["architecture"] and item.card["parameters"] > 1000
    assert expected.items() <= item.card.items(), item.card
    if kind == "pointcloud-segmenter" and folder.startswith("ptv3"):
        assert "experts_per_layer" not in item.card  # a dense model has no experts to report


def _tiny_dense_lm(folder: Path) -> int:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def test_it_accepts_a_dense_hugging_face_lm_and_writes_its_card(add_item: AddItem, tmp_path: Path) -> None:
    parameters = _tiny_dense_lm(tmp_path / "student")
    item = add_item(zip_folder(tmp_path / "student"), kind="hf-lm", name="student", filename="student.zip")
    assert item.status == LibraryItem.Status.READY, item.error
    assert item.card["architecture"] == "Qwen3ForCausalLM" and item.card["layers"] == 2
    assert item.card["parameters"] == parameters


def test_it_refuses_a_dense_lm_that_asks_for_remote_code(add_item: AddItem, tmp_path: Path) -> None:
    folder = tmp_path / "remote"
    _tiny_dense_lm(folder)
    raw = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**raw, "auto_map": {"AutoModel": "evil.Model"}}))
    item = add_item(zip_folder(folder), kind="hf-lm", name="remote", filename="remote.zip")
    assert_refused(item, "asks for remote code")


def test_it_refuses_a_model_that_its_jobs_could_not_load(add_item: AddItem) -> None:
    files = {p.name: p.read_bytes() for p in (ZOO / "video-dit-digits").iterdir() if p.is_file()}
    item = add_item(zip_bytes(files), kind="pointcloud-segmenter", filename="not-a-segmenter.zip")
    assert_refused(item, "does not load as a pointcloud-segmenter item", "config.json and model.safetensors are needed")


def test_it_refuses_a_pickle_in_any_model_before_a_loader_touches_it(add_item: AddItem) -> None:
    # Protocol 0 has no magic bytes; diffusers would fall back to unpickling this .bin.
    files = {
        "config.json": (ZOO / "video-dit-digits" / "config.json").read_bytes(),
        "diffusion_pytorch_model.bin": b"cos\nsystem\n(S'touch /tmp/pwned'\ntR.",
    }
    item = add_item(zip_bytes(files), kind="video-dit", filename="pickled-dit.zip")
    assert_refused(item, "diffusion_pytorch_model.bin is a pickle", "convert the checkpoint to safetensors")
    assert not Path("/tmp/pwned").exists()


def test_it_refuses_a_torch_save_archive_hidden_in_a_dataset(add_item: AddItem) -> None:
    inner = zip_bytes({"archive/data.pkl": b"\x80\x02}q\x00.", "archive/version": b"3\n"})
    item = add_item(zip_bytes({"tensors.dat": inner}), kind="images", filename="sneaky.zip")
    assert_refused(item, "tensors.dat is a pickle")


def test_it_counts_the_images_of_an_image_set_and_refuses_a_fake_one(add_item: AddItem) -> None:
    item = add_item(zip_bytes({"a.png": png(), "b/c.png": png(16)}), kind="images", filename="set.zip")
    assert item.status == LibraryItem.Status.READY, item.error
    assert item.card["records"] == 2 and item.card["sources"] == ["a.png", "b/c.png"]
    fake = add_item(zip_bytes({"a.png": png(), "b.png": b"GIF89a not really"}), kind="images", filename="fake.zip")
    assert fake.status == LibraryItem.Status.REJECTED and "b.png is not a readable image" in fake.error
    assert stored_library_files() == [item.file.name]


def test_it_reads_every_point_cloud_of_a_set(add_item: AddItem, tmp_path: Path) -> None:
    from mlcore.pointcloud.io import write_ply

    xyz = np.random.default_rng(0).random((50, 3), dtype=np.float32)
    write_ply(tmp_path / "scan.ply", xyz)
    item = add_item(zip_bytes({"scan.ply": (tmp_path / "scan.ply").read_bytes()}), kind="pointclouds", filename="p.zip")
    assert item.status == LibraryItem.Status.READY, item.error
    assert (item.card["records"], item.card["points"]) == (1, 50)
    broken = (tmp_path / "scan.ply").read_bytes()[:-100]
    refused = add_item(zip_bytes({"scan.ply": broken}), kind="pointclouds", filename="broken.zip")
    assert refused.status == LibraryItem.Status.REJECTED and "scan.ply: the header declares 50 points" in refused.error
    assert stored_library_files() == [item.file.name]


def test_it_reads_a_graph_set(add_item: AddItem) -> None:
    from mlcore.data.graphs import generate_motif_graphs, to_json

    graphs = json.dumps(to_json(generate_motif_graphs(n_graphs=30, seed=0))).encode()
    item = add_item(zip_bytes({"graphs.json": graphs}), kind="graphs", filename="g.zip")
    assert item.status == LibraryItem.Status.READY, item.error
    assert item.card["records"] == 30 and item.card["classes"] == 3
    refused = add_item(zip_bytes({"graphs.json": b'{"graphs": 3}'}), kind="graphs", filename="bad.zip")
    assert refused.status == LibraryItem.Status.REJECTED and "does not load as a graphs item" in refused.error


def test_it_reads_a_routing_trace_and_refuses_other_safetensors(add_item: AddItem, tmp_path: Path) -> None:
    ids = np.array([[1, 3]] * 30, dtype=np.int32)
    path = write_trace(tmp_path / "t.safetensors", [LayerRouting(ids, np.array([10, 20]), 8)] * 2, "zoo:x")
    item = add_item(path.read_bytes(), kind="routing-trace", filename="t.safetensors")
    assert item.status == LibraryItem.Status.READY, item.error
    card = item.card
    assert (card["records"], card["layers"], card["experts_per_layer"], card["top_k"]) == (30, 2, 8, 2)
    weights = (ZOO / "lora-base-tiny" / "model.safetensors").read_bytes()
    refused = add_item(weights, kind="routing-trace", filename="w.safetensors")
    assert refused.status == LibraryItem.Status.REJECTED and "does not load as a routing-trace item" in refused.error


def test_it_refuses_binary_data_as_text(add_item: AddItem) -> None:
    item = add_item(zip_bytes({"notes.txt": b"fine\n", "blob.dat": bytes(range(256)) * 4}), filename="mixed.zip")
    assert_refused(item, "blob.dat is binary data, not text")


def test_the_library_holds_every_kind_that_a_job_accepts() -> None:
    accepted = {kind for k in all_kinds() for param in k.spec.params for kind in getattr(param, "accepts", ())}
    # The platform keyring is every registered watermark key, not a library item.
    assert accepted - {"watermark-keyring"} <= set(ALL_KINDS)
