"""``watermark-verify``: is each image marked by a registered key, and by whom? (MOLM, ICLR 2026)

One image, several, or a zip of them → per image a verdict — detected, inconclusive (between the
detection threshold and a looser "suspicious" one) or not detected — at the configured
false-positive rate, with the thresholds shown (``mlcore.watermark.stats``). What else a row shows
is decided by :func:`mlcore.watermark.disclosure.disclose`: when the best-matching key is the
submitting team's own, its id and name, bits matched, the p-values and the decoded bits; when it is
another team's, the organisation if detected and nothing else (their scores would let anyone solve
for that team's key). Aggregates (the chart, ``mean_bits_matched``) cover own-key rows only.

The keyring is a ``watermark-keyring`` dataset: on the platform ``keyring:platform`` resolves to a
JSON file of every registered key (id, bits, organisation, revoked, own), written by the platform's
resolver to memory only the worker can read; in ``moelab run`` a path to such a file, all of whose
keys are the user's own. So this kind never touches the database. Matching images against other
teams' keys spends a daily budget per team and client address (``ctx.take_allowance``); images past
it are matched against the team's own keys only, and the log and summary say so.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlcore.charts import bar_chart, count_histogram, verdict_scale, with_rules
from mlcore.jobs import Comparison, Dataset, Estimate, File, Float, JobContext, JobError, JobSpec, Metric, Model
from mlcore.watermark.disclosure import FOREIGN_MATCHES, OWN_FIELDS, PUBLIC_WEIGHTS_NOTE

MAX_IMAGES = 5000
FOREIGN_EXTRACTOR_NOTE = (
    "Other organisations' keys are searched only with the platform's own extractor; this job's extractor is "
    "another one, so its images were matched against your team's keys only. Pick the platform's extractor "
    "to search every registered key."
)
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
**What this shows.** Each row of the table is one image and its verdict. When the registered key that
agrees best is one of your team's, the row also shows that key, how many bits agree (S of k), the
p-values and the bits the extractor read; when it is another organisation's, only the verdict and,
if detected, the organisation: their scores would let anyone solve for their key. Matching against
other organisations' keys spends a daily budget per team and address; past it, images are matched
against your team's keys only (the *searched* column and the summary say so).

**The test** (MOLM, ICLR 2026, §"Verification"). An unmarked image agrees
with any fixed key like a fair coin, so p = P[Bin(k, ½) ≥ S]. Because the best of N registered keys
is kept, the p-value is corrected to p_N = min(1, N·p) (a union bound that holds however the keys
overlap). *Detected* means p_N ≤ the false-positive rate (default 0.1 % per image); *inconclusive*
means p_N lies between that and the looser "suspicious" rate (default 1 %); otherwise *not
detected*. The thresholds are also given in bits: with 48-bit keys and one key, 36 matching bits
reach 0.1 %; with 1,000 keys, 41.

**The chart** counts the images your team's keys matched best by bits matched; the dashed rules are
the detection and suspicious thresholds. Marked images sit far right (near k); unmarked ones near
k/2. With no such image, it counts images by verdict.

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
    line = (
        f"Watermark detected in {scalars['detected']:.0f} of {scalars['images']:.0f} images "
        f"({scalars['detected_fraction']:.0%}{at}); {scalars['inconclusive']:.0f} inconclusive, "
        f"{scalars['not_detected']:.0f} not detected"
    )
    searched = f"{scalars['keys_searched']:.0f} key(s) searched"
    mean, own = scalars.get("mean_bits_matched"), scalars.get("own_key_images")
    if isinstance(mean, int | float) and (own is None or own >= scalars["images"]):
        line += f"; {mean:.1f} bits matched on average over {searched}."
    elif isinstance(mean, int | float):
        line += f"; {mean:.1f} bits matched on average on the {own:.0f} image(s) your team's keys matched best."
    else:
        line += f" over {searched}."
    if scalars.get("other_teams_keys_skipped"):
        line += " Only your team's keys were searched: other organisations' keys need the platform's extractor."
    limited = scalars.get("images_own_keys_only")
    if limited:
        line += (
            f" {limited:.0f} image(s) beyond today's budget for other teams' keys were matched against "
            "your team's keys only."
        )
    if scalars.get("public_weights"):
        line += f" {PUBLIC_WEIGHTS_NOTE}"
    return line


spec = JobSpec(
    name="watermark-verify",
    metrics=(
        Metric(
            key="detected_fraction",
            label="Images detected",
            unit="%",
            proportion=True,
            n="images",
            description="Share of the checked images in which a key's watermark was found.",
        ),
        Metric(
            key="mean_bits_matched",
            label="Bits matched",
            unit="bits",
            better="higher",
            description="Key bits read back, on average over images matched to one of your keys.",
        ),
        Metric(
            key="detect_bits",
            label="Detection threshold",
            unit="bits",
            description="Bits that must match to call an image watermarked (0.1% false positives).",
        ),
        Metric(key="images", label="Images checked", description="Images in the upload or set."),
    ),
    comparison=Comparison.none("A check of images against keys: there is no method or baseline to compare."),
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


def _verdicts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Images by verdict: the chart when no row may show its score (every best key another team's)."""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("detected", "inconclusive", "not detected")}
    # One row per verdict in a fixed order, zero counts included: keeping the rows' order fixes the axis.
    values = [{"verdict": v, "images": n} for v, n in counts.items()]
    return bar_chart("Images by verdict", values, x="verdict", y="images", x_title="verdict", y_title="images")


def _histogram(rows: list[dict[str, Any]], thresholds: dict[str, Any]) -> dict[str, Any]:
    """Own-key rows by bits matched (the caller passes no other rows: their S is not ours to show)."""
    counts: dict[tuple[int, str], int] = {}
    for row in rows:
        key = (row["bits_matched"], row["verdict"])
        counts[key] = counts.get(key, 0) + 1
    values = [{"bits_matched": s, "verdict": v, "images": n} for (s, v), n in sorted(counts.items())]
    # Named in the legend with where each verdict starts; drawn at the edge of that S's bar.
    rules = [
        {"bits": thresholds[name], "threshold": f"{verdict} from S = {thresholds[name]}"}
        for name, verdict in (("detect_bits", "detected"), ("suspicious_bits", "inconclusive"))
        if thresholds[name] is not None
    ]
    # One row per (bits, verdict): the bars of one S stack by verdict, each colour fixed per verdict.
    bars = count_histogram(
        "Images by bits matched",
        values,
        x="bits_matched",
        count="images",
        x_title="bits matched (S)",
        y_title="images",
        x_range=(0, thresholds["num_bits"]),
        color="verdict",
        color_title="verdict",
        color_scale=verdict_scale(),
    )
    return with_rules(bars, rules, at="bits", label="threshold", edge=True)


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mlcore.watermark.disclosure import disclose_match, extractor_fingerprint, is_own, rests_on_public_weights
    from mlcore.watermark.keys import InvalidKey, foreign_extractors, load_keyring
    from mlcore.watermark.stats import Thresholds, match_images
    from mlcore.watermark.verification import BadImage, cached_extractor, decode, named_images, open_image

    found = named_images(inputs, limit=MAX_IMAGES, too_many="Split the batch.")
    paths = [path for path, _ in found]
    names = [name for _, name in found]
    try:
        keyring = _keyring_file(Path(inputs["keyring"])) if "keyring" in inputs else None
        keys = load_keyring(keyring) if keyring else []
        allowed = foreign_extractors(keyring) if keyring else None
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
    own_keys = [k for k in keys if k.own]
    if len(own_keys) < len(keys) and allowed is not None and extractor_fingerprint(inputs["extractor"]) not in allowed:
        # An extractor of the user's choosing decides which bits come out: verdicts against other
        # teams' keys would then be answers to chosen questions, enough to walk to a key.
        keys = own_keys
        ctx.log(FOREIGN_EXTRACTOR_NOTE)
        ctx.metric("other_teams_keys_skipped", 1.0)
    all_own = len(own_keys) == len(keys)
    public = rests_on_public_weights(Path(inputs["extractor"]))
    rates = {"fpr": params["fpr"], "suspicious_fpr": params["suspicious_fpr"]}
    full = Thresholds.for_keyring(extractor.num_bits, len(keys), **rates).describe()
    narrow = Thresholds.for_keyring(extractor.num_bits, len(own_keys), **rates).describe()
    ctx.log(f"{len(paths)} image(s), {len(keys)} key(s), extractor reads {extractor.num_bits} bits")
    if public:
        ctx.log(PUBLIC_WEIGHTS_NOTE)
    rows: list[dict[str, Any]] = []
    own_rows: list[dict[str, Any]] = []
    limited = 0
    for start in range(0, len(paths), BATCH):
        ctx.raise_if_cancelled()
        chunk = paths[start : start + BATCH]
        try:
            images = [open_image(p, name=p.name) for p in chunk]
        except BadImage as exc:
            raise JobError(f"Images: {exc}") from None
        probabilities = decode(extractor, images)
        # Matching against other teams' keys spends the daily budget; the rest see our keys only.
        granted = len(chunk) if all_own else ctx.take_allowance(FOREIGN_MATCHES, len(chunk))
        try:
            matches = match_images(probabilities[:granted], keys, **rates)[0]
            if granted < len(chunk):
                matches += match_images(probabilities[granted:], own_keys, **rates)[0]
        except InvalidKey as exc:
            raise JobError(f"Keyring: {exc}") from None
        limited += len(chunk) - granted
        for i, (name, match) in enumerate(zip(names[start : start + BATCH], matches, strict=True)):
            row = {"image": name, **disclose_match(match, all_own=all_own)}
            if not all_own:
                row["searched"] = "every key" if i < granted else "your team's keys only"
            rows.append(row)
            if is_own(match, all_own=all_own):
                own_rows.append(row)
        ctx.progress(min(1.0, (start + len(chunk)) / len(paths)), "decoding")

    out = ctx.workdir / "verify"
    out.mkdir(parents=True, exist_ok=True)
    fields = ["image", *OWN_FIELDS] + ([] if all_own else ["searched"])
    with (out / "results.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    report: dict[str, Any] = {"thresholds": full, "images": rows}
    if limited:
        report["thresholds_own_keys_only"] = narrow
    if public:
        report["note"] = PUBLIC_WEIGHTS_NOTE
    (out / "results.json").write_text(json.dumps(report, indent=1))
    ctx.artifact("results.csv", out / "results.csv", "text/csv")
    ctx.artifact("results.json", out / "results.json", "application/json")
    # A histogram of S over other teams' matches would leak S: own-key rows only, else verdicts.
    if own_rows:
        ctx.chart("bits_matched", _histogram(own_rows, full))
    else:
        ctx.chart("verdicts", _verdicts(rows))

    counts = {v: sum(r["verdict"] == v for r in rows) for v in ("detected", "inconclusive", "not detected")}
    ctx.metric("images", len(rows))
    ctx.metric("detected", counts["detected"])
    ctx.metric("inconclusive", counts["inconclusive"])
    ctx.metric("not_detected", counts["not detected"])
    ctx.metric("detected_fraction", counts["detected"] / len(rows))
    if own_rows:
        ctx.metric("mean_bits_matched", sum(r["bits_matched"] for r in own_rows) / len(own_rows))
    if not all_own:
        ctx.metric("own_key_images", len(own_rows))
    if limited:
        ctx.metric("images_own_keys_only", limited)
    if public:
        ctx.metric("public_weights", 1.0)
    ctx.metric("keys_searched", len(keys))
    ctx.metric("detect_bits", full["detect_bits"] if full["detect_bits"] is not None else float("nan"))
    organisations = sorted({r["organisation"] for r in rows if r["verdict"] == "detected" and r["organisation"]})
    ctx.log(
        f"{counts['detected']}/{len(rows)} detected, {counts['inconclusive']} inconclusive, "
        f"{counts['not detected']} not detected at FPR {params['fpr']:g} "
        f"(S ≥ {full['detect_bits']} of {full['num_bits']} bits, {len(keys)} keys searched)"
        + (f"; marked by {', '.join(organisations)}" if organisations else "")
    )
    if limited:
        ctx.log(
            f"Today's budget for matching images against other teams' keys is spent: {limited} of "
            f"{len(rows)} image(s) were matched against your team's {len(own_keys)} key(s) only "
            f"(S ≥ {narrow['detect_bits']} bits to detect). The budget renews at midnight UTC."
        )
    return {"counts": counts, "thresholds": full}
