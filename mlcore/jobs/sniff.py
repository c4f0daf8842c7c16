"""Sniffing and safe unpacking moved down to :mod:`mlcore.sniff`, below the job layer, so that the
item kinds' checks (``mlcore.items``) use it without importing ``mlcore.jobs``. These names stay
importable from here, as ``mlcore.jobs`` keeps ``JobError``."""

from mlcore.sniff import (
    ARCHIVES,
    MAX_ARCHIVE_MEMBERS,
    MAX_COMPRESSION_RATIO,
    MAX_UNPACKED_BYTES,
    native_architecture,
    require_format,
    sniff,
    unpack,
    unpacked_checkpoint,
)

__all__ = [
    "ARCHIVES",
    "MAX_ARCHIVE_MEMBERS",
    "MAX_COMPRESSION_RATIO",
    "MAX_UNPACKED_BYTES",
    "native_architecture",
    "require_format",
    "sniff",
    "unpack",
    "unpacked_checkpoint",
]
