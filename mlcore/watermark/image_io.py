"""A user's image in and out, unchanged except for its pixels: format, ICC profile, EXIF, alpha, bit depth.

The embed path (``watermark-embed``) returns each image in the format it came in: a PNG as a PNG
(8 or 16 bits per channel, grey or colour, with or without alpha; a palette PNG comes back as RGB(A),
since a mark cannot live in 256 colours), a JPEG as a JPEG with the input's own quantisation tables
and chroma subsampling (so the file's quality stays what it was), a WebP as a lossless WebP when it
was lossless and at quality 95 otherwise. The ICC profile and the EXIF block (orientation included)
are copied; the alpha channel is never touched.

Pillow reads 16-bit colour PNGs as 8 bits, so those are decoded and encoded with OpenCV, and the ICC
profile and EXIF chunks are written into the PNG by hand (:func:`_png_with_chunks`).

**Orientation.** The mark is computed on the image as it is *shown* (EXIF orientation applied) and
turned back into the stored orientation before it is added, so a viewer's rotated copy, a
screenshot, or a re-encoder that bakes the rotation in all carry it the way the reader sees them
(:func:`mlcore.watermark.verification.open_image` applies the orientation too).

Files are opened with the same guards as verification: the size the header declares is checked
before any pixel is decoded (bombs, truncation, the pixel cap).
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from dataclasses import dataclass, field, replace

import numpy as np
from PIL import Image

from mlcore.watermark.verification import DEFAULT_MAX_PIXELS, PIL_FORMATS, BadImage, _check_declared_size, _over_limit

ORIENTATION_TAG = 0x0112


@dataclass
class SourceImage:
    """An image's pixels and everything the output must keep. ``pixels`` are in stored orientation."""

    name: str
    format: str  # "PNG", "JPEG" or "WEBP"
    pixels: np.ndarray  # (H, W, C) uint8 or uint16, C = 1 (grey) or 3 (RGB)
    alpha: np.ndarray | None = None  # (H, W), the same dtype
    icc: bytes | None = None
    exif: bytes | None = None
    orientation: int = 1
    jpeg: dict[str, object] = field(default_factory=dict)  # qtables and subsampling of a JPEG
    lossless: bool = False  # a lossless WebP
    notes: list[str] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return 16 if self.pixels.dtype == np.uint16 else 8

    @property
    def maxval(self) -> int:
        return 65535 if self.depth == 16 else 255

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def description(self) -> str:
        """ "PNG 16-bit RGBA", "JPEG 8-bit grey"."""
        colour = "grey" if self.pixels.shape[2] == 1 else "RGB"
        return f"{self.format} {self.depth}-bit {colour}{'A' if self.alpha is not None else ''}"

    def with_pixels(self, pixels: np.ndarray) -> SourceImage:
        return replace(self, pixels=pixels, notes=list(self.notes))


def read(data: bytes, *, name: str = "image", max_pixels: int = DEFAULT_MAX_PIXELS) -> SourceImage:
    """A PNG, JPEG or WebP with its metadata; :class:`BadImage` naming the problem otherwise."""
    from mlcore.watermark.image_size import declared_size

    limit = max_pixels if Image.MAX_IMAGE_PIXELS is None else min(max_pixels, Image.MAX_IMAGE_PIXELS)
    declared = declared_size(data)
    if declared is not None:
        _check_declared_size(name, declared, len(data), limit)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data), formats=list(PIL_FORMATS)) as probe:
                if probe.size[0] * probe.size[1] > limit:
                    raise BadImage(_over_limit(name, *probe.size, limit))
                probe.verify()
            with Image.open(io.BytesIO(data), formats=list(PIL_FORMATS)) as image:
                image.load()
                return _source(image, data, name)
    except BadImage:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise BadImage(f"{name}: declares more pixels than the limit of {limit:,}; scale it down.") from None
    except Image.UnidentifiedImageError:
        raise BadImage(f"{name}: not a PNG, JPEG or WebP image.") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadImage(f"{name}: truncated or corrupt image ({exc}).") from None


def _png_depth(data: bytes) -> int:
    return data[24] if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 25 else 8


def _source(image: Image.Image, data: bytes, name: str) -> SourceImage:
    fmt = str(image.format)
    exif = image.info.get("exif")
    orientation = int(image.getexif().get(ORIENTATION_TAG, 1) or 1)
    source = SourceImage(
        name=name,
        format=fmt,
        pixels=np.zeros((1, 1, 3), np.uint8),
        icc=image.info.get("icc_profile") or None,
        exif=exif if isinstance(exif, bytes) and exif else None,
        orientation=orientation if 1 <= orientation <= 8 else 1,
    )
    if fmt == "PNG" and _png_depth(data) == 16:
        pixels, alpha = _decode_16bit_png(data, name)
        source.pixels, source.alpha = pixels, alpha
        return source
    if image.mode == "CMYK":
        raise BadImage(f"{name}: a CMYK JPEG; convert it to RGB first (the mark is made in RGB).")
    if fmt == "JPEG":
        from PIL import JpegImagePlugin

        source.jpeg = {"qtables": image.quantization, "subsampling": JpegImagePlugin.get_sampling(image)}
    if fmt == "WEBP":
        source.lossless = data[12:16] == b"VP8L" or (b"VP8L" in data[:4096] and b"VP8 " not in data[:4096])
    mode = image.mode
    if mode == "P":
        mode = "RGBA" if "transparency" in image.info or image.palette.mode == "RGBA" else "RGB"
        source.notes.append(f"a palette image, saved as {mode} (a mark cannot live in 256 colours)")
    elif mode in ("1", "I", "I;16", "F"):
        mode = "L"
    elif mode == "PA":
        mode = "LA"
    converted = image.convert(mode) if mode != image.mode else image
    array = np.asarray(converted)
    if mode in ("L", "LA"):
        source.pixels = np.ascontiguousarray(array[..., None] if mode == "L" else array[..., :1])
        source.alpha = np.ascontiguousarray(array[..., 1]) if mode == "LA" else None
    else:
        source.pixels = np.ascontiguousarray(array[..., :3])
        source.alpha = np.ascontiguousarray(array[..., 3]) if mode == "RGBA" else None
    return source


def _decode_16bit_png(data: bytes, name: str) -> tuple[np.ndarray, np.ndarray | None]:
    import cv2

    array = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if array is None:
        raise BadImage(f"{name}: a 16-bit PNG that does not decode; the file is corrupt.")
    if array.ndim == 2:
        return array[..., None].astype(np.uint16), None
    channels = array.shape[2]
    if channels == 2:  # grey + alpha
        return array[..., :1].astype(np.uint16), array[..., 1].astype(np.uint16)
    rgb = array[..., 2::-1] if channels >= 3 else array
    alpha = array[..., 3].astype(np.uint16) if channels == 4 else None
    return np.ascontiguousarray(rgb).astype(np.uint16), alpha


# -- orientation -----------------------------------------------------------------------------------


def to_display(array: np.ndarray, orientation: int) -> np.ndarray:
    """Stored (H, W, ...) pixels → as shown with EXIF ``orientation`` (the same as ``ImageOps.exif_transpose``)."""
    ops = {
        2: lambda a: a[:, ::-1],
        3: lambda a: a[::-1, ::-1],
        4: lambda a: a[::-1],
        5: lambda a: a.swapaxes(0, 1),
        6: lambda a: np.rot90(a, -1),
        7: lambda a: np.rot90(a, 2).swapaxes(0, 1),
        8: lambda a: np.rot90(a, 1),
    }
    return np.ascontiguousarray(ops[orientation](array)) if orientation in ops else array


def from_display(array: np.ndarray, orientation: int) -> np.ndarray:
    """The inverse of :func:`to_display`: 6 and 8 undo each other, the others undo themselves."""
    return to_display(array, {6: 8, 8: 6}.get(orientation, orientation))


# -- writing ---------------------------------------------------------------------------------------


def _pil_image(source: SourceImage) -> Image.Image:
    pixels = source.pixels
    if pixels.shape[2] == 1:
        grey = pixels[..., 0]
        if source.alpha is None:
            return Image.fromarray(grey, "L")
        return Image.fromarray(np.dstack([grey, source.alpha]), "LA")
    if source.alpha is None:
        return Image.fromarray(pixels, "RGB")
    return Image.fromarray(np.dstack([pixels, source.alpha]), "RGBA")


def _exif_payload(exif: bytes) -> bytes:
    """The TIFF body of an EXIF block (a PNG eXIf chunk holds it without JPEG's ``Exif\\0\\0`` header)."""
    return exif[6:] if exif.startswith(b"Exif\x00\x00") else exif


def encode(source: SourceImage) -> bytes:
    """``source`` written in its own format with its metadata (see the module docstring)."""
    buffer = io.BytesIO()
    extra: dict[str, object] = {}
    if source.icc:
        extra["icc_profile"] = source.icc
    if source.exif:
        extra["exif"] = source.exif
    if source.format == "PNG":
        if source.depth == 16:
            return _encode_16bit_png(source)
        _pil_image(source).save(buffer, "PNG", **extra)
    elif source.format == "JPEG":
        _pil_image(source).save(buffer, "JPEG", **source.jpeg, **extra)
    elif source.format == "WEBP":
        options = {"lossless": True, "exact": True} if source.lossless else {"quality": 95}
        _pil_image(source).save(buffer, "WEBP", **options, **extra)
    else:
        raise BadImage(f"{source.name}: cannot write {source.format}")
    return buffer.getvalue()


def _encode_16bit_png(source: SourceImage) -> bytes:
    import cv2

    pixels = source.pixels
    if pixels.shape[2] == 1:
        array = pixels[..., 0] if source.alpha is None else np.dstack([pixels[..., 0], source.alpha])
    else:
        bgr = pixels[..., ::-1]
        array = bgr if source.alpha is None else np.dstack([bgr, source.alpha])
    ok, encoded = cv2.imencode(".png", np.ascontiguousarray(array.astype(np.uint16)))
    if not ok:
        raise BadImage(f"{source.name}: the 16-bit PNG could not be written")
    chunks: list[tuple[bytes, bytes]] = []
    if source.icc:
        chunks.append((b"iCCP", b"ICC Profile\x00\x00" + zlib.compress(source.icc)))
    if source.exif:
        chunks.append((b"eXIf", _exif_payload(source.exif)))
    return _png_with_chunks(encoded.tobytes(), chunks)


def _png_with_chunks(png: bytes, chunks: list[tuple[bytes, bytes]]) -> bytes:
    """``png`` with ``chunks`` inserted right after IHDR (where iCCP must come, before IDAT)."""
    ihdr_end = 8 + 4 + 4 + struct.unpack(">I", png[8:12])[0] + 4
    out = [png[:ihdr_end]]
    for kind, body in chunks:
        out.append(struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))
    out.append(png[ihdr_end:])
    return b"".join(out)
