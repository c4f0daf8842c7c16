"""``watermark-train``: train MOLM markers and an extractor for a generator's VAE decoder.

The generator is a ``watermark-markers`` item (its ``vae/``, ``unet/`` and ``scheduler/`` are reused;
its markers are ignored and trained afresh) or any diffusers ``AutoencoderKL`` directory
(``diffusers-vae``). Training follows the paper (method card section 2.5) with the card's CPU
curriculum: key loss only first, then λ and the distortions ramp in. The result is registered as a
new ``watermark-markers`` item (generator + markers + extractor + card) that
``watermark-generate``, ``watermark-verify`` and ``watermark-robustness`` accept.

The training images are the built-in photo crops, the user's own images (a zip or a library image
set, cut into seeded crops of the model's size: :mod:`mlcore.watermark.training_images`), or both
(``image_source``). Images given with ``builtin``, or ``mine`` without images, are refused.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlcore.charts import lines
from mlcore.jobs import (
    Choice,
    Comparison,
    Dataset,
    Estimate,
    File,
    Float,
    Int,
    JobContext,
    JobError,
    JobSpec,
    Metric,
    Model,
    Seed,
)
from mlcore.jobs.binding import bind
from mlcore.jobs.spec import InputCheck
from mlcore.jobs.wording import count
from mlcore.uploads import forget_source_paths

if TYPE_CHECKING:
    from mlcore.watermark.train import MolmConfig
    from mlcore.watermark.training_images import CropSource

MIN_BITS_HELP = "At least 48 bits: 28 cannot reach a low false-positive rate among many keys."
IMAGE_SOURCES = ("builtin", "mine", "both")


def _image_source_errors(source: str, *, uploaded: bool, image_set: bool) -> list[tuple[str, str]]:
    """No image input is ignored: images need ``mine`` or ``both``, and those need images."""
    if uploaded and image_set:
        return [("image_set", "Upload images or pick an image set, not both (put them in one set or one zip).")]
    if source == "builtin" and (uploaded or image_set):
        field = "images" if uploaded else "image_set"
        return [(field, "Image source is builtin, so these images would not be used: set it to mine or both.")]
    if source != "builtin" and not (uploaded or image_set):
        return [("image_source", f"Image source is {source}: upload images (or a zip of them), or pick an image set.")]
    return []


def _check_inputs(params: dict[str, Any], uploaded: frozenset[str]) -> InputCheck:
    return InputCheck(
        errors=_image_source_errors(
            params["image_source"], uploaded="images" in uploaded, image_set=bool(params.get("image_set"))
        )
    )


def _estimate(p: dict[str, Any]) -> Estimate:
    # A 32×32 decoder at batch 16 takes ~1 s per step on one CPU core; larger VAEs scale with their pixels.
    return Estimate(memory_bytes=2 * 2**30 + p["batch_size"] * 64 * 2**20, seconds=1.5 * p["steps"] + 120)


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Trained 48-bit keys: held-out bit accuracy 97.5% on fresh keys, PSNR 32.1 dB and SSIM 0.941 …"."""
    return (
        f"Trained {scalars['num_bits']:.0f}-bit keys: held-out bit accuracy {scalars['bit_accuracy']:.1%} on fresh "
        f"keys, PSNR {scalars['psnr']:.1f} dB and SSIM {scalars['ssim']:.3f} against the frozen decoder."
    )


spec = JobSpec(
    name="watermark-train",
    metrics=(
        Metric(
            key="bit_accuracy",
            label="Bit accuracy",
            unit="%",
            better="higher",
            description="Share of key bits read back from held-out images marked with fresh keys.",
        ),
        Metric(
            key="psnr",
            label="PSNR",
            unit="dB",
            better="higher",
            target=32.0,
            description="Fidelity against the unmarked decode (higher = less visible); the target is 32 dB.",
        ),
        Metric(
            key="ssim",
            label="SSIM",
            better="higher",
            description="Structural similarity to the unmarked decode (1 = identical).",
        ),
    ),
    comparison=Comparison.none("Trains one set of markers; watermark-robustness compares it with DWT-DCT."),
    title="Train MOLM watermark markers",
    summary="Train a Mixture of LoRA Markers on a generator's VAE decoder and the extractor that reads keys back.",
    version=2,
    queue="gpu",
    soft_time_limit=6 * 3600,
    time_limit=6 * 3600 + 300,
    params=(
        Model(
            name="generator",
            accepts=("watermark-markers", "diffusers-vae"),
            default="zoo:molm-tiny",
            help="The generator whose decoder gets markers (its current markers, if any, are replaced).",
        ),
        Choice(
            name="image_source",
            label="Training images",
            default="builtin",
            options=IMAGE_SOURCES,
            help="builtin: the platform's photo crops; mine: only your images; both: half of each.",
        ),
        File(
            name="images",
            formats=("png", "jpeg", "webp", "zip"),
            max_bytes=200 * 2**20,
            multiple=True,
            help="Your PNG, JPEG or WebP images, or a zip of them (with image source mine or both).",
        ),
        Dataset(
            name="image_set",
            label="Image set",
            accepts=("images",),
            help="Or a folder of images from the library (with image source mine or both).",
        ),
        Choice(
            name="adapters",
            label="P (adapters per slot)",
            default="8",
            options=("2", "4", "8", "16"),
            help="log2(P) key bits per routed convolution. " + MIN_BITS_HELP,
        ),
        Int(name="rank", default=8, min=1, max=128, help="LoRA rank of each adapter."),
        Int(
            name="steps",
            default=600,
            min=1,
            max=200_000,
            help="Training steps (a fresh random key per image each step).",
        ),
        Int(name="batch_size", default=16, min=2, max=512, help="Images per step."),
        Float(
            name="lam",
            label="λ",
            default=0.5,
            min=0.0,
            max=100.0,
            help="Weight of the imperceptibility loss (MSE + 1 − SSIM).",
        ),
        Float(
            name="lr",
            default=3e-3,
            min=1e-6,
            max=1.0,
            help="AdamW learning rate of the adapters (the extractor uses a third).",
        ),
        Float(
            name="key_only_fraction",
            default=0.3,
            min=0.0,
            max=1.0,
            help="Share of steps with the key loss only (no λ, no distortions).",
        ),
        Float(
            name="aug_p",
            label="Distortion rate",
            default=0.6,
            min=0.0,
            max=1.0,
            help="Share of training images distorted once distortions are on.",
        ),
        Float(
            name="init_scale",
            default=0.3,
            min=0.0,
            max=10.0,
            help="Initial scale of the adapters' up-projections (paper: 0).",
        ),
        Seed(name="seed"),
    ),
    estimate=_estimate,
    check_inputs=_check_inputs,
    guide=(
        "### What you can bring\n"
        "**A generator**: a `watermark-markers` item (its VAE, UNet and scheduler are kept, its markers trained "
        "afresh) or a diffusers `AutoencoderKL` folder (`diffusers-vae`), working at up to 256 px. "
        "**Your own images** to train the markers on: PNG, JPEG or WebP files, or a zip of them (up to 200 MB each, "
        "16 megapixels per image, at most 1,000 images), or a library image set. Set *Training images* to "
        "`mine` (only yours) or `both` (half yours, half the built-in photo crops); `builtin` uses the platform's "
        "photos only. Each image is cut "
        "into random square crops of the model's size (a fixed seed: the same images give the same crops), shown "
        "in its EXIF orientation; images smaller than the model's size give no crop and are listed in the log. With "
        "8 or more images, every 8th is held out for the evaluation; with fewer, the evaluation uses fresh crops "
        "of the same images. The log says how many images and crops were used. *Try with a sample* trains on "
        "`zoo:sample-photos`: eight photos as users bring them (JPEG, one a phone portrait with an EXIF "
        "orientation tag; PNG with alpha and in greyscale; WebP), of different sizes.\n\n"
        "### How to read this\n"
        "**Bit accuracy** (held-out photo latents, fresh random keys never trained on) should leave 0.5 during the "
        "key-only warm-up and climb towards 1; **PSNR/SSIM** compare the watermarked decoder's output with the frozen "
        "one on the same latent (higher = less visible; the project's target is ≥ 32 dB). When λ ramps in (the λ "
        "series of the losses chart), PSNR rises and bit accuracy may dip: that is the trade-off the benchmark's "
        "λ sweep maps. "
        "Losses: the key loss is the BCE of the extractor's logits on distorted images; the imperceptibility loss is "
        "MSE + (1 − SSIM).\n\n"
        "**The paper** (MOLM, ICLR 2026): routed LoRA adapters in the VAE decoder, one per key symbol, trained with a "
        "fresh key per step — claims bit accuracy ≈ 0.98 clean, 0.84–0.95 under common distortions, at PSNR ≈ 23.5 dB "
        "on SD-1.5. **Our benchmark** (`make bench-watermark`) measured the zoo's 32×32 model; see "
        "bench/results/watermark.md for what reproduced and what did not."
    ),
    # The sample trains on photos as users bring them (JPEG with EXIF orientation, RGBA and grey PNG, WebP).
    sample={
        "generator": "zoo:molm-tiny",
        "image_source": "mine",
        "image_set": "zoo:sample-photos",
        "steps": 40,
        "batch_size": 8,
        "seed": 0,
    },
    summarize=_summarize,
)


def _molm_config(params: dict[str, Any]) -> MolmConfig:
    """MOLM's training: the spec's values; the extractor learns at a third of the adapters' rate, and
    the evaluation interval and latent pool grow with the run."""
    from mlcore.watermark.train import MolmConfig

    return bind(
        MolmConfig,
        params,
        rename={"adapters": "num_adapters", "lr": "lr_markers"},
        convert={"adapters": int},
        skip=("generator", "image_source", "image_set"),
        lr_extractor=params["lr"] / 3,
        eval_every=max(10, params["steps"] // 30),
        pool=min(2048, max(256, params["batch_size"] * 32)),
    )


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    import torch

    from mlcore.watermark.generator import GeneratorError, load_generator
    from mlcore.watermark.pipeline import MIN_KEY_BITS
    from mlcore.watermark.train import save_molm, train_molm

    if "generator" not in inputs:
        raise JobError("Pick a generator (e.g. zoo:molm-tiny) or a diffusers VAE directory.")
    source = Path(inputs["generator"])
    ctx.progress(0.01, "loading the generator")
    try:
        generator = load_generator(source)
    except GeneratorError as exc:
        raise JobError(f"Generator: {exc}.") from None
    if generator.image_size > 256:
        raise JobError(
            f"Generator: the VAE works at {generator.image_size} px; this CPU-scale job accepts up to 256 px."
        )
    from mlcore.watermark.markers import routed_convolutions

    slots = len(routed_convolutions(generator.vae))
    bits = slots * (int(params["adapters"]).bit_length() - 1)
    if bits < MIN_KEY_BITS:
        raise JobError(
            f"P = {params['adapters']} gives {slots} slots × {int(params['adapters']).bit_length() - 1} bits = "
            f"{bits}-bit "
            f"keys on this decoder; at least {MIN_KEY_BITS} are needed. Choose a larger P."
        )
    torch.manual_seed(params["seed"])
    config = _molm_config(params)
    crops = _crop_source(params, inputs, generator.image_size, ctx)
    ctx.log(
        f"{slots} routed convolutions × P = {config.num_adapters} → {bits}-bit keys; rank {config.rank}; "
        f"{config.steps} steps of {config.batch_size}; λ → {config.lam:g}"
    )

    def on_step(step: int, result: Any) -> None:
        ctx.raise_if_cancelled()
        if result.history and result.history[-1]["step"] == step + 1:
            row = result.history[-1]
            for name in ("loss_key", "loss_imp", "heldout_bit_accuracy", "heldout_psnr", "heldout_ssim", "lam"):
                ctx.metric(name, row[name], step=step + 1)
            _charts(ctx, result.history)
        if step % 5 == 0:
            ctx.progress(0.05 + 0.85 * step / config.steps, f"step {step} of {config.steps}")

    ctx.progress(0.03, "encoding the training crops")
    result = train_molm(generator, config, log=lambda row: None, on_step=on_step, crops=crops)
    ctx.log(_crops_line(crops))
    _charts(ctx, result.history)
    folder = ctx.workdir / "markers"
    for part in ("vae", "unet", "scheduler", "ae2"):
        if (source / part).is_dir():
            shutil.copytree(source / part, folder / part)
    if not (folder / "vae").is_dir():
        generator.vae.save_pretrained(folder / "vae")
    save_molm(result, folder)
    forget_source_paths(folder)
    metrics = {
        "bit_accuracy": result.metrics["bit_accuracy"],
        "psnr": result.metrics["psnr"],
        "ssim": result.metrics["ssim"],
        "num_bits": float(bits),
        "final_loss_key": result.history[-1]["loss_key"] if result.history else float("nan"),
        "user_images": float(len(crops.images)),
        **{name: float(n) for name, n in sorted(crops.counts.items())},
    }
    for name, value in metrics.items():
        ctx.metric(name, value)
    ctx.log(
        f"held-out clean bit accuracy {metrics['bit_accuracy']:.3f} on fresh keys, PSNR {metrics['psnr']:.1f} dB, "
        f"SSIM {metrics['ssim']:.3f} against the frozen decoder ({bits}-bit keys)"
    )
    card = json.loads((folder / "card.json").read_text())
    card["training_images"] = _training_images(params["image_source"], crops)
    (folder / "card.json").write_text(json.dumps(card, indent=1))
    ctx.artifact("markers", folder)
    ctx.artifact("card.json", folder / "card.json", "application/json")
    ctx.register(
        "watermark-markers",
        folder,
        {k: card[k] for k in ("num_bits", "P", "rank", "image_size", "figures", "training_images")},
    )
    ctx.progress(1.0, "done")
    return metrics


def _crop_source(params: dict[str, Any], inputs: dict[str, Any], size: int, ctx: JobContext) -> CropSource:
    """The crops ``image_source`` asks for; the user's images are read (and refused if bad) before training."""
    from mlcore.watermark.training_images import MAX_TRAINING_IMAGES, CropSource, read_user_images
    from mlcore.watermark.verification import BadImage, named_images

    source = params["image_source"]
    # Checked again here (the web and the CLI check at submission): a run from Python must not ignore images.
    errors = _image_source_errors(source, uploaded=bool(inputs.get("images")), image_set="image_set" in inputs)
    if errors:
        raise JobError(errors[0][1])
    if source == "builtin":
        return CropSource(builtin=True)
    ctx.progress(0.02, "reading your images")
    try:
        images, small = read_user_images(
            named_images(inputs, limit=MAX_TRAINING_IMAGES, too_many="Pick a subset."), size=size
        )
    except BadImage as exc:
        raise JobError(f"Images: {exc}") from None
    if small:
        shown = ", ".join(small[:10]) + (f" and {len(small) - 10} more" if len(small) > 10 else "")
        ctx.log(f"{count(len(small), 'image')} smaller than the model's {size} px, so no crop: {shown}")
    if not images:
        raise JobError(f"Images: none of them is at least {size}×{size} pixels, the model's size; bring larger ones.")
    mix = "only yours" if source == "mine" else "half yours, half built-in photo crops"
    ctx.log(f"Read {len(images)} of your images for training ({source}: {mix}).")
    return CropSource(images=images, builtin=source == "both")


def _crops_line(crops: CropSource) -> str:
    """ "Training images: 256 training crops of your 6 images and 128 evaluation crops of …"."""
    c = crops.counts
    parts = []
    if crops.images:
        held = (
            f"{len(crops.held_out)} held-out image{'s' if len(crops.held_out) != 1 else ''}"
            if crops.holds_out_images
            else "fresh crops of the same images (fewer than 8: none held out)"
        )
        parts.append(
            f"{c.get('user_train_crops', 0)} training crops of your {len(crops.training)} images and "
            f"{c.get('user_test_crops', 0)} evaluation crops of {held}"
        )
    if crops.builtin:
        parts.append(
            f"{c.get('builtin_train_crops', 0)} training and {c.get('builtin_test_crops', 0)} evaluation crops of "
            "the built-in photos"
        )
    return "Training images: " + "; ".join(parts) + "."


def _training_images(source: str, crops: CropSource) -> dict[str, Any]:
    """What the markers were trained on, for the card: the user's images by name and sha256."""
    card: dict[str, Any] = {"source": source, "crops": dict(sorted(crops.counts.items()))}
    if crops.images:
        card["images"] = [{"name": im.name, "sha256": im.sha256} for im in crops.images]
    return card


def _charts(ctx: JobContext, history: list[dict[str, Any]]) -> None:
    def line(title: str, fields: list[tuple[str, str]], y_title: str) -> dict[str, Any]:
        rows = [{"step": r["step"], "value": r[f], "series": label} for r in history for f, label in fields]
        return lines(
            title,
            rows,
            x="step",
            y="value",
            x_title="Step",
            y_title=y_title,
            color="series",
            color_title=None,
            points=True,
            y_zero=False,
        )

    ctx.chart(
        "bit_accuracy",
        line(
            "Bit accuracy (fresh keys)",
            [("heldout_bit_accuracy", "held-out, clean"), ("train_bit_accuracy", "training, distorted")],
            "Bit accuracy",
        ),
    )
    ctx.chart("fidelity", line("PSNR against the frozen decoder", [("heldout_psnr", "PSNR (dB)")], "dB"))
    ctx.chart(
        "losses", line("Losses", [("loss_key", "key (BCE)"), ("loss_imp", "imperceptibility"), ("lam", "λ")], "Loss")
    )
