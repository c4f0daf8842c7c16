"""The size an image declares in its header, and the fewest bytes an honest file of that size takes.

:func:`~mlcore.watermark.verification.open_image` refuses images over a pixel limit before any
pixel is decoded. Two different files reach that refusal: a real photo that is simply large (scale
it down) and a file whose header declares far more pixels than its bytes could hold (a decompression
bomb, or a truncated file). Pillow's own guard calls both a bomb; the user of a real 100-megapixel
photo deserves to hear the limit instead. The difference is a lower bound on the bytes an encoder
needs for the declared pixels, which a lying file cannot meet:

* PNG: the pixels are a zlib stream of ``height × (1 + ⌈width × channels × depth / 8⌉)`` bytes,
  and deflate packs at most 258 bytes into two 1-bit codes: 1032 to 1, never more (zlib reaches
  ~1029 on all zeros).
* Huffman-coded JPEG: every 8×8 block of the full-resolution component carries at least a 1-bit DC
  code, so at least ``blocks / 8`` bytes (real files use 85-255 pixels per byte at the lowest
  quality, against this bound's 512).
* Arithmetic-coded JPEG and WebP: their coders can spend far under one bit per block (a lossless
  WebP can even use 0-bit codes), so there is no bound; a large declared size is reported as over
  the limit, which is true either way.

Standard library only: the web process calls it for every portal upload.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

#: Deflate's best case: a 258-byte match coded with a 1-bit length code and a 1-bit distance code.
DEFLATE_MAX_RATIO = 1032
#: The largest width or height PNG allows (2**31 - 1).
PNG_MAX_SIDE = 2**31 - 1
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_PNG_DEPTHS = {1, 2, 4, 8, 16}
# Start-of-frame markers; C9-CB and CD-CF are arithmetic-coded. C4 (DHT), C8 (JPG), CC (DAC) are not frames.
_JPEG_FRAMES = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
_JPEG_ARITHMETIC = {0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


@dataclass(frozen=True)
class DeclaredSize:
    format: str  # "PNG", "JPEG" or "WebP", as a user names it
    width: int
    height: int
    #: The fewest bytes an honest file of this size takes, or ``None`` where no bound is known.
    least_bytes: int | None = None
    #: Why the size is invalid whatever the bytes ("a PNG side is at least 1 pixel"), or ``None``.
    invalid: str | None = None

    @property
    def pixels(self) -> int:
        return self.width * self.height


def declared_size(data: bytes) -> DeclaredSize | None:
    """The size ``data``'s header declares, or ``None`` when it is not a PNG, JPEG or WebP we can parse."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png(data)
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    return None


def _png(data: bytes) -> DeclaredSize | None:
    if len(data) < 33 or data[12:16] != b"IHDR":
        return None
    width, height, depth, colour = struct.unpack_from(">IIBB", data, 16)
    if not (1 <= width <= PNG_MAX_SIDE and 1 <= height <= PNG_MAX_SIDE):
        return DeclaredSize("PNG", width, height, invalid=f"a PNG side is 1 to {PNG_MAX_SIDE:,} pixels")
    channels = _PNG_CHANNELS.get(colour)
    if channels is None or depth not in _PNG_DEPTHS:
        return DeclaredSize("PNG", width, height)  # Pillow names the bad colour type or depth
    raw = height * (1 + math.ceil(width * channels * depth / 8))
    return DeclaredSize("PNG", width, height, least_bytes=math.ceil(raw / DEFLATE_MAX_RATIO))


def _jpeg(data: bytes) -> DeclaredSize | None:
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack_from(">H", data, at + 2)
        if marker in _JPEG_FRAMES:
            if at + 9 > len(data):
                return None
            height, width = struct.unpack_from(">HH", data, at + 5)
            if width == 0:
                return DeclaredSize("JPEG", width, height, invalid="a JPEG is at least 1 pixel wide")
            if height == 0:
                return None  # the height follows the scan (a DNL marker): let the decoder judge it
            if marker in _JPEG_ARITHMETIC:
                return DeclaredSize("JPEG", width, height)
            blocks = math.ceil(width / 8) * math.ceil(height / 8)
            return DeclaredSize("JPEG", width, height, least_bytes=math.ceil(blocks / 8))
        if marker == 0xDA or length < 2:  # scan data before any frame header: not a JPEG we know
            return None
        at += 2 + length
    return None


def _webp(data: bytes) -> DeclaredSize | None:
    kind, body = data[12:16], data[20:]
    if kind == b"VP8X" and len(body) >= 10:
        width = 1 + int.from_bytes(body[4:7], "little")
        height = 1 + int.from_bytes(body[7:10], "little")
    elif kind == b"VP8L" and len(body) >= 5 and body[0] == 0x2F:
        bits = int.from_bytes(body[1:5], "little")
        width, height = 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    elif kind == b"VP8 " and len(body) >= 10 and body[3:6] == b"\x9d\x01\x2a":
        width, height = (v & 0x3FFF for v in struct.unpack_from("<HH", body, 6))
        if not (width and height):
            return DeclaredSize("WebP", width, height, invalid="a WebP side is at least 1 pixel")
    else:
        return None
    return DeclaredSize("WebP", width, height)
