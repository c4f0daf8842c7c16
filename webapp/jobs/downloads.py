"""Serving a job's files: artifacts are user content on our origin, so only a few media types
are shown inline and every response forbids running as a page."""

from __future__ import annotations

from typing import IO

from django.http import FileResponse

from webapp.jobs.models import JobArtifact

#: Media types a browser may show inline; anything else is sent as a download.
INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "video/mp4", "text/csv", "application/json"})


def download_name(item: JobArtifact) -> tuple[str, str]:
    """File name and media type for a download: a directory artifact was stored zipped."""
    filename = item.name.rsplit("/", 1)[-1]
    if item.file.name.endswith(".zip") and not filename.endswith(".zip"):
        return filename + ".zip", "application/zip"
    return filename, item.media_type


def artifact_response(item: JobArtifact, *, download: bool) -> FileResponse:
    filename, media_type = download_name(item)
    inline = media_type in INLINE_TYPES and not download
    stream: IO[bytes] = item.file.open("rb")
    response = FileResponse(stream, as_attachment=not inline, filename=filename, content_type=media_type)
    response["Content-Security-Policy"] = "sandbox; default-src 'none'; img-src 'self'; media-src 'self'"
    response["X-Content-Type-Options"] = "nosniff"
    return response
