"""Job uploads get the team library's checks at submission, before anything is queued, and the
errors a submission answers never name a folder of the server."""

from __future__ import annotations

import io
import json
import struct
import tempfile
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from mlcore.items.checks import card_for, unpack_item
from mlcore.jobs import JobError
from webapp.jobs.models import Job
from webapp.jobs.services import SubmitError, job_submit, safe_message

pytestmark = pytest.mark.django_db

IMPLAUSIBLE = "model.safetensors: corrupt safetensors header (it declares 2,199,023,255,552 bytes; the file holds 28)."


def checkpoint_with_an_implausible_header() -> bytes:
    """A Hugging Face checkpoint archive whose weights declare a 2 TiB safetensors header."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("config.json", json.dumps({"model_type": "qwen3_moe"}))
        zf.writestr("tokenizer.json", "{}")
        zf.writestr("model.safetensors", struct.pack("<Q", 2**41) + b'{"weight": {"dtype": "F32"}}')
    return buffer.getvalue()


def test_it_refuses_a_checkpoint_with_an_implausible_safetensors_header_before_queueing(
    team, member, broker, django_capture_on_commit_callbacks, tmp_path: Path
) -> None:
    content = checkpoint_with_an_implausible_header()
    upload = SimpleUploadedFile("my-model.zip", content, content_type="application/zip")
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(SubmitError) as caught:
        job_submit(team=team, user=member, kind="compress-moe", raw_params={}, files={"checkpoint": [upload]})
    assert caught.value.errors == [("checkpoint", f"Checkpoint (my-model.zip): {IMPLAUSIBLE}")]
    assert not Job.objects.exists() and broker.llen("gpu") == 0

    # The team library refuses the same content with the same sentence.
    blob = tmp_path / "my-model.zip"
    blob.write_bytes(content)
    with pytest.raises(JobError) as library:
        card_for("hf-moe-lm", "model", unpack_item(blob, tmp_path / "item"))
    assert str(library.value) == IMPLAUSIBLE


def test_it_refuses_a_pickle_inside_an_uploaded_checkpoint_as_the_library_does(team, member) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("config.json", "{}")
        zf.writestr("pytorch_model.bin", b"\x80\x04pickle")
    upload = SimpleUploadedFile("pickled.zip", buffer.getvalue())
    with pytest.raises(SubmitError) as caught:
        job_submit(team=team, user=member, kind="compress-moe", raw_params={}, files={"checkpoint": [upload]})
    field, message = caught.value.errors[0]
    assert field == "checkpoint"
    assert message.startswith("Checkpoint (pickled.zip): pytorch_model.bin is a pickle, which can run code")
    assert not Job.objects.exists()


def test_a_submission_error_never_names_a_server_folder(settings) -> None:
    scratch = f"{tempfile.gettempdir()}/moelab-submit-abc123/upload/notes/0/notes.txt"
    error = SubmitError([("notes", f"Notes: could not read {scratch}.")])
    assert error.errors == [("notes", "Notes: could not read …/notes.txt.")]
    assert str(error) == "notes: Notes: could not read …/notes.txt."
    media = Path(settings.MEDIA_ROOT) / "inputs" / "x" / "notes.txt"
    assert safe_message(f"{media} is gone") == "…/notes.txt is gone"
