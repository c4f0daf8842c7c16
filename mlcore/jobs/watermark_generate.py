"""``watermark-generate``: sample new images from a MOLM-watermarked generator under a team key.

The latent model samples fresh latents (z_T ~ N(0, I), DDIM down to z_0); the VAE decoder runs with
the adapters the key selects (MOLM, method card section 2) — new images, not re-decoded
training images. Each image is checked on the way out: the extractor's bits are compared with
the key, and the same latents decoded without markers give the PSNR/SSIM of the mark.

The zoo's markers (``zoo:molm-tiny``) are committed to the repository, so anyone can read a mark they
make. A key file from a production platform says whether it may be used with them
(``allow_public_weights``, set by the operator); when it may not, the job refuses before sampling.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlcore.jobs import Comparison, Int, JobContext, JobError, JobSpec, Key, Metric, Model, Seed
from mlcore.jobs.wording import count


def _summarize(scalars: Mapping[str, Any]) -> str:
    """ "Generated 16 watermarked images: self-check bit accuracy 99.0% (worst image 44 bits), PSNR …"."""
    return (
        f"Generated {scalars['images']:.0f} watermarked images: self-check bit accuracy "
        f"{scalars['self_check_bit_accuracy']:.1%} (worst image {scalars['min_bits_matched']:.0f} bits matched), "
        f"PSNR {scalars['psnr']:.1f} dB and SSIM {scalars['ssim']:.3f} against the unmarked decode."
    )


spec = JobSpec(
    name="watermark-generate",
    metrics=(
        Metric(
            key="self_check_bit_accuracy",
            label="Self-check bit accuracy",
            unit="%",
            better="higher",
            description="Share of key bits the extractor reads back from the generated PNGs.",
        ),
        Metric(
            key="min_bits_matched",
            label="Worst image",
            unit="bits",
            better="higher",
            description="Key bits matched in the worst of the generated images.",
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
    comparison=Comparison.none("Generates images with one key; watermark-robustness compares methods."),
    title="Generate watermarked images (MOLM)",
    summary="Sample N new images from a generator whose decoder carries MOLM markers switched by your team's key.",
    version=1,
    queue="gpu",
    soft_time_limit=1800,
    time_limit=1900,
    params=(
        Model(
            name="model",
            accepts=("watermark-markers",),
            default="zoo:molm-tiny",
            help="A generator with trained markers (zoo:molm-tiny, or the output of a watermark-train job).",
        ),
        Key(name="key", required=True, help="One of your team's watermark keys; its bits pick the adapters."),
        Int(name="count", default=16, min=1, max=1024, help="Images to generate."),
        Int(
            name="steps",
            default=10,
            min=1,
            max=1000,
            help="Sampler (DDIM) steps. The zoo's markers were trained and measured on 10-step samples; "
            "images from longer sampling read back fewer key bits (docs/watermarking.md).",
        ),
        Seed(name="seed"),
    ),
    guide=(
        "### What you can bring\n"
        "A `watermark-markers` item of your team's library (trained by watermark-train, on your own images if you "
        "like) and one of your team's keys. To mark photos you already have, use watermark-embed.\n\n"
        "### How to read this\n"
        "The gallery holds the generated PNGs, each carrying your key. **Self-check bit accuracy** is the share "
        "of key bits the extractor reads back from those PNGs (1.0 = every bit); **PSNR/SSIM** compare each image "
        "with the same latent decoded *without* markers (higher = less visible; ≥ 32 dB is the project's target). "
        "The grid shows watermarked images above their unwatermarked twins.\n\n"
        "**The method.** MOLM (ICLR 2026) keeps the generator frozen and adds P parallel LoRA adapters to every "
        "ResNet convolution of the VAE decoder; your key, cut into log2(P)-bit symbols, switches one adapter on per "
        "convolution, so any key works without retraining and generation costs nothing extra. Check images with "
        "*watermark-verify* or the public portal; the *watermark-robustness* job measures what survives attacks."
    ),
    sample={"model": "zoo:molm-tiny", "count": 8, "steps": 10, "seed": 0},
    summarize=_summarize,
)


def run(params: dict[str, Any], inputs: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    from mlcore.watermark.disclosure import key_for_marking

    if "model" not in inputs:
        raise JobError("Pick a generator with markers (e.g. zoo:molm-tiny).")
    if "key" not in inputs:
        raise JobError("Pick one of your team's watermark keys.")
    record, public = key_for_marking(Path(inputs["key"]), Path(inputs["model"]))
    # The refusals above come before torch and diffusers are imported: they cost a refused job nothing.
    import torch
    from PIL import Image

    from mlcore.watermark.calibration import matched_bits
    from mlcore.watermark.generator import GeneratorError, from_uint8
    from mlcore.watermark.pipeline import decode_under_keys, key_tensor, load_bundle, read_bits
    from mlcore.watermark.quality import psnr, ssim

    ctx.progress(0.02, "loading the generator")
    try:
        bundle = load_bundle(Path(inputs["model"]), need_unet=True)
    except GeneratorError as exc:
        raise JobError(f"Model: {exc}.") from None
    try:
        key = key_tensor(record.bits, bundle.num_bits)
    except ValueError as exc:
        raise JobError(f"Key {record.name!r}: {exc}; pick a {bundle.num_bits}-bit key or other markers.") from None
    torch.manual_seed(params["seed"])
    ctx.log(
        f"generator: {bundle.card.get('routed_blocks') and len(bundle.card['routed_blocks'])} routed blocks, "
        f"{bundle.num_bits}-bit keys; key {record.name!r} ({record.id})"
    )
    if public:
        ctx.log(
            "These images are marked with the public demo markers (zoo:molm-tiny): anyone can read the "
            "mark offline, and with ten of them stamp it on other images, so it shows how the method works, "
            "not who made the image."
        )
    ctx.progress(0.1, f"sampling {params['count']} latents")
    latents = bundle.generator.sample_latents(params["count"], seed=params["seed"], steps=params["steps"])
    ctx.raise_if_cancelled()
    ctx.progress(0.7, "decoding under the key")
    marked = decode_under_keys(bundle, latents, key)
    clean = decode_under_keys(bundle, latents, None)
    bits = read_bits(bundle.extractor, marked)
    matched = matched_bits(bits, key.numpy())
    x, y = from_uint8(marked), from_uint8(clean)
    metrics = {
        "self_check_bit_accuracy": float(matched.mean() / bundle.num_bits),
        "min_bits_matched": float(matched.min()),
        "psnr": float(psnr(x, y)),
        "ssim": float(ssim(x, y)),
        "images": float(len(marked)),
    }
    folder = ctx.workdir / "images"
    folder.mkdir(parents=True, exist_ok=True)
    for i, pixels in enumerate(marked):
        path = folder / f"{record.name[:40].replace('/', '_')}-{i:04d}.png"
        Image.fromarray(pixels).save(path)
        if i < 32:  # the gallery shows the first 32; all are in the folder artifact
            ctx.artifact(f"image-{i:04d}.png", path, "image/png")
    ctx.artifact("images", folder)
    ctx.register("images", folder, {"name": f"{count(len(marked), 'image')} watermarked with {record.name}"})
    grid = _grid(marked[:8], clean[:8])
    grid_path = ctx.workdir / "watermarked-vs-clean.png"
    Image.fromarray(grid).resize((grid.shape[1] * 4, grid.shape[0] * 4), Image.Resampling.NEAREST).save(grid_path)
    ctx.artifact("watermarked-vs-clean.png", grid_path, "image/png")
    for name, value in metrics.items():
        ctx.metric(name, value)
    ctx.log(
        f"{count(len(marked), 'image')}; self-check bit accuracy {metrics['self_check_bit_accuracy']:.3f} "
        f"(worst image {int(matched.min())}/{bundle.num_bits} bits), PSNR {metrics['psnr']:.1f} dB, "
        f"SSIM {metrics['ssim']:.3f} against the unwatermarked decoder"
    )
    ctx.progress(1.0, "done")
    return metrics


def _grid(top: Any, bottom: Any) -> Any:
    import numpy as np

    return np.concatenate([np.concatenate(list(top), axis=1), np.concatenate(list(bottom), axis=1)], axis=0)
