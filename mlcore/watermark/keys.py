"""Watermark keys: random binary strings kept apart from each other, and the files that carry them.

MOLM (ICLR 2026, §2) turns an M-bit key κ into adapter choices; verification
(§2 step 6) counts how many of the extractor's bits agree with a registered key. Two keys that
agree on most bits would make one organisation's images match the other's key, so a new key is
drawn at random and kept at least ``min_distance`` bits (Hamming) away from every existing key.
With M = 48 two random keys differ in 24 ± 3.5 bits, so the default of M / 4 = 12 rejects almost
nothing while ruling out near-duplicates.

Two JSON files carry keys to job kinds, so the kinds stay Django-free:

- a **key file** ``{"id", "name", "bits"}``: one key of the submitting team (a ``key`` parameter);
- a **keyring** ``{"version": 1, "keys": [{"id", "name", "organisation", "bits", "revoked", "own"}]}``:
  every registered key (the ``watermark-keyring`` dataset that ``watermark-verify`` searches).

``own`` marks the keys of whoever runs the job: only those keys' ids, names, scores and decoded
bits may appear in its outputs (:mod:`mlcore.watermark.disclosure`). A keyring without the flag is
one the user wrote themselves (``moelab run``): they hold every key's bits, so every key is theirs.
The platform's resolver always writes the flag. Both files also carry a random ``nonce``, so that
their sha256 (recorded in a job's provenance) cannot be searched for the bits of a known id and name;
a key file may carry ``allow_public_weights`` (the platform's policy on the public demo markers).
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The shortest key we issue: 28 bits cannot reach a low false-positive rate among many keys (§2).
MIN_BITS = 16
MAX_BITS = 1024
KEYRING_VERSION = 1


class InvalidKey(ValueError):
    """A key or keyring that cannot be used; the message names the file or field and the fix."""


class KeyspaceExhausted(InvalidKey):
    """No random key far enough from the existing ones was found: lower ``min_distance`` or use more bits."""


@dataclass(frozen=True)
class KeyRecord:
    """One registered key, as a keyring lists it. ``bits`` is a string of ``0``/``1``."""

    id: str
    name: str
    organisation: str
    bits: str
    revoked: bool = False
    #: The viewer's own key (see the module docstring); other teams' keys are ``own=False``.
    own: bool = True

    @property
    def num_bits(self) -> int:
        return len(self.bits)


def check_bits(bits: str, *, what: str = "bits") -> str:
    """Return ``bits`` if it is a string of 0/1 of a usable length, else raise :class:`InvalidKey`."""
    if not isinstance(bits, str) or not bits:
        raise InvalidKey(f"{what}: expected a non-empty string of 0 and 1.")
    if set(bits) - {"0", "1"}:
        raise InvalidKey(f"{what}: only the characters 0 and 1 are allowed.")
    if not MIN_BITS <= len(bits) <= MAX_BITS:
        raise InvalidKey(f"{what}: {len(bits)} bits; keys have between {MIN_BITS} and {MAX_BITS} bits.")
    return bits


def hamming(a: str, b: str) -> int:
    """The number of positions where two equally long bit strings differ."""
    if len(a) != len(b):
        raise InvalidKey(f"keys of different lengths ({len(a)} and {len(b)} bits) cannot be compared.")
    return sum(x != y for x, y in zip(a, b, strict=True))


def default_min_distance(num_bits: int) -> int:
    return num_bits // 4


def random_bits(num_bits: int, rng: random.Random | None = None) -> str:
    """A uniformly random key. Without ``rng`` it comes from the operating system's CSPRNG: a
    guessable key would let anyone forge another organisation's mark."""
    if rng is None:
        return "".join(str(secrets.randbits(1)) for _ in range(num_bits))
    return "".join(str(rng.getrandbits(1)) for _ in range(num_bits))


def new_key_bits(
    num_bits: int,
    existing: Iterable[str],
    *,
    min_distance: int | None = None,
    rng: random.Random | None = None,
    max_tries: int = 1000,
) -> str:
    """Draw a random key at least ``min_distance`` bits from every key in ``existing``.

    Keys of another length are ignored (they cannot be confused: the extractor reads a fixed
    number of bits). Rejection sampling: with the default distance almost every draw is accepted.
    """
    if not MIN_BITS <= num_bits <= MAX_BITS:
        raise InvalidKey(f"num_bits: {num_bits}; keys have between {MIN_BITS} and {MAX_BITS} bits.")
    distance = default_min_distance(num_bits) if min_distance is None else min_distance
    if not 0 <= distance <= num_bits:
        raise InvalidKey(f"min_distance: {distance} must lie between 0 and the key length ({num_bits}).")
    others = [bits for bits in existing if len(bits) == num_bits]
    for _ in range(max_tries):
        candidate = random_bits(num_bits, rng)
        if all(hamming(candidate, other) >= distance for other in others):
            return candidate
    raise KeyspaceExhausted(
        f"no {num_bits}-bit key at least {distance} bits from the {len(others)} existing keys after "
        f"{max_tries} draws; use longer keys or a smaller minimum distance."
    )


# -- files -------------------------------------------------------------------------------------


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidKey(f"{what} {Path(path).name}: no such file.") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidKey(f"{what} {Path(path).name}: not valid JSON ({exc}).") from None


def key_file_payload(*, id: str, name: str, bits: str, allow_public_weights: bool | None = None) -> bytes:
    """The bytes of a key file (the platform's resolver writes them to memory, not to disk)."""
    check_bits(bits)
    data: dict[str, Any] = {"id": str(id), "name": name, "bits": bits, "nonce": secrets.token_hex(16)}
    if allow_public_weights is not None:
        data["allow_public_weights"] = bool(allow_public_weights)
    return json.dumps(data).encode()


def write_key_file(path: Path, *, id: str, name: str, bits: str, allow_public_weights: bool | None = None) -> Path:
    Path(path).write_bytes(key_file_payload(id=id, name=name, bits=bits, allow_public_weights=allow_public_weights))
    return Path(path)


def public_weights_allowed(path: Path) -> bool:
    """Whether the key file's issuer lets it mark images with the public demo markers.

    A key file without the field is the user's own (``moelab run``): nothing to refuse.
    """
    data = _read_json(path, "key file")
    return not isinstance(data, dict) or bool(data.get("allow_public_weights", True))


def load_key_file(path: Path) -> KeyRecord:
    """Read a key file ``{"id", "name", "bits"}`` (what a ``key`` parameter resolves to)."""
    data = _read_json(path, "key file")
    if not isinstance(data, dict) or not {"id", "bits"} <= set(data):
        raise InvalidKey(f"key file {Path(path).name}: expected an object with id, name and bits.")
    bits = check_bits(data["bits"], what=f"key file {Path(path).name}: bits")
    return KeyRecord(id=str(data["id"]), name=str(data.get("name", "")), organisation="", bits=bits)


def keyring_payload(keys: Sequence[KeyRecord], *, foreign_extractors: Sequence[str] | None = None) -> bytes:
    """The bytes of a keyring file. ``foreign_extractors``: the fingerprints
    (:func:`mlcore.watermark.disclosure.extractor_fingerprint`) of the only extractors that may
    match images against keys that are not ``own``; ``None`` leaves it unrestricted."""
    payload: dict[str, Any] = {
        "version": KEYRING_VERSION,
        "nonce": secrets.token_hex(16),
        "keys": [asdict(k) for k in keys],
    }
    if foreign_extractors is not None:
        payload["foreign_extractors"] = sorted(foreign_extractors)
    return json.dumps(payload).encode()


def foreign_extractors(path: Path) -> frozenset[str] | None:
    """The keyring's ``foreign_extractors`` (see :func:`keyring_payload`), ``None`` when it sets none."""
    data = _read_json(path, "keyring")
    allowed = data.get("foreign_extractors") if isinstance(data, dict) else None
    if allowed is None:
        return None
    if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
        raise InvalidKey(f"keyring {Path(path).name}: foreign_extractors must be a list of fingerprints.")
    return frozenset(allowed)


def write_keyring(path: Path, keys: Sequence[KeyRecord]) -> Path:
    Path(path).write_bytes(keyring_payload(keys))
    return Path(path)


def load_keyring(path: Path) -> list[KeyRecord]:
    """Read a keyring; every key must have the same length (the extractor reads one length)."""
    name = Path(path).name
    data = _read_json(path, "keyring")
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise InvalidKey(f'keyring {name}: expected an object {{"version": 1, "keys": [...]}}.')
    if data.get("version") != KEYRING_VERSION:
        raise InvalidKey(f"keyring {name}: version {data.get('version')!r} is not supported (expected 1).")
    keys: list[KeyRecord] = []
    for index, entry in enumerate(data["keys"]):
        if not isinstance(entry, dict) or "bits" not in entry or "id" not in entry:
            raise InvalidKey(f"keyring {name}: key {index} needs at least id and bits.")
        bits = check_bits(entry["bits"], what=f"keyring {name}: key {entry['id']!r}")
        keys.append(
            KeyRecord(
                id=str(entry["id"]),
                name=str(entry.get("name", "")),
                organisation=str(entry.get("organisation", "")),
                bits=bits,
                revoked=bool(entry.get("revoked", False)),
                own=bool(entry.get("own", True)),
            )
        )
    lengths = {k.num_bits for k in keys}
    if len(lengths) > 1:
        raise InvalidKey(f"keyring {name}: keys of several lengths ({sorted(lengths)}); keep one length per keyring.")
    return keys
