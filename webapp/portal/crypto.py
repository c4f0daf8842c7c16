"""Keys at rest: the bits are sealed with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``)
under a key derived from the portal secret, so a database dump alone does not reveal any key."""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken

from webapp.portal import conf


def _fernet() -> Fernet:
    digest = hashlib.sha256(b"moelab watermark keys\x00" + conf.secret().encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


def seal(bits: str) -> bytes:
    return _fernet().encrypt(bits.encode("ascii"))


def unseal(token: bytes) -> str:
    try:
        return _fernet().decrypt(bytes(token)).decode("ascii")
    except InvalidToken:
        raise RuntimeError(
            "A watermark key cannot be decrypted: MOELAB_WATERMARK_SECRET (or SECRET_KEY) changed since it "
            "was created. Restore the old secret."
        ) from None
