"""``watermark-embed``: mark the user's own images with a team key, at their own size and in their own format.

Each image is encoded by the markers' VAE and decoded twice, with and without the adapters the key
selects; only the difference (the mark) is added to the image, so the photo keeps its own pixels
(:mod:`mlcore.watermark.embed`: a working grid of tiles blended without seams, any size). The mark
is scaled so that it alone sits at the target PSNR. The output keeps the input's format, ICC
profile, EXIF (orientation included), alpha and bit depth (:mod:`mlcore.watermark.image_io`).

Every output is then measured *as written*: its file is decoded again and compared with the input
(PSNR, SSIM), and read back by the extractor exactly as the portal reads it, against the key it was
marked with. The job only ever holds that one key, of the submitting team; nothing of any other
key reaches it.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlcore.jobs import Comparison, Dataset, Estimate, File, Float, JobContext, JobError, JobSpec, Key, Metric, Model
from mlcore.jobs.wording import count

MAX_IMAGES = 500
#: Detection in the self-check: one key searched, at the verifier's default false-positive rate.
SELF_CHECK_FPR = 1e-3


#: Below this share of the key's bits a read is no better than a guess (a 48-bit guess reaches it
#: about once in 30): the summary then says "near chance", not just "not detected".
NEAR_CHANCE = 0.65
UNTRAINED_READER = (
    "The extractor was trained on its generator's own images, not on residual-marked photos, so it cannot read "
    "these marks: pick zoo:molm-photo-parity, whose extractor was trained on them."
)


def readability(bit_accuracy: float, detected: int, images: int) -> str:
    """``readable`` (every written file detected), ``partly`` or ``unreadable`` (none detected)."""
    if detected >= images:
        return "readable"
    return "partly" if detected > 0 else "unreadable"


def _summarize(scalars: Mapping[str, Any]) -> str:
    """What was written and, plainly, whether verify can read it: a mark it cannot read is not claimed."""
    n, detected, accuracy = int(scalars["images"]), int(scalars["detected"]), scalars["bit_accuracy"]
    fidelity = (
        f"PSNR {scalars['psnr']:.1f} dB (worst {scalars['min_psnr']:.1f}), SSIM {scalars['ssim']:.3f} on the "
        "written files"
    )
    read = f"the extractor read back {accuracy:.1%} of the key's bits"
    if accuracy < NEAR_CHANCE:
        read += " (near chance: 50% is a guess)"
    why = "" if scalars.get("embed_trained") else f" {UNTRAINED_READER}"
    state = readability(accuracy, detected, n)
    if state == "readable":
        found = "it" if n == 1 else f"all {n}"
        return f"Marked {count(n, 'image')}: {fidelity}; {read} and detected the mark in {found}."
    if state == "unreadable":
        return (
            f"The {'mark in this image is' if n == 1 else f'marks in these {n} images are'} NOT readable: {read} and "
            f"{'did not detect it, so treat the file' if n == 1 else 'detected none, so treat the files'} as "
            f"unmarked ({fidelity}).{why}"
        )
    return (
        f"Only {detected} of {n} images carry a readable mark: {read}; verify does not detect the mark in the "
        f"other {n - detected}, so treat those as unmarked ({fidelity}).{why}"
    )


def _estimate(p: dict[str, Any]) -> Estimate:
    # One image at a time: its pixels as float64 and the working grid's tiles dominate.
    return Estimate(memory_bytes=2 * 2**30, seconds=120.0)


GUIDE = """\
**What you can bring.** Your photos: PNG (8- or 16-bit, with or without alpha), JPEG or WebP
files of any size up to the pixel cap, or a zip of them, or a library image set; and one of your
team's keys.

**What you get.** Your images, marked with your team's key, at their own size and in their own
format (PNG stays PNG at the same bit depth, a JPEG keeps its own quality tables, a WebP stays
lossless or lossy as it was), with their ICC profile, EXIF (orientation included) and alpha kept.
Download them from the *images* artifact.

**The table** has one row per image, measured on the file as written: **PSNR** and **SSIM**
against your original (higher = less visible; the target PSNR is what the mark alone was scaled
to, and re-encoding a JPEG or a lossy WebP adds its own loss), **strength** (how much the
decoder's perturbation was scaled to meet the target), and the **self-check**: the bits of your key
the extractor reads back from the written file, exactly as the portal reads an upload, with the
verdict against your key.

**The method** (MOLM, ICLR 2026, applied to your photo). The markers' VAE encodes the image and
decodes it twice, with and without the LoRA adapters your key switches on; only the difference is
added to your image, so the photo keeps its own pixels instead of the VAE's reconstruction. The
difference is computed on a working grid whose short side is about 256 pixels, in overlapping
32-pixel tiles blended so that no seam shows, and scaled back to the image's size; the reader uses
the same grid and lets every tile vote, so a resized copy is read on the same grid.

**Is the mark readable?** The summary says so plainly. Every written file is read back as the
portal reads an upload; a file in which the mark is not detected is reported as carrying no mark
verify can read, and the job never calls it marked. The *Extractor trained on marked photos* figure
says whether the reader was taught this kind of mark.

**What is shipped, and how well it reads.** The default markers are zoo:molm-photo-parity: MOLM's
own markers (48-bit keys; the paper's key-routed LoRA adapters on a 32-pixel VAE, without the bias
shift of the demo generator's markers) and an extractor, trained together on photos marked exactly as
this job marks them (`python -m mlcore.zoo train molm-photo`). Every tile carries your key with some
bits flipped, and which bits depends on the tile's own content (the parity of projections of its
colour); the reader computes the same flips from the file it reads and undoes them (spread spectrum).
Measured on 120 crops (256–640 px) of the photos scikit-image and scikit-learn ship, marked at 38 dB
(bench/results/watermark-forgery.md): the reader gets back 95 % of the key's bits (79 % after JPEG-75,
87 % after halving the size), where 50 % is a guess, and the mark is detected at the portal's bar for
one key (0.1 % false positives) in 99 % of the files as written, 66 % after JPEG-75 and 92 % after
halving. Averaging marked photos to forge the mark on clean ones succeeds in at most 2.4 % of tries
in every setting measured (the goal is at most 5 %). zoo:molm-photo-tiles (the same markers, flips
from the sign of the projections: the default before) is detected more often after JPEG-75 (80 %),
but a forger who pastes the mean of ten marked photos, less ten of his own, onto his target steers
its flips and is matched about one time in eight. zoo:molm-photo (each photo's mark at a
secret phase of the tile grid) reads worse, and a forger who lines the marks up before averaging
forges it nearly every time. Both can still be picked, and the portal still verifies their marks.
zoo:molm-tiny (the demo generator's markers) can still be picked: its extractor never learnt to read
marks on photos, which it reads at chance. The targets (95 % of the bits after JPEG-75 and after a
0.5 resize at 38 dB) are not met; a lower target PSNR makes the mark stronger.

**Caveats.** A lower target PSNR makes the mark stronger and easier to read after JPEG or
resizing, and more visible. With the public zoo markers (zoo:molm-photo-parity, zoo:molm-photo-tiles,
zoo:molm-photo, zoo:molm-tiny) anyone can read the mark, and mark other images with the key read.
"""

spec = JobSpec(
    name="watermark-embed",
    title="Watermark your images (MOLM)",
    summary="Mark your own photos with your team's key: same size, same format and metadata, with a self-check.",
    version=3,
    queue="gpu",
    soft_time_limit=1800,
    time_limit=1900,
    params=(
        File(
            name="images",
            formats=("png", "jpeg", "webp", "zip"),
            max_bytes=200 * 2**20,
            multiple=True,
            help="PNG, JPEG or WebP images of any size (up to the pixel cap), or a zip of them.",
        ),
        Dataset(
            name="image_set",
            label="Image set",
            accepts=("images",),
            help="Or a folder of images from the library (used when no files are uploaded).",
        ),
        Model(
            name="model",
            accepts=("watermark-markers",),
            default="zoo:molm-photo-parity",
            help=(
                "Markers and their extractor (zoo:molm-photo-parity for photos, or the output of a "
                "watermark-train job)."
            ),
        ),
        Key(name="key", required=True, help="One of your team's watermark keys; its bits pick the adapters."),
        Float(
            name="target_psnr",
            label="Target PSNR (dB)",
            default=38.0,
            min=20.0,
            max=60.0,
            help="The mark alone is scaled to this fidelity: lower is stronger and more visible.",
        ),
    ),
    estimate=_estimate,
    guide=GUIDE,
    sample={"image_set": "zoo:molm-samples", "model": "zoo:molm-photo-parity", "target_psnr": 38.0},
    summarize=_summarize,
    metrics=(
        Metric(key="images", label="Images", description="Images marked."),
        Metric(
            key="psnr",
            label="PSNR",
            unit="dB",
            better="higher",
            target=38.0,
            description="Mean PSNR of the written files against the originals (higher = less visible).",
        ),
        Metric(key="min_psnr", label="Worst PSNR", unit="dB", better="higher", description="The lowest PSNR."),
        Metric(
            key="ssim", label="SSIM", better="higher", description="Mean SSIM of the written files (1 = identical)."
        ),
        Metric(
            key="bit_accuracy",
            label="Self-check bit accuracy",
            unit="%",
            better="higher",
            target=0.95,
            description="Share of the key's bits the extractor reads back from the written files.",
        ),
        Metric(
            key="detected",
            label="Detected",
            better="higher",
            n="images",
            description="Written files in which the mark is detected against the key (FPR 0.1 %).",
        ),
        Metric(
            key="embed_trained",
            label="Extractor trained on marked photos",
            description=(
                "1 if the extractor was trained on residual-marked photos (e.g. zoo:molm-photo-parity), 0 if not."
            ),
        ),
    ),
    comparison=Comparison.none("Marks images with one key; watermark-robustness compares methods and baselines."),
)


def _fidelity(original: Any, written: Any) -> tuple[float, float]:
    """PSNR and SSIM of two :class:`SourceImage` pixel arrays (colour channels, on the [0, 1] scale)."""
    import torch

    from mlcore.watermark.quality import psnr, ssim

    def tensor(source: Any) -> torch.Tensor:
        array = source.pixels.astype("float32") / source.maxval * 2 - 1
        return torch.from_numpy(array).permute(2, 0, 1)[None]

    a, b = tensor(original), tensor(written)
    return float(psnr(a, b)), float(ssim(a, b))


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mlcore.watermark.disclosure import PUBLIC_WEIGHTS_NOTE, key_for_marking
    from mlcore.watermark.verification import named_images

    found = named_images(inputs, limit=MAX_IMAGES, too_many="Split the batch.")
    if "model" not in inputs:
        raise JobError("Model: pick markers (e.g. zoo:molm-photo-parity).")
    if "key" not in inputs:
        raise JobError("Key: pick one of your team's watermark keys.")
    record, public = key_for_marking(Path(inputs["key"]), Path(inputs["model"]))
    from mlcore.watermark import image_io
    from mlcore.watermark.calibration import matched_bits
    from mlcore.watermark.embed import mark_image
    from mlcore.watermark.generator import GeneratorError
    from mlcore.watermark.pipeline import key_tensor, load_bundle
    from mlcore.watermark.stats import Thresholds, binomial_tail
    from mlcore.watermark.verification import BadImage, decode, open_image

    ctx.progress(0.02, "loading the markers")
    try:
        bundle = load_bundle(Path(inputs["model"]), device=ctx.device)
    except GeneratorError as exc:
        raise JobError(f"Model: {exc}.") from None
    try:
        key = key_tensor(record.bits, bundle.num_bits)
    except ValueError as exc:
        raise JobError(f"Key {record.name!r}: {exc}; pick a {bundle.num_bits}-bit key or other markers.") from None
    threshold = Thresholds.for_keyring(bundle.num_bits, 1, fpr=SELF_CHECK_FPR, suspicious_fpr=1e-2)
    ctx.log(f"{len(found)} image(s); key {record.name!r} ({record.id}); markers read {bundle.num_bits} bits")
    if public:
        ctx.log(PUBLIC_WEIGHTS_NOTE)
    out = ctx.workdir / "images"
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    gallery = 0
    for i, (path, name) in enumerate(found):
        ctx.raise_if_cancelled()
        try:
            source = image_io.read(path.read_bytes(), name=name)
        except BadImage as exc:
            raise JobError(f"Images: {exc}") from None
        marked = mark_image(bundle, source, key, target_psnr=params["target_psnr"])
        data = image_io.encode(marked.image)
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        # Measured on the written file: what the user downloads is what is scored and read.
        written = image_io.read(data, name=name)
        psnr, ssim = _fidelity(source, written)
        probabilities = decode(bundle.extractor, [open_image(data, name=name)])
        matched = int(matched_bits(probabilities, key.numpy())[0])
        p_value = binomial_tail(matched, bundle.num_bits)
        rows.append(
            {
                "image": name,
                "format": source.description,
                "width": source.width,
                "height": source.height,
                "strength": round(marked.strength, 4),
                "psnr": round(psnr, 2),
                "ssim": round(ssim, 4),
                "bits_matched": matched,
                "num_bits": bundle.num_bits,
                "p_value": p_value,
                "verdict": threshold.verdict(p_value),
                "readable": threshold.verdict(p_value) == "detected",
                "notes": "; ".join(source.notes),
            }
        )
        media = {"PNG": "image/png", "JPEG": "image/jpeg"}.get(source.format)
        if media and gallery < 16:
            ctx.artifact(f"marked-{gallery:02d}{target.suffix.lower()}", target, media)
            gallery += 1
        ctx.progress(0.05 + 0.9 * (i + 1) / len(found), f"marked {i + 1} of {len(found)}")

    report = ctx.workdir / "report"
    report.mkdir(parents=True, exist_ok=True)
    with (report / "results.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    embed_trained = bool(bundle.card.get("embed_training"))
    n = len(rows)
    detected = sum(r["readable"] for r in rows)
    bit_accuracy = sum(r["bits_matched"] for r in rows) / (n * bundle.num_bits)
    state = readability(bit_accuracy, detected, n)
    summary = {
        "target_psnr": params["target_psnr"],
        "detect_bits": threshold.detect_bits,
        "readable": state,
        "extractor_trained_on_marked_photos": embed_trained,
        "images": rows,
    }
    notes = [] if state == "readable" else [f"{n - detected} of {n} written files carry no mark verify can read."]
    if state != "readable" and not embed_trained:
        notes.append(UNTRAINED_READER)
    if public:
        notes.append(PUBLIC_WEIGHTS_NOTE)
    if notes:
        summary["note"] = " ".join(notes)
    (report / "results.json").write_text(json.dumps(summary, indent=1))
    ctx.artifact("results.csv", report / "results.csv", "text/csv")
    ctx.artifact("results.json", report / "results.json", "application/json")
    ctx.artifact("images", out)
    name = f"{count(n, 'image')} watermarked with {record.name}"
    if state != "readable":
        # The library must not present files as marked when verify cannot find the mark in them.
        name = f"{count(n, 'image')}, mark not readable in {n - detected} ({record.name})"
    ctx.register("images", out, {"name": name, "readable": state})
    _chart(ctx, rows, threshold.detect_bits)

    metrics = {
        "images": float(n),
        "psnr": sum(r["psnr"] for r in rows) / n,
        "min_psnr": min(r["psnr"] for r in rows),
        "ssim": sum(r["ssim"] for r in rows) / n,
        "bit_accuracy": bit_accuracy,
        "detected": float(detected),
        "embed_trained": float(embed_trained),
    }
    for metric, value in metrics.items():
        ctx.metric(metric, value)
    ctx.log(
        f"{n} image(s) marked: PSNR {metrics['psnr']:.1f} dB (worst {metrics['min_psnr']:.1f}), SSIM "
        f"{metrics['ssim']:.3f}; self-check {metrics['bit_accuracy']:.1%} of bits, "
        f"{metrics['detected']:.0f} detected (S ≥ {threshold.detect_bits} of {bundle.num_bits})"
    )
    if state != "readable":
        ctx.log(f"WARNING: {_summarize(metrics)}")
    ctx.progress(1.0, "done")
    return metrics


def _chart(ctx: JobContext, rows: list[dict[str, Any]], detect_bits: int | None) -> None:
    from mlcore.charts import bar_chart, with_rules

    values = [{"image": r["image"], "bits_matched": r["bits_matched"]} for r in rows[:200]]
    bars = bar_chart(
        "Key bits read back from each written file",
        values,
        x="image",
        y="bits_matched",
        x_title="image",
        y_title="bits matched",
    )
    if detect_bits is not None:
        bars = with_rules(
            bars, [{"bits": detect_bits, "threshold": "detection"}], at="bits", label="threshold", axis="y"
        )
    ctx.chart("bits_matched", bars)
