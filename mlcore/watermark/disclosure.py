"""What a viewer may see of a watermark match: the one rule, for the portal, the API and every job output.

A verification answer (:class:`mlcore.watermark.stats.Match`) holds more than its viewer may learn.
For a key of another team, ``bits_matched`` S is the number of positions where the image's decoded
bits d agree with that key κ, so S = Σ_i [d_i = κ_i] is a linear equation in κ; a few hundred random
images and their (d, S) pairs solve for the whole key by least squares (the attack
``tests/mlcore/watermark/test_key_recovery_attack.py`` runs). The p-values are functions of
S, and the decoded bits are the equations' left-hand side, so neither may be shown either, nor the
key's id or name (which would say which key the equation is about). Hence, per match:

- **the viewer's own key** (a key of a team they belong to; every key of a keyring file they wrote
  themselves): everything — verdict, confidence, organisation, key id and name, revoked, bits
  matched, p-values, decoded bits;
- **any other key**: the verdict, and the organisation when the verdict is *detected*; nothing else.
  *Inconclusive* is shown as *not detected*: it says that some key agrees with the decoded bits in
  more positions than chance allows, a partial match that is itself an equation (two such answers
  among 500 random images moved a least-squares estimate of a key to 62% of its bits, measured in
  ``tests/mlcore/watermark/test_key_recovery_attack.py``). The key's own team sees it.

A row whose best key is none (an empty keyring) shows the decoded bits only when every key searched
was the viewer's own (``all_own``): decoded bits are a function of the image alone, but next to
another team's verdicts they are half of the attacker's equation.

Aggregates must follow the same rule: a mean or histogram of S over other teams' matches leaks S, so
job outputs aggregate over :func:`is_own` rows only (``mlcore.jobs.watermark_verify``).

The public demo weights (``zoo:molm-tiny``, ``zoo:molm-photo``; ``zoo:molm-photo-tiles`` and
``zoo:molm-photo-parity`` mark with the latter's) are committed to the
repository, so anyone can read a mark made with them offline, and forge one: he reads the key from a marked
photo with the public extractor and marks his own photos with it through the public markers (and for the
secret-phase marks of ``zoo:molm-photo`` the mean of ten marked photos, lined up by the public phase search
or by correlating the photos, forges it too; bench/results/watermark-forgery.md). :func:`rests_on_public_weights` tells
whether an extractor or markers folder holds them, and :data:`PUBLIC_WEIGHTS_NOTE` is the sentence
every such verdict carries.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from mlcore.errors import JobError
from mlcore.watermark.stats import Match

#: Fields anyone may see of a match against another team's key (``organisation`` only when detected).
OUTSIDER_FIELDS = ("verdict", "organisation")
#: Fields the key's own team sees, in the order tables show them.
OWN_FIELDS = (
    "verdict",
    "confidence",
    "organisation",
    "key_id",
    "key_name",
    "revoked",
    "bits_matched",
    "num_bits",
    "p_value",
    "p_corrected",
    "decoded_bits",
)
#: The budget a platform job spends for each image matched against other teams' keys.
FOREIGN_MATCHES = "watermark-foreign-matches"
PUBLIC_WEIGHTS_NOTE = (
    "This verdict rests on the public demo weights of the zoo (zoo:molm-tiny, zoo:molm-photo and the "
    "items built from it): anyone can read marks made with them offline and mark other images with the key "
    "read, so it shows how the method works, not who made the image."
)
#: The committed checkpoints whose weights are public (``mlcore/zoo/checkpoints/*/manifest.json``).
_ZOO = Path(__file__).resolve().parents[1] / "zoo" / "checkpoints"
_WEIGHT_FILES = ("extractor/diffusion_pytorch_model.safetensors", "markers/diffusion_pytorch_model.safetensors")


def disclose(row: Mapping[str, Any], *, own: bool) -> dict[str, Any]:
    """The part of ``row`` (a :meth:`Match.describe` dict) that a viewer may see.

    ``own``: whether the matched key belongs to the viewer (see the module docstring). This is the
    only function that turns a match into something shown; the portal, the API and the
    ``watermark-verify`` job all call it.
    """
    if own:
        return {name: row.get(name) for name in OWN_FIELDS}
    detected = row.get("verdict") == "detected"
    return {
        "verdict": "detected" if detected else "not detected",
        "organisation": row.get("organisation") if detected else None,
    }


def is_own(match: Match, *, all_own: bool) -> bool:
    """Whether ``match`` is about the viewer's own key; a keyless match only when every key searched was."""
    return match.key.own if match.key is not None else all_own


def disclose_match(match: Match, *, all_own: bool) -> dict[str, Any]:
    """:func:`disclose` for a :class:`Match` whose key carries its ``own`` flag (a job's keyring)."""
    return disclose(match.describe(), own=is_own(match, all_own=all_own))


def _sha256(path: Path) -> str:
    """sha256 of a file, read once per process while its size and mtime stay the same: every portal
    check and verify job asks about the same few extractor files."""
    stat = path.stat()
    return _sha256_of(path.resolve(), stat.st_size, stat.st_mtime_ns)


@cache
def _sha256_of(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@cache
def public_weight_hashes() -> frozenset[str]:
    """sha256 of every committed extractor and markers weight file."""
    hashes: set[str] = set()
    for manifest in sorted(_ZOO.glob("*/manifest.json")):
        try:
            files = json.loads(manifest.read_text()).get("files", {})
        except (OSError, json.JSONDecodeError):
            continue
        hashes.update(digest for name, digest in files.items() if name in _WEIGHT_FILES)
    return frozenset(hashes)


def extractor_fingerprint(folder: Path) -> str:
    """sha256 over an extractor's config and weights (a ``watermark-markers`` folder or a bare
    extractor folder): what a keyring's ``foreign_extractors`` names.

    Other teams' keys are matched only by the platform's own extractor: with an extractor of their
    choosing, a user decides which bits come out, and the verdicts alone then walk to the key.
    """
    from mlcore.watermark.verification import extractor_directory

    directory = extractor_directory(Path(folder))
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.iterdir() if p.is_file() and p.suffix in (".json", ".safetensors")):
        digest.update(path.name.encode() + b"\0" + _sha256(path).encode() + b"\0")
    return digest.hexdigest()


def rests_on_public_weights(folder: Path) -> bool:
    """Whether a ``watermark-markers`` folder (or a bare extractor folder) holds the committed demo
    weights: compared by content, so a copy under another name is recognised too."""
    folder = Path(folder)
    candidates = [folder / name for name in _WEIGHT_FILES]
    candidates.append(folder / "diffusion_pytorch_model.safetensors")  # a bare extractor/ or markers/ folder
    public = public_weight_hashes()
    return any(path.is_file() and _sha256(path) in public for path in candidates)


def key_for_marking(key_file: Path, model: Path) -> tuple[Any, bool]:
    """The team key a marking job (generate, embed) signs with, and whether ``model`` holds the public
    demo markers. Refuses an invalid key file, and public markers under a key whose policy does not
    allow them (production, unless the operator opted in): anyone can read such a mark offline."""
    from mlcore.watermark.keys import InvalidKey, load_key_file, public_weights_allowed

    try:
        record = load_key_file(Path(key_file))
        allowed = public_weights_allowed(Path(key_file))
    except InvalidKey as exc:
        raise JobError(f"Key: {exc}") from None
    public = rests_on_public_weights(Path(model))
    if public and not allowed:
        raise JobError(
            "Model: these are the zoo's public demo markers; anyone can read a mark made with them offline, so "
            "this platform does not mark images under your team's key with them. Train your own markers with "
            "watermark-train and pick them here (an operator who accepts this can set "
            "MOELAB_ALLOW_PUBLIC_WATERMARK_WEIGHTS=1)."
        )
    return record, public
