"""One validation path for uploads: the checks the team library runs are the checks a job's upload
gets in ``runner.prepare`` (the worker) and ``runner.check_files`` (the web, before queueing)."""

from __future__ import annotations

import json
import random
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from mlcore.jobs import JobError
from mlcore.jobs.references import LocalResolver
from mlcore.jobs.registry import get_kind
from mlcore.jobs.runner import check_files, prepare
from mlcore.uploads import check_tree, safetensors_header, safetensors_parameters

IMPLAUSIBLE = "model.safetensors: corrupt safetensors header (it declares 2,199,023,255,552 bytes; the file holds 28)."


def write_safetensors(path: Path, header: object, data: bytes = b"") -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


def implausible(path: Path) -> Path:
    """A file that starts like safetensors but declares a 2 TiB header."""
    path.write_bytes(struct.pack("<Q", 2**41) + b'{"weight": {"dtype": "F32"}}')
    return path


def checkpoint_zip(path: Path, weights: Path) -> Path:
    """A Hugging Face checkpoint archive (config, tokenizer, weights), as compress-moe's upload takes."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("config.json", json.dumps({"model_type": "qwen3_moe"}))
        zf.writestr("tokenizer.json", "{}")
        zf.write(weights, "model.safetensors")
    return path


def safetensors_opens(path: Path) -> bool:
    try:
        with safe_open(path, framework="numpy") as f:
            for name in f.keys():  # noqa: SIM118  (a safe_open handle is not a dict)
                f.get_tensor(name)
        return True
    except Exception:  # SafetensorError, and whatever else the reader raises on a corrupt file
        return False


def test_the_header_check_accepts_what_safetensors_writes(tmp_path: Path) -> None:
    tensors = {
        "a": np.zeros((2, 3), np.float32),
        "b": np.zeros(0, np.int64),
        "c": np.ones(5, bool),
        "d": np.arange(7, dtype=np.float16),
        "e": np.arange(3, dtype=np.uint8),
    }
    save_file(tensors, tmp_path / "x.safetensors", metadata={"format": "pt"})
    assert set(safetensors_header(tmp_path / "x.safetensors")) == {"__metadata__", "a", "b", "c", "d", "e"}
    assert safetensors_parameters(tmp_path / "x.safetensors") == 6 + 0 + 5 + 7 + 3
    save_file({}, tmp_path / "empty.safetensors")
    assert safetensors_header(tmp_path / "empty.safetensors") == {}


def test_it_refuses_an_implausibly_large_header_with_the_librarys_sentence(tmp_path: Path) -> None:
    with pytest.raises(JobError) as caught:
        safetensors_header(implausible(tmp_path / "model.safetensors"))
    assert str(caught.value) == IMPLAUSIBLE


@pytest.mark.parametrize(
    ("header", "data", "expected"),
    [
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "does not lie where"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, b"\0" * 12, "needs 16"),
        ({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 6, "cover 4 of its 6 data bytes"),
        ({"w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\0", "lacks a valid dtype"),
        ({"w": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}}, b"\0", "lacks a valid dtype"),
        ({"w": {"dtype": "U8", "shape": [1], "data_offsets": [1, 0]}}, b"\0", "ends before it begins"),
        ({"__metadata__": {"n": 1}}, b"", "__metadata__ must map names to strings"),
        ([], b"", "corrupt safetensors header."),
    ],
)
def test_it_refuses_a_header_that_does_not_describe_the_file(
    tmp_path: Path, header: object, data: bytes, expected: str
) -> None:
    path = write_safetensors(tmp_path / "w.safetensors", header, data)
    assert not safetensors_opens(path)  # the safetensors library refuses each of them too
    with pytest.raises(JobError, match=r"^w\.safetensors: ") as caught:
        safetensors_header(path)
    assert expected in str(caught.value)


def test_it_refuses_a_header_longer_than_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    path.write_bytes(struct.pack("<Q", 5000) + b'{"w": {}}')
    with pytest.raises(JobError, match=r"corrupt safetensors header \(it declares 5,000 bytes; the file holds 9\)"):
        safetensors_header(path)


def test_it_agrees_with_the_safetensors_library_on_damaged_files(tmp_path: Path) -> None:
    """Cut and bit-flipped copies of a real file: the check passes exactly those the reader opens,
    so a file it lets through never fails later inside a loader."""
    good = tmp_path / "good.safetensors"
    save_file({"a": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.ones(3, np.int16)}, good)
    original = good.read_bytes()
    rng = random.Random(0)
    damaged = tmp_path / "damaged.safetensors"
    agreed = refused = 0
    for trial in range(300):
        data = bytearray(original)
        if trial % 3 == 0:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 3)):
                position = rng.randrange(len(data))
                data[position] ^= 1 << rng.randrange(8)
        damaged.write_bytes(bytes(data))
        try:
            safetensors_header(damaged)
            ours = True
        except JobError:
            ours = False
        assert ours == safetensors_opens(damaged), bytes(data[:200])
        agreed += 1
        refused += not ours
    assert agreed == 300 and refused > 100  # most damage is caught, and none of it differently


def test_a_pickle_anywhere_in_a_tree_is_refused_by_its_path(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.dat").write_bytes(b"\x80\x04\x95pickled")
    with pytest.raises(JobError, match=r"^model/weights.dat is a pickle, which can run code when loaded"):
        check_tree(tmp_path)


def test_a_compress_moe_checkpoint_with_an_implausible_header_fails_before_running(tmp_path: Path) -> None:
    """The worker path: ``runner.prepare`` refuses the upload with the library's sentence, naming the
    field and the upload, and nothing of the worker's folders."""
    archive = checkpoint_zip(tmp_path / "my-model.zip", implausible(tmp_path / "weights"))
    kind = get_kind("compress-moe")
    workdir = tmp_path / "work"
    with pytest.raises(JobError) as caught:
        prepare(kind, {}, {"checkpoint": [archive]}, resolver=LocalResolver(cache=tmp_path / "cache"), workdir=workdir)
    message = str(caught.value)
    assert message == f"Checkpoint (my-model.zip): {IMPLAUSIBLE}"
    assert str(tmp_path) not in message


def test_a_single_safetensors_upload_gets_the_header_check_not_a_format_guess(tmp_path: Path) -> None:
    trace = implausible(tmp_path / "model.safetensors")
    with pytest.raises(JobError) as caught:
        check_files(get_kind("routing-analysis"), {"trace": [trace]}, tmp_path / "work")
    # The upload's name is said once, with the field's title.
    assert str(caught.value) == f"Trace (model.safetensors): {IMPLAUSIBLE.removeprefix('model.safetensors: ')}"


def test_a_torch_save_file_in_an_archive_is_refused_as_a_pickle(tmp_path: Path) -> None:
    archive = tmp_path / "ckpt.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("config.json", "{}")
        zf.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    with pytest.raises(JobError) as caught:
        check_files(get_kind("compress-moe"), {"checkpoint": [archive]}, tmp_path / "work")
    assert str(caught.value).startswith("Checkpoint (ckpt.zip): archive/data.pkl is a pickle")


def test_outputs_forget_where_their_diffusers_components_were_loaded_from(tmp_path):
    import json

    from mlcore.uploads import forget_source_paths

    (tmp_path / "vae").mkdir()
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "vae" / "config.json").write_text(
        json.dumps({"_class_name": "AutoencoderKL", "_name_or_path": "/srv/worker/cache/vae", "latent_channels": 4})
    )
    (tmp_path / "scheduler" / "scheduler_config.json").write_text(json.dumps({"num_train_timesteps": 1000}))
    assert forget_source_paths(tmp_path) == ["vae/config.json"]
    vae = json.loads((tmp_path / "vae" / "config.json").read_text())
    assert vae == {"_class_name": "AutoencoderKL", "latent_channels": 4}
    assert "/srv" not in "".join(p.read_text() for p in tmp_path.rglob("*.json"))
