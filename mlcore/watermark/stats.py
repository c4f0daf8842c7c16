"""Is this image marked, and by whom? The binomial test of MOLM's verification step, over a keyring.

MOLM (ICLR 2026) §2 step 6: with S of the k extracted bits equal to a key's bits, an
unmarked image agrees with a fixed key bit by bit like a fair coin, so

    p = P[Bin(k, ½) ≥ S]                                                     (one key)

Searching N keys and keeping the best match raises the chance that *some* key agrees by luck;
the union (Bonferroni) bound P[max_j S_j ≥ S] ≤ N · p holds whatever the keys' overlap, so

    p_N = min(1, N · p)                                                      (N keys searched)

is the p-value we report and compare with the configured false-positive rate α (per image). An
image read by R extractors (:mod:`mlcore.watermark.readers`) is a search over R · N (extractor, key)
pairs, and the same bound gives p_RN = min(1, R · N · p). We report it and compare it with α:
``detected`` when p_N ≤ α, ``inconclusive`` when α < p_N ≤ α_s (a looser "suspicious" rate), else
``not detected``. Thresholds are also given in bits: the fewest matching bits that reach α.

The null assumes independent fair-coin bits; learned extractors are not exactly that (§2, "Calibrate
τ empirically"), so the benchmark measures the real false-positive rate on unmarked images.
Revoked keys are still searched (an image marked before revocation is still that organisation's)
but the match says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal

import numpy as np

from mlcore.watermark.keys import InvalidKey, KeyRecord

Verdict = Literal["detected", "inconclusive", "not detected"]
DEFAULT_FPR = 1e-3
DEFAULT_SUSPICIOUS_FPR = 1e-2


@cache
def binomial_tail(matched: int, num_bits: int) -> float:
    """P[Bin(num_bits, ½) ≥ matched], exactly (integer sums, one division at the end)."""
    if matched <= 0:
        return 1.0
    if matched > num_bits:
        return 0.0
    hits = sum(math.comb(num_bits, k) for k in range(matched, num_bits + 1))
    return hits / 2**num_bits


def corrected_p(p: float, num_keys: int) -> float:
    """p_N = min(1, N · p): the chance that the best of N keys matches this well by luck."""
    return min(1.0, max(num_keys, 1) * p)


def threshold_bits(num_bits: int, num_keys: int, fpr: float) -> int | None:
    """The fewest matching bits S with p_N ≤ ``fpr``; ``None`` if even all bits cannot reach it."""
    for matched in range(num_bits + 1):
        if corrected_p(binomial_tail(matched, num_bits), num_keys) <= fpr:
            return matched
    return None


@dataclass(frozen=True)
class Thresholds:
    """The operating point, shown next to every verdict."""

    num_bits: int
    num_keys: int
    fpr: float
    suspicious_fpr: float
    detect_bits: int | None
    suspicious_bits: int | None
    #: Extractors each image is read with (:mod:`mlcore.watermark.readers`): the search is over
    #: ``readers · num_keys`` (reader, key) pairs, and the bound of the module docstring covers them all.
    readers: int = 1

    @classmethod
    def for_keyring(
        cls,
        num_bits: int,
        num_keys: int,
        *,
        fpr: float = DEFAULT_FPR,
        suspicious_fpr: float = DEFAULT_SUSPICIOUS_FPR,
        readers: int = 1,
    ) -> Thresholds:
        if not 0 < fpr <= suspicious_fpr < 1:
            raise ValueError(f"need 0 < fpr ({fpr}) ≤ suspicious_fpr ({suspicious_fpr}) < 1")
        if readers < 1:
            raise ValueError(f"need at least one reader, got {readers}")
        searched = num_keys * readers
        return cls(
            num_bits=num_bits,
            num_keys=num_keys,
            fpr=fpr,
            suspicious_fpr=suspicious_fpr,
            detect_bits=threshold_bits(num_bits, searched, fpr),
            suspicious_bits=threshold_bits(num_bits, searched, suspicious_fpr),
            readers=readers,
        )

    def verdict(self, p_corrected: float) -> Verdict:
        if p_corrected <= self.fpr:
            return "detected"
        if p_corrected <= self.suspicious_fpr:
            return "inconclusive"
        return "not detected"

    def describe(self) -> dict[str, float | int | None]:
        return {
            "num_bits": self.num_bits,
            "num_keys": self.num_keys,
            "fpr": self.fpr,
            "suspicious_fpr": self.suspicious_fpr,
            "detect_bits": self.detect_bits,
            "suspicious_bits": self.suspicious_bits,
            "readers": self.readers,
        }


@dataclass(frozen=True)
class Match:
    """One image's answer. ``key`` is the best-matching key (``None`` with an empty keyring)."""

    verdict: Verdict
    key: KeyRecord | None
    bits_matched: int
    num_bits: int
    p_value: float
    p_corrected: float
    decoded_bits: str

    @property
    def confidence(self) -> str:
        """A coarse word for people who must not see the score itself (the public portal)."""
        if self.verdict == "inconclusive":
            return "low"
        if self.verdict == "not detected":
            return "none"
        if self.p_corrected <= 1e-9:
            return "very high"
        if self.p_corrected <= 1e-6:
            return "high"
        return "moderate"

    @property
    def organisation(self) -> str | None:
        return self.key.organisation if self.key is not None and self.verdict == "detected" else None

    def describe(self) -> dict[str, object]:
        """Full detail (never the matched key's bits), for internal use only: it names the best key of
        any team with its score, so it reaches a viewer only through
        :func:`mlcore.watermark.disclosure.disclose`, which keeps what that viewer may see."""
        return {
            "verdict": self.verdict,
            "confidence": self.confidence,
            "key_id": self.key.id if self.key else None,
            "key_name": self.key.name if self.key else None,
            "organisation": self.key.organisation if self.key else None,
            "revoked": self.key.revoked if self.key else False,
            "bits_matched": self.bits_matched,
            "num_bits": self.num_bits,
            "p_value": self.p_value,
            "p_corrected": self.p_corrected,
            "decoded_bits": self.decoded_bits,
        }


def _bits_matrix(keys: Sequence[KeyRecord], num_bits: int) -> np.ndarray:
    wrong = [k.id for k in keys if k.num_bits != num_bits]
    if wrong:
        raise InvalidKey(
            f"the extractor reads {num_bits} bits but key {wrong[0]!r} has {len(keys[0].bits)}; "
            "verify with the extractor the keys were made for."
        )
    return np.array([[c == "1" for c in k.bits] for k in keys], dtype=bool).reshape(len(keys), num_bits)


def match_images(
    probabilities: np.ndarray,
    keys: Sequence[KeyRecord],
    *,
    fpr: float = DEFAULT_FPR,
    suspicious_fpr: float = DEFAULT_SUSPICIOUS_FPR,
    readers: int = 1,
) -> tuple[list[Match], Thresholds]:
    """Match each row of extractor outputs ``(n, num_bits)`` (probabilities that a bit is 1)
    against every key; return one :class:`Match` per image and the thresholds used. ``readers``: how
    many extractors read the same images (the p-values are corrected for all of their searches)."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    if probabilities.ndim != 2:
        raise ValueError(f"expected probabilities of shape (images, bits), got {probabilities.shape}")
    n, num_bits = probabilities.shape
    thresholds = Thresholds.for_keyring(num_bits, len(keys), fpr=fpr, suspicious_fpr=suspicious_fpr, readers=readers)
    decoded = probabilities > 0.5
    strings = ["".join("1" if b else "0" for b in row) for row in decoded]
    if not keys:
        return [Match("not detected", None, 0, num_bits, 1.0, 1.0, s) for s in strings], thresholds
    table = _bits_matrix(keys, num_bits)
    agree = (decoded[:, None, :] == table[None, :, :]).sum(axis=2)  # (n, keys): S_j per image
    # Among equally good keys prefer an active one: a tie with a revoked key says nothing new.
    revoked = np.array([k.revoked for k in keys])
    order = np.lexsort((np.arange(len(keys)), revoked))  # active keys first, each group in registry order
    matches: list[Match] = []
    for i in range(n):
        best = int(order[np.argmax(agree[i, order])])
        matched = int(agree[i, best])
        p = binomial_tail(matched, num_bits)
        p_n = corrected_p(p, len(keys) * readers)
        matches.append(Match(thresholds.verdict(p_n), keys[best], matched, num_bits, p, p_n, strings[i]))
    return matches, thresholds
