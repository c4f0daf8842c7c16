"""Images, archives and safetensors headers are refused with the message that names the real cause.

Each test builds the hostile or odd input the way a user or an attacker would (Pillow, zipfile,
tarfile, safetensors, or bytes by hand) and checks the sentence: a real but large PNG is told the
pixel limit, a file that declares more pixels than its bytes could hold is told it is a bomb, an
archive refusal states its cap and the member at fault, and no message names a server folder.
"""

from __future__ import annotations

import io
import json
import os
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest
from PIL import Image

from mlcore.jobs.spec import JobError
from mlcore.sniff import MAX_ARCHIVE_MEMBERS, unpack
from mlcore.uploads import MAX_SAFETENSORS_HEADER, safetensors_header
from mlcore.watermark.image_size import declared_size
from mlcore.watermark.verification import DEFAULT_MAX_PIXELS, BadImage, open_image

PILLOW_LIMIT = Image.MAX_IMAGE_PIXELS  # 89,478,485: Pillow warns above it, and we make that an error


def saved(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb_png(width: int, height: int, *, depth: int = 8) -> bytes:
    """A valid PNG header declaring width × height greyscale pixels over a 1 KiB zlib body."""
    header = struct.pack(">IIBBBBB", width, height, depth, 0, 0, 0, 0)
    body = zlib.compress(b"\0" * 1024, 9)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header) + png_chunk(b"IDAT", body) + png_chunk(b"IEND", b"")


def with_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    """A JPEG whose frame header (SOF0) is rewritten to declare width × height."""
    at = data.index(b"\xff\xc0")
    return data[: at + 5] + struct.pack(">HH", height, width) + data[at + 9 :]


def image_refusal(data: bytes, *fragments: str, max_pixels: int = DEFAULT_MAX_PIXELS) -> str:
    with pytest.raises(BadImage) as caught:
        open_image(data, name="upload.png", max_pixels=max_pixels)
    message = str(caught.value)
    assert message.startswith("upload.png: "), message
    for fragment in fragments:
        assert fragment in message, message
    return message


# --- images -------------------------------------------------------------------------------------


def test_a_real_png_larger_than_pillows_limit_is_told_the_pixel_limit_not_called_a_bomb() -> None:
    # 90,000,000 pixels: past Pillow's own bomb warning, which used to answer first.
    data = saved(Image.new("1", (10_000, 9_000)), "PNG")
    message = image_refusal(data, "10000×9000 pixels is over the limit of 16,777,216", "scale it down")
    assert "bomb" not in message and "holds" not in message


def test_past_pillows_limit_the_limit_named_is_pillows(tmp_path: Path) -> None:
    data = saved(Image.new("1", (10_000, 9_000)), "PNG")
    image_refusal(data, f"10000×9000 pixels is over the limit of {PILLOW_LIMIT:,}", max_pixels=10**12)


def test_a_real_large_jpeg_is_told_the_pixel_limit() -> None:
    data = saved(Image.new("L", (5_000, 4_000)), "JPEG", quality=1)
    message = image_refusal(data, "5000×4000 pixels is over the limit of 16,777,216")
    assert "bomb" not in message


def test_a_png_declaring_more_pixels_than_its_bytes_hold_is_called_a_bomb() -> None:
    data = bomb_png(20_000, 20_000)
    message = image_refusal(data, "declares 20000×20000 pixels (400,000,000)", f"its {len(data):,} bytes cannot hold")
    assert "a decompression bomb or a truncated file" in message and "limit" not in message


def test_a_one_bit_png_bomb_is_measured_by_its_own_depth() -> None:
    # 1-bit pixels take an eighth of a byte: 100,000 × 100,000 of them still need ~1.2 MB of zlib.
    image_refusal(bomb_png(100_000, 100_000, depth=1), "(a PNG that size takes at least 1,211,")


def test_a_jpeg_declaring_more_pixels_than_its_bytes_hold_is_called_a_bomb() -> None:
    data = with_jpeg_size(saved(Image.new("RGB", (16, 16), "red"), "JPEG"), 60_000, 60_000)
    image_refusal(data, "declares 60000×60000 pixels", "a JPEG that size takes at least 7,031,250", "bomb")


def test_a_webp_of_any_declared_size_is_told_the_limit_as_webp_has_no_byte_bound() -> None:
    data = bytearray(saved(Image.new("RGB", (16, 16), "red"), "WEBP", lossless=True))
    assert data[12:16] == b"VP8L"
    bits = int.from_bytes(data[21:25], "little")
    bits = (bits & ~0xFFFFFFF) | 16_383 | (16_383 << 14)  # 16384 × 16384, WebP's largest
    data[21:25] = bits.to_bytes(4, "little")
    assert declared_size(bytes(data)).pixels == 16_384**2
    image_refusal(bytes(data), "16384×16384 pixels is over the limit of 16,777,216")


def test_a_png_with_a_zero_width_is_invalid() -> None:
    image_refusal(bomb_png(0, 10), "declares 0×10 pixels, which is invalid (a PNG side is 1 to")


def test_small_truncated_and_foreign_images_keep_their_causes() -> None:
    png = saved(Image.effect_noise((64, 64), 50), "PNG")
    image_refusal(png[: len(png) // 2], "truncated or corrupt image")
    image_refusal(saved(Image.new("RGB", (4, 4)), "GIF"), "not a PNG, JPEG or WebP image")


def test_an_image_refusal_names_the_upload_not_the_folder_it_sits_in(tmp_path: Path) -> None:
    path = tmp_path / "big.png"
    path.write_bytes(bomb_png(20_000, 20_000))
    with pytest.raises(BadImage) as caught:
        open_image(path, name="big.png")
    assert str(tmp_path) not in str(caught.value)


# --- archives -----------------------------------------------------------------------------------


def unpack_refusal(archive: Path, *fragments: str, max_bytes: int | None = None) -> str:
    options = {} if max_bytes is None else {"max_bytes": max_bytes}
    with pytest.raises(JobError) as caught:
        unpack(archive, archive.parent / "out", **options)
    message = str(caught.value)
    assert message.startswith(f"{archive.name}: "), message
    assert str(archive.parent) not in message and "/tmp" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def zip_of(path: Path, members: dict[str, bytes], *, compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def tar_of(path: Path, *members: tarfile.TarInfo) -> Path:
    with tarfile.open(path, "w") as tf:
        for member in members:
            tf.addfile(member, io.BytesIO(b"\0" * member.size) if member.isfile() else None)
    return path


def tar_member(name: str, kind: bytes = tarfile.REGTYPE, *, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size, link
    return info


def test_a_zip_bomb_is_told_its_ratio_and_the_cap(tmp_path: Path) -> None:
    archive = zip_of(tmp_path / "bomb.zip", {"zeros.bin": b"\0" * (11 * 2**20)})
    message = unpack_refusal(archive, f"bytes declare {11 * 2**20:,} bytes unpacked", "at most 200×", "bomb")
    assert not (tmp_path / "out" / "zeros.bin").exists(), message


def test_an_archive_over_the_size_limit_states_both_sizes(tmp_path: Path) -> None:
    archive = zip_of(tmp_path / "big.zip", {"a.bin": os.urandom(3000)}, compression=zipfile.ZIP_STORED)
    unpack_refusal(
        archive, "its members add up to 3,000 bytes unpacked, more than the limit of 2,000 bytes", max_bytes=2000
    )


def test_an_archive_with_too_many_members_states_the_cap(tmp_path: Path) -> None:
    archive = zip_of(tmp_path / "many.zip", {f"f{i}": b"" for i in range(MAX_ARCHIVE_MEMBERS + 1)})
    unpack_refusal(archive, "holds 10,001 members, more than the 10,000 an upload may hold")


@pytest.mark.parametrize(
    ("name", "how"),
    [
        ("../evil.txt", "climbs up with '..'"),
        ("a/../../evil.txt", "climbs up with '..'"),
        ("/etc/cron.d/x", "absolute"),
    ],
)
def test_a_member_path_that_leaves_the_archive_is_named(tmp_path: Path, name: str, how: str) -> None:
    unpack_refusal(zip_of(tmp_path / "slip.zip", {name: b"x"}), f"member {name!r}", how, "outside the archive")
    unpack_refusal(tar_of(tmp_path / "slip.tar", tar_member(name, size=1)), f"member {name!r}", how)
    assert not (tmp_path / "evil.txt").exists()


def test_a_zip_member_that_is_a_symbolic_link_is_named(tmp_path: Path) -> None:
    archive = tmp_path / "link.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("passwd")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    unpack_refusal(archive, "member 'passwd' is a symbolic link")


@pytest.mark.parametrize(
    ("kind", "what"),
    [(tarfile.SYMTYPE, "a symbolic link"), (tarfile.LNKTYPE, "a hard link"), (tarfile.FIFOTYPE, "a device or FIFO")],
)
def test_a_tar_member_that_is_no_file_is_named_for_what_it_is(tmp_path: Path, kind: bytes, what: str) -> None:
    unpack_refusal(tar_of(tmp_path / "odd.tar", tar_member("x", kind, link="/etc/passwd")), f"member 'x' is {what}")


def test_a_tar_made_with_dot_as_its_root_unpacks(tmp_path: Path) -> None:
    # `tar -C folder -czf out.tgz .` starts with the member "./", which used to be refused.
    archive = tar_of(tmp_path / "dot.tar", tar_member("./", tarfile.DIRTYPE), tar_member("./sub/a.txt", size=3))
    assert (unpack(archive, tmp_path / "out") / "sub" / "a.txt").read_bytes() == b"\0\0\0"


def test_a_nested_archive_is_kept_as_a_file_not_unpacked(tmp_path: Path) -> None:
    inner = zip_of(tmp_path / "inner.zip", {"zeros.bin": b"\0" * 2**20})
    outer = zip_of(tmp_path / "outer.zip", {"inner.zip": inner.read_bytes()})
    out = unpack(outer, tmp_path / "out")
    assert sorted(p.name for p in out.iterdir()) == ["inner.zip"]


def test_a_member_the_file_system_cannot_take_is_named_not_called_corrupt(tmp_path: Path) -> None:
    name = "n" * 300 + ".txt"
    message = unpack_refusal(zip_of(tmp_path / "long.zip", {name: b"x"}), "cannot be written (File name too long)")
    assert "corrupt" not in message


def test_a_zip_with_broken_deflate_data_is_called_corrupt_not_an_internal_error(tmp_path: Path) -> None:
    archive = zip_of(tmp_path / "broken.zip", {"a.txt": b"hello " * 1000})
    data = bytearray(archive.read_bytes())
    start = 30 + len("a.txt")  # the member's data follows its local header
    data[start : start + 4] = b"\xff\xff\xff\xff"  # an invalid deflate block type
    archive.write_bytes(bytes(data))
    unpack_refusal(archive, "corrupt zip archive")


def test_a_zip_whose_directory_understates_a_size_is_called_corrupt(tmp_path: Path) -> None:
    archive = zip_of(tmp_path / "lies.zip", {"a.txt": b"A" * 100_000})
    data = archive.read_bytes()
    small = struct.pack("<I", 10)
    # The uncompressed size sits at offset 22 of the local header and 24 of the central entry.
    central = data.index(b"PK\x01\x02")
    data = data[:22] + small + data[26 : central + 24] + small + data[central + 28 :]
    archive.write_bytes(data)
    unpack_refusal(archive, "corrupt zip archive")


# --- safetensors headers ------------------------------------------------------------------------


def safetensors_refusal(path: Path, *fragments: str) -> str:
    with pytest.raises(JobError) as caught:
        safetensors_header(path)
    message = str(caught.value)
    assert message.startswith(f"{path.name}: ") and str(path.parent) not in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_a_safetensors_header_length_beyond_any_file_is_invalid(tmp_path: Path) -> None:
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", 2**64 - 1) + b'{"w": {}}')
    message = safetensors_refusal(path, "its length 18446744073709551615 is invalid")
    assert "18,446,744,073,709,551,615" not in message


def test_a_safetensors_header_longer_than_the_file_says_what_the_file_holds(tmp_path: Path) -> None:
    path = tmp_path / "cut.safetensors"
    path.write_bytes(struct.pack("<Q", 2**41) + b'{"w": {}}')
    message = safetensors_refusal(path, "it declares 2,199,023,255,552 bytes; the file holds 9")
    assert "implausibly" not in message and "100,000,000" not in message


def test_a_safetensors_header_the_file_holds_but_the_library_will_not_read_states_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "huge.safetensors"
    length = MAX_SAFETENSORS_HEADER + 1
    with path.open("wb") as f:
        f.write(struct.pack("<Q", length) + b"{")
        f.truncate(8 + length)  # sparse: the header's bytes are there, and take no disk
    safetensors_refusal(path, f"its safetensors header is {length:,} bytes, longer than the 100,000,000")


def test_a_safetensors_header_that_is_not_json_is_called_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "text.safetensors"
    raw = b"not json at all"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)
    safetensors_refusal(path, "corrupt safetensors header")
    raw = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 4)
    safetensors_refusal(path, "does not lie where the header says")
