"""``watermark-verify``: is each image marked by a registered key, and by whom? (MOLM, issue 6)

One image, several, or a zip of them → per image: the decoded bits, the best-matching key and its
organisation (or none), bits matched, the binomial p-value corrected for the number of keys
searched, and a verdict — detected, inconclusive (between the detection threshold and a looser
"suspicious" one) or not detected — at the configured false-positive rate, with the thresholds
shown (``mlcore.watermark.stats``). Revoked keys still match and are shown as revoked.

The keyring is a ``watermark-keyring`` dataset: on the platform ``keyring:platform`` resolves to a
JSON file of every registered key (id, bits, organisation, revoked), written by the platform's
resolver; in ``moelab run`` a path to such a file. So this kind never touches the database.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlcore.charts import VEGA_LITE
from mlcore.jobs import Dataset, Estimate, File, Float, JobContext, JobError, JobSpec, Model

MAX_IMAGES = 5000
BATCH = 64
PLATFORM_KEYRING = "keyring:platform"


def _validate(p: dict[str, Any]) -> list[tuple[str, str]]:
    if p["fpr"] > p["suspicious_fpr"]:
        return [("suspicious_fpr", "Must be at least the detection false-positive rate (it is the looser one).")]
    return []


def _estimate(p: dict[str, Any]) -> Estimate:
    # The extractor is small; memory is dominated by one batch of decoded images.
    return Estimate(memory_bytes=512 * 2**20, seconds=60.0)


GUIDE = """\
**What this shows.** Each row of the table is one image: the bits the extractor read, the registered
key that agrees with most of them, how many bits agree (S of k), and the verdict.

**The test** (MOLM, ICLR 2026, §"Verification"; `shared/papers/molm.md`). An unmarked image agrees
with any fixed key like a fair coin, so p = P[Bin(k, ½) ≥ S]. Because the best of N registered keys
is kept, the p-value is corrected to p_N = min(1, N·p) (a union bound that holds however the keys
overlap). *Detected* means p_N ≤ the false-positive rate (default 0.1 % per image); *inconclusive*
means p_N lies between that and the looser "suspicious" rate (default 1 %); otherwise *not
detected*. The thresholds are also given in bits: with 48-bit keys and one key, 36 matching bits
reach 0.1 %; with 1,000 keys, 41.

**The chart** counts images by bits matched; the dashed rules are the detection and suspicious
thresholds. Marked images sit far right (near k); unmarked ones near k/2.

**Good looks like** marked images detected with S close to k, unmarked ones near k/2 and not
detected. A *revoked* key still matches (the image was marked while it was valid) and is flagged.

**Caveat.** The binomial null assumes independent fair-coin bits; a learned extractor is not quite
that, so `make bench-watermark` measures the real false-positive rate on 10,000 unmarked images and
reports TPR at 0.1 % and 1 % FPR, with verification latency (p95 goal: 500 ms through the portal).
"""


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Watermark detected in 12 of 16 images (75%, threshold 38 bits); 1 inconclusive, 3 not detected; …"."""
    threshold = scalars.get("detect_bits")
    at = f", threshold {threshold:.0f} bits" if isinstance(threshold, int | float) and threshold == threshold else ""
    return (
        f"Watermark detected in {scalars['detected']:.0f} of {scalars['images']:.0f} images "
        f"({scalars['detected_fraction']:.0%}{at}); {scalars['inconclusive']:.0f} inconclusive, "
        f"{scalars['not_detected']:.0f} not detected; {scalars['mean_bits_matched']:.1f} bits matched on average "
        f"over {scalars['keys_searched']:.0f} key(s) searched."
    )


spec = JobSpec(
    name="watermark-verify",
    title="Verify watermarks (MOLM)",
    summary="Read the key bits from images and match them against the registered keys: who marked each image?",
    version=1,
    queue="verify",
    soft_time_limit=1800,
    time_limit=1900,
    params=(
        File(
            name="images",
            formats=("png", "jpeg", "webp", "zip"),
            max_bytes=200 * 2**20,
            multiple=True,
            help="PNG, JPEG or WebP images, or a zip of them.",
        ),
        Dataset(
            name="image_set",
            label="Image set",
            accepts=("images",),
            help="Or a folder of images from the library (used when no files are uploaded).",
        ),
        Model(
            name="extractor",
            accepts=("watermark-markers",),
            default="zoo:molm-tiny",
            help="Trained MOLM markers whose extractor reads the bits.",
        ),
        Dataset(
            name="keyring",
            accepts=("watermark-keyring",),
            default=PLATFORM_KEYRING,
            help="The keys to search: keyring:platform is every key registered on this platform.",
        ),
        Float(name="fpr", label="False-positive rate", default=1e-3, min=1e-12, max=0.1, help="Per image."),
        Float(
            name="suspicious_fpr",
            label="Suspicious rate",
            default=1e-2,
            min=1e-12,
            max=0.5,
            help="Looser rate: p-values between the two are reported as inconclusive.",
        ),
    ),
    validate=_validate,
    estimate=_estimate,
    guide=GUIDE,
    sample={"image_set": "zoo:molm-samples", "extractor": "zoo:molm-tiny", "keyring": "zoo:molm-demo-keyring"},
    summarize=_summarize,
)


def _keyring_file(path: Path) -> Path:
    if path.is_dir():
        candidates = sorted(path.glob("*.json"))
        if len(candidates) != 1:
            raise JobError(f"Keyring: the folder {path.name} must hold exactly one JSON keyring file.")
        return candidates[0]
    return path


def _image_paths(inputs: dict[str, Any]) -> list[tuple[Path, str]]:
    """Each image with the name the table shows: its path inside an unpacked zip or image set."""
    from mlcore.watermark.verification import image_files

    uploads = inputs.get("images")
    if uploads:
        roots = uploads if isinstance(uploads, list) else [uploads]
        where = "the uploaded files"
    elif "image_set" in inputs:
        roots = [inputs["image_set"]]
        where = "the image set"
    else:
        raise JobError("Images: upload images (or a zip of them), or pick an image set.")
    found = [
        (path, path.relative_to(root).as_posix() if root.is_dir() else path.name)
        for root in roots
        for path in image_files([root])
    ]
    if not found:
        raise JobError(f"Images: {where} hold no PNG, JPEG or WebP images.")
    if len(found) > MAX_IMAGES:
        raise JobError(f"Images: {len(found)} images; at most {MAX_IMAGES} per job. Split the batch.")
    return found


def _histogram(rows: list[dict[str, Any]], thresholds: dict[str, Any]) -> dict[str, Any]:
    counts: dict[tuple[int, str], int] = {}
    for row in rows:
        key = (row["bits_matched"], row["verdict"])
        counts[key] = counts.get(key, 0) + 1
    values = [{"bits_matched": s, "verdict": v, "images": n} for (s, v), n in sorted(counts.items())]
    rules = [
        {"bits": thresholds[name], "threshold": label}
        for name, label in (("detect_bits", "detection"), ("suspicious_bits", "suspicious"))
        if thresholds[name] is not None
    ]
    return {
        "$schema": VEGA_LITE,
        "title": "Images by bits matched",
        "layer": [
            {
                "data": {"values": values},
                "mark": "bar",
                "encoding": {
                    "x": {
                        "field": "bits_matched",
                        "type": "quantitative",
                        "title": "bits matched (S)",
                        "scale": {"domain": [0, thresholds["num_bits"]]},
                    },
                    "y": {"field": "images", "type": "quantitative", "aggregate": "sum", "title": "images"},
                    "color": {
                        "field": "verdict",
                        "type": "nominal",
                        "scale": {"domain": ["detected", "inconclusive", "not detected"]},
                    },
                },
            },
            {
                "data": {"values": rules},
                "mark": {"type": "rule", "strokeDash": [4, 3]},
                "encoding": {"x": {"field": "bits", "type": "quantitative"}, "tooltip": [{"field": "threshold"}]},
            },
        ],
    }


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mlcore.watermark.keys import InvalidKey, load_keyring
    from mlcore.watermark.verification import BadImage, cached_extractor, open_image, verify

    found = _image_paths(inputs)
    paths = [path for path, _ in found]
    names = [name for _, name in found]
    try:
        keys = load_keyring(_keyring_file(Path(inputs["keyring"]))) if "keyring" in inputs else []
    except InvalidKey as exc:
        raise JobError(f"Keyring: {exc}") from None
    try:
        extractor = cached_extractor(Path(inputs["extractor"]))
    except FileNotFoundError as exc:
        raise JobError(f"Extractor: {exc}") from None
    if keys and keys[0].num_bits != extractor.num_bits:
        raise JobError(
            f"Keyring: its keys have {keys[0].num_bits} bits but the extractor reads {extractor.num_bits}; "
            "pick the markers the keys were made for."
        )
    ctx.log(f"{len(paths)} image(s), {len(keys)} key(s), extractor reads {extractor.num_bits} bits")
    rows: list[dict[str, Any]] = []
    thresholds: dict[str, Any] = {}
    for start in range(0, len(paths), BATCH):
        ctx.raise_if_cancelled()
        chunk = paths[start : start + BATCH]
        try:
            images = [open_image(p, name=p.name) for p in chunk]
        except BadImage as exc:
            raise JobError(f"Images: {exc}") from None
        try:
            matches, found = verify(extractor, images, keys, fpr=params["fpr"], suspicious_fpr=params["suspicious_fpr"])
        except InvalidKey as exc:
            raise JobError(f"Keyring: {exc}") from None
        thresholds = found.describe()
        for name, match in zip(names[start : start + BATCH], matches, strict=True):
            rows.append({"image": name, **match.describe()})
        ctx.progress(min(1.0, (start + len(chunk)) / len(paths)), "decoding")

    out = ctx.workdir / "verify"
    out.mkdir(parents=True, exist_ok=True)
    with (out / "results.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "results.json").write_text(json.dumps({"thresholds": thresholds, "images": rows}, indent=1))
    ctx.artifact("results.csv", out / "results.csv", "text/csv")
    ctx.artifact("results.json", out / "results.json", "application/json")
    ctx.chart("bits_matched", _histogram(rows, thresholds))

    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("detected", "inconclusive", "not detected")}
    ctx.metric("images", len(rows))
    ctx.metric("detected", counts["detected"])
    ctx.metric("inconclusive", counts["inconclusive"])
    ctx.metric("not_detected", counts["not detected"])
    ctx.metric("detected_fraction", counts["detected"] / len(rows))
    ctx.metric("mean_bits_matched", sum(r["bits_matched"] for r in rows) / len(rows))
    ctx.metric("keys_searched", len(keys))
    ctx.metric("detect_bits", thresholds["detect_bits"] if thresholds["detect_bits"] is not None else float("nan"))
    organisations = sorted({r["organisation"] for r in rows if r["verdict"] == "detected" and r["organisation"]})
    ctx.log(
        f"{counts['detected']}/{len(rows)} detected, {counts['inconclusive']} inconclusive, "
        f"{counts['not detected']} not detected at FPR {params['fpr']:g} "
        f"(S ≥ {thresholds['detect_bits']} of {thresholds['num_bits']} bits, {len(keys)} keys searched)"
        + (f"; marked by {', '.join(organisations)}" if organisations else "")
    )
    return {"counts": counts, "thresholds": thresholds}
