"""The checks every upload goes through, wherever it arrives: a job's file field or the team library.

Django-free and torch-free, so the web process can run them at submission (before a job is
queued) and the worker runs them again on what it downloads, with the same sentences both times:

* links anywhere in an unpacked tree are refused (a link could point a job at any file on the worker);
* pickles anywhere are refused, by name or by content (unpickling runs code);
* every safetensors file's header is read and checked as the safetensors library checks it (a
  plausible length, JSON that names each tensor's dtype, shape and byte range, ranges that tile the
  data exactly), so a corrupt checkpoint is refused with one sentence instead of failing inside a
  loader.

Sniffing and safe unpacking (member count, unpacked size, compression ratio, zip slip) are
:mod:`mlcore.sniff`'s. Messages name files by what the user uploaded: the upload's name, or a
member's path inside the archive, never a path on a server.
"""

from __future__ import annotations

import json
import math
import struct
import zipfile
from pathlib import Path
from typing import Any

from mlcore.errors import JobError

#: Names PyTorch and Hugging Face give pickled weights (protocol-0 pickles have no magic bytes).
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
#: The safetensors library refuses larger headers (``MAX_HEADER_SIZE``), so do we.
MAX_SAFETENSORS_HEADER = 100_000_000
SAFETENSORS_SUFFIX = ".safetensors"

#: Bits per element of every dtype the safetensors library (0.8) reads; any other name it refuses.
_DTYPE_BITS = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}


def relative_name(path: Path, root: Path) -> str:
    """How the user knows ``path``: its path inside the uploaded tree ``root`` (or its own name)."""
    try:
        return path.relative_to(root).as_posix() if root.is_dir() else path.name
    except ValueError:
        return path.name


def files_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]


def is_pickle(path: Path) -> bool:
    """Named like a pickled checkpoint, a raw pickle, or ``torch.save``'s zip whose index is one."""
    if path.suffix.lower() in PICKLE_SUFFIXES:
        return True
    with path.open("rb") as f:
        head = f.read(2)
    if len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return True
    if not zipfile.is_zipfile(path):
        return False
    try:
        with zipfile.ZipFile(path) as zf:
            return any(name.endswith("data.pkl") for name in zf.namelist())
    except zipfile.BadZipFile:
        return False


def pickle_refusal(name: str) -> str:
    return (
        f"{name} is a pickle, which can run code when loaded; "
        "convert the checkpoint to safetensors and upload it without the pickle."
    )


def _header_too_large(name: str, length: int) -> str:
    # Only for a header the file really holds: one it does not hold is called corrupt first.
    return (
        f"{name}: its safetensors header is {length:,} bytes, longer than the {MAX_SAFETENSORS_HEADER:,} the "
        "safetensors library reads, so no loader can open it. Save the checkpoint in smaller shards."
    )


def _corrupt_header(name: str, detail: str = "") -> str:
    return f"{name}: corrupt safetensors header{f' ({detail})' if detail else ''}."


def safetensors_header(path: Path, *, name: str | None = None) -> dict[str, Any]:
    """The header of a safetensors file, checked as the safetensors library checks it before it
    maps a tensor; a :class:`JobError` naming ``name`` (default: the file's name) otherwise.

    Only the header is read, so this is cheap for a checkpoint of any size.
    """
    name = name or path.name
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise JobError(f"{name}: {size} bytes is too short for a safetensors file; the file is corrupt.")
        (length,) = struct.unpack("<Q", prefix)
        # Invalid, then more than the file holds, then the library's cap: each names the real fault.
        if length >= 2**63:
            raise JobError(_corrupt_header(name, f"its length {length} is invalid: no file holds that many bytes"))
        if length > size - 8:
            raise JobError(_corrupt_header(name, f"it declares {length:,} bytes; the file holds {size - 8:,}"))
        if length > MAX_SAFETENSORS_HEADER:
            raise JobError(_header_too_large(name, length))
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise JobError(_corrupt_header(name, "it is not UTF-8 JSON")) from None
    if not isinstance(header, dict):
        raise JobError(_corrupt_header(name))
    _check_tensor_layout(header, data_bytes=size - 8 - length, name=name)
    return header


def _shown(tensor: str) -> str:
    """A tensor's name for a message: the header is the uploader's text, of any length."""
    return repr(tensor if len(tensor) <= 80 else tensor[:80] + "…")


def _count(value: Any) -> bool:
    """A JSON non-negative integer (``true`` is not one, though Python's ``bool`` is an ``int``)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_tensor_layout(header: dict[str, Any], *, data_bytes: int, name: str) -> None:
    """Each entry as the safetensors library parses it; each tensor's byte range as long as its dtype
    and shape need; the ranges tiling the data exactly, from its first byte to its last."""
    ranges: list[tuple[int, int, str]] = []
    for tensor, entry in header.items():
        if tensor == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise JobError(_corrupt_header(name, "its __metadata__ must map names to strings"))
            continue
        entry = entry if isinstance(entry, dict) else {}
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        bits = _DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
        if (
            bits is None
            or not isinstance(shape, list)
            or not all(_count(d) for d in shape)
            or not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_count(o) for o in offsets)
        ):
            raise JobError(_corrupt_header(name, f"tensor {_shown(tensor)} lacks a valid dtype, shape or data_offsets"))
        begin, end = offsets
        if end < begin:
            raise JobError(_corrupt_header(name, f"tensor {_shown(tensor)} ends before it begins"))
        needed_bits = math.prod(shape) * bits
        if needed_bits % 8 or end - begin != needed_bits // 8:
            raise JobError(
                f"{name}: tensor {_shown(tensor)} spans {end - begin:,} bytes but {shape} of {dtype} needs "
                f"{needed_bits / 8:,g}; the file is corrupt."
            )
        ranges.append((begin, end, tensor))
    covered = 0
    for begin, end, tensor in sorted(ranges):
        if begin != covered or end > data_bytes:
            raise JobError(
                f"{name}: tensor {_shown(tensor)} does not lie where the header says; the file is truncated or corrupt."
            )
        covered = end
    if covered != data_bytes:
        raise JobError(
            f"{name}: its tensors cover {covered:,} of its {data_bytes:,} data bytes; the file is truncated or corrupt."
        )


def safetensors_parameters(path: Path, *, name: str | None = None) -> int:
    """Parameters in a safetensors file, from its (checked) header alone: no tensor is read."""
    header = safetensors_header(path, name=name)
    return sum(math.prod(entry["shape"]) for key, entry in header.items() if key != "__metadata__")


def check_links(root: Path) -> None:
    """Refuse links anywhere in a tree."""
    if root.is_symlink():
        raise JobError(f"{root.name} is a symbolic link; register the directory it points to instead.")
    for path in root.rglob("*"):
        if path.is_symlink():
            raise JobError(f"{relative_name(path, root)} is a symbolic link; refusing the item.")


def check_tree(root: Path) -> None:
    """Every check that needs no loader, over an unpacked upload or a library item: no links, no
    pickles, and a sound header in every ``*.safetensors`` file. Messages name files relative to ``root``."""
    check_links(root)
    for path in files_of(root):
        name = relative_name(path, root)
        # Before any loader runs: some (diffusers' from_pretrained) would fall back to unpickling a .bin.
        if is_pickle(path):
            raise JobError(pickle_refusal(name))
        if path.suffix.lower() == SAFETENSORS_SUFFIX:
            safetensors_header(path, name=name)


def forget_source_paths(folder: Path) -> list[str]:
    """Remove ``_name_or_path`` from the diffusers configs under ``folder``: diffusers records where
    a component was loaded from, which on a worker is a path of its own cache, not something an
    output may carry to the person who downloads it. Returns the files changed (relative names)."""
    import json

    changed = []
    for path in sorted(Path(folder).rglob("*config.json")):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(raw, dict) and "_name_or_path" in raw:
            del raw["_name_or_path"]
            path.write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            changed.append(relative_name(path, Path(folder)))
    return changed
