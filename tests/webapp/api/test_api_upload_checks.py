"""The API refuses an upload the team library would refuse, with the library's sentence, before
any job is saved or queued (``moelab submit`` prints that sentence)."""

from __future__ import annotations

import io
import json
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from mlcore.jobs import JobError
from mlcore.uploads import safetensors_header
from tests.webapp.api.conftest import ApiClient
from webapp.jobs.models import Job


def test_a_checkpoint_with_an_implausible_safetensors_header_is_a_field_error(
    api_as: Callable[[str], ApiClient], tmp_path: Path
) -> None:
    weights = struct.pack("<Q", 2**41) + b'{"weight": {"dtype": "F32"}}'
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("config.json", json.dumps({"model_type": "qwen3_moe"}))
        zf.writestr("model.safetensors", weights)
    upload = SimpleUploadedFile("my-model.zip", buffer.getvalue(), content_type="application/zip")
    response = api_as("member").post("/api/v1/jobs", {"kind": "compress-moe", "checkpoint": upload})
    assert response.status_code == 422
    (tmp_path / "model.safetensors").write_bytes(weights)
    with pytest.raises(JobError) as library:
        safetensors_header(tmp_path / "model.safetensors")
    assert response.json()["detail"] == [
        {"field": "checkpoint", "message": f"Checkpoint (my-model.zip): {library.value}"}
    ]
    assert not Job.objects.exists()
